# frozen_string_literal: true

require "spec_helper"
require "tmpdir"
require "open3"
require_relative "../support/receiver_helpers"

# `rails g webhook_inbox:install` in a subprocess (Rails stays out of this rspec process),
# then the generated migration applied by ActiveRecord to an empty database.
RSpec.describe "rails g webhook_inbox:install" do
  include ReceiverHelpers

  it "writes a migration holding the gem's db/*.sql that ActiveRecord applies" do
    pg = TestDatabase.cluster
    db = "gen_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{db}", db: "postgres")
    Dir.mktmpdir do |dir|
      script = <<~RUBY
        require "rails"
        require "active_record"
        require "active_record/railtie"
        require "webhook_inbox"
        require "generators/webhook_inbox/install/install_generator"
        WebhookInbox::Generators::InstallGenerator.start([], destination_root: #{dir.inspect})
        file = Dir[File.join(#{dir.inspect}, "db/migrate/*_create_webhook_inbox.rb")].first
        ActiveRecord::Base.establish_connection(#{ReceiverHelpers.ar_url(pg).sub(pg.dbname, db).inspect})
        load file
        CreateWebhookInbox.new.migrate(:up)
        CreateWebhookInbox.new.migrate(:up) # idempotent SQL
      RUBY
      out, status = Open3.capture2e("ruby", "-I", File.join(ReceiverHelpers::ROOT, "lib"), "-e", script)
      expect(status).to be_success, out
      migration = File.read(Dir[File.join(dir, "db/migrate/*_create_webhook_inbox.rb")].first)
      expect(migration).to include("class CreateWebhookInbox < ActiveRecord::Migration[7.2]")
      expect(migration).to include(File.read(File.join(ReceiverHelpers::ROOT, "db/001_inbox.sql")).lines[3].strip)
      expect(File.read(File.join(dir, "config/initializers/webhook_inbox.rb"))).to include("WebhookInbox.configure")
    end
    expect(pg.psql("SELECT count(*) FROM information_schema.tables WHERE table_name = 'webhook_inbox'", db: db).to_i).to eq(1)
    expect(pg.psql("SELECT obj_description('webhook_inbox'::regclass)", db: db)).to include("Verified webhook deliveries")
  end
end
