# frozen_string_literal: true

# A minimal Rails app receiving webhooks through the gem (spec/integration, bench/receive,
# spec/support/stack.rb). Environment:
#   DATABASE_URL (libpq conninfo or URL), SECRET_KEY_BASE, STRIPE_WEBHOOK_SECRET, STRIPE_SCOPE,
#   DIDIT_WEBHOOK_SECRET, DIDIT_SCOPE; RAILS_LOG=1 logs to stdout.
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
require "pg"

# ActiveRecord only parses URLs; the specs hand out libpq conninfo strings.
ENV["WI_DATABASE_URL"] ||= ENV["DATABASE_URL"]
ENV.delete("DATABASE_URL") unless ENV["DATABASE_URL"].to_s.include?("://")

require "webhook_inbox"

module RailsApp
  class Application < Rails::Application
    config.load_defaults 7.2
    config.root = File.expand_path("..", __dir__)
    config.api_only = true
    config.eager_load = true
    config.cache_classes = true
    config.consider_all_requests_local = false
    config.secret_key_base = ENV.fetch("SECRET_KEY_BASE", "x" * 64)
    config.hosts.clear
    config.cache_store = :null_store
    config.logger = ENV["RAILS_LOG"] ? ActiveSupport::Logger.new($stdout) : ActiveSupport::Logger.new(nil)
    config.log_level = :info
    config.active_record.dump_schema_after_migration = false
  end
end
