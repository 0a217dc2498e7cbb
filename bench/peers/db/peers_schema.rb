# frozen_string_literal: true

# The peers' own tables, from their install generators' templates at the bundled versions:
# GoodJob's create_good_jobs migration and Solid Queue's db/queue_schema.rb (both in the
# app's one database, as the peers' documents allow). Loaded by bench/peers/run into the
# booted app; the orders tables come from db/examples/orders.sql.
require "erb"

good_job = File.join(Gem.loaded_specs.fetch("good_job").full_gem_path,
                     "lib/generators/good_job/templates/install/migrations/create_good_jobs.rb.erb")
eval(ERB.new(File.read(good_job)).result_with_hash(migration_version: "[#{ActiveRecord::Migration.current_version}]")) # rubocop:disable Security/Eval
ActiveRecord::Migration.suppress_messages { CreateGoodJobs.new.migrate(:up) }

ActiveRecord::Migration.suppress_messages do
  load File.join(Gem.loaded_specs.fetch("solid_queue").full_gem_path,
                 "lib/generators/solid_queue/install/templates/db/queue_schema.rb")
end
