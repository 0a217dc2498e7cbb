# frozen_string_literal: true

require "rails/railtie"
require_relative "boot_check"
require_relative "dashboard_check"
require_relative "database_config"
require_relative "route_check"
require_relative "schema_dumper"
require_relative "schema_statements"
require_relative "structure_dump"
require_relative "truncation"

module WebhookInbox
  module Rails
    # Railtie - wires the gem into a Rails app. Loaded by `require "webhook_inbox"` when Rails is.
    # - database: ActiveRecord's configuration unless WebhookInbox.configure sets database_url;
    # - schema: migrations and db/schema.rb get load_webhook_inbox_schema and the route
    #   helpers; schema.rb and structure.sql keep the inbox (see SchemaDumper, StructureDump);
    # - truncation (db:truncate_all, parallel test databases, DatabaseCleaner) keeps the routes;
    # - test environment: receipts go through ActiveRecord's connection (they roll back with
    #   transactional tests), unless the app sets WebhookInbox.configuration.store;
    # - boot: endpoints that cannot receive (a nil secret) stop it; in development and test a
    #   check warns when the inbox schema is missing or stale, and when the app's job adapter
    #   does not commit with the database (jobs from Ruby handlers are captured all the same);
    # - jobs and mails enqueued inside a Ruby handler go to the inbox's outbox (Effects);
    # - boot outside development and test: one error line when the dashboard is mounted and
    #   its protection is not in force (DashboardCheck);
    # - logs go to Rails.logger (provider, scope, event id and outcome; never payloads);
    # - generators webhook_inbox:install and webhook_inbox:handler, rake webhook_inbox:*.
    class Railtie < ::Rails::Railtie
      initializer "webhook_inbox.configuration" do
        config = WebhookInbox.configuration
        config.logger ||= ::Rails.logger
        config.default_database_url ||= -> { DatabaseConfig.current }
        config.store = :active_record if ::Rails.env.test?
      end

      # Rejected deliveries are counted in memory and flushed to webhook_inbox_rejections
      # every few seconds, for the dashboard (never per request: see Rejections). Not in the
      # test environment: a background thread would write beside the test's transaction.
      initializer "webhook_inbox.rejections" do
        WebhookInbox.rejections.flusher ||= Rejections.active_record_flusher unless ::Rails.env.test?
      end

      # Refused deliveries of endpoints with keep_refused: written to webhook_inbox_refused in
      # the background (see Refused), on ActiveRecord's database; not in the test environment
      # (as above: set WebhookInbox.refused.exec to test it).
      initializer "webhook_inbox.refused" do
        WebhookInbox.refused.exec ||= Refused.active_record_exec unless ::Rails.env.test?
      end

      initializer "webhook_inbox.filter_parameters" do |app|
        # Signature headers and bodies never appear in Rails' own parameter logs either.
        app.config.filter_parameters |= %i[secret signature]
      end

      initializer "webhook_inbox.schema" do
        ActiveSupport.on_load(:active_record_postgresqladapter) do
          include SchemaStatements
          prepend Truncation::Adapter
        end
        ActiveSupport.on_load(:active_record) do
          require "active_record/schema_dumper"
          ::ActiveRecord::Migration.include(MigrationMethods)
          ::ActiveRecord::SchemaDumper.prepend(SchemaDumper)
          ::ActiveRecord::Tasks::DatabaseTasks.singleton_class.prepend(StructureDump)
          Truncation.database_cleaner! # after DatabaseCleaner's own on_load, when the Gemfile loads it
        end
      end

      # A handler's perform_later / deliver_later commits with its writes (Effects::JobCapture).
      initializer "webhook_inbox.effects" do
        ActiveSupport.on_load(:active_job) { WebhookInbox::Effects.install! }
        ActiveSupport.on_load(:action_mailer) { WebhookInbox::Effects.watch_direct_deliveries!(::Rails.logger) }
      end

      config.after_initialize do
        Truncation.database_cleaner!
        BootCheck.check_configuration! # every environment: a nil secret stops boot, naming the endpoint
        BootCheck.run if ::Rails.env.development? || ::Rails.env.test?
      end

      initializer "webhook_inbox.dashboard_check" do
        ActiveSupport.on_load(:after_routes_loaded) { DashboardCheck.log_at_boot(::Rails.application) }
      end

      rake_tasks do
        load File.expand_path("tasks.rake", __dir__)
      end

      generators do
        require_relative "../../generators/webhook_inbox/install/install_generator"
        require_relative "../../generators/webhook_inbox/handler/handler_generator"
      end
    end
  end
end
