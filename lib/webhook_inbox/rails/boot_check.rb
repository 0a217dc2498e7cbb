# frozen_string_literal: true

module WebhookInbox
  module Rails
    # BootCheck - what the app's boot checks:
    # - run (development and test): says when the inbox schema is missing or older than this
    #   gem expects (after a gem upgrade), or when routes the schema file declares are missing
    #   (RouteCheck), with the command that fixes it. Warns, never
    #   raises: db:create and friends must boot before the database exists, so rake tasks,
    #   generators and an unreachable database are skipped silently;
    # - check_configuration! (every environment): raises ConfigurationError naming each
    #   endpoint whose secrets, scope or provider options cannot receive (a nil credential),
    #   so the app does not boot to answer every delivery 500. Rake tasks and generators are
    #   skipped (assets:precompile and db:* run without credentials; webhook_inbox:doctor
    #   lists the same problems).
    module BootCheck
      module_function

      def check_configuration!(config = WebhookInbox.configuration)
        config.validate! unless rake_or_generator?
      end

      def run(logger: ::Rails.logger, io: $stderr)
        return if rake_or_generator?

        message = problem
        return unless message

        logger&.warn(message)
        io&.puts(message)
      end

      # The Schema.problem text for the app's database, else RouteCheck's, or nil (current, or unreachable).
      def problem
        ::ActiveRecord::Base.connection_pool.with_connection do |conn|
          version = WebhookInbox::Schema.installed_version(->(sql) { conn.select_value(sql, "webhook_inbox boot check") })
          WebhookInbox::Schema.problem(version) || RouteCheck.problem(conn)
        end
      rescue ::ActiveRecord::ActiveRecordError, ArgumentError
        nil
      end

      def rake_or_generator?
        (defined?(::Rake.application) && ::Rake.application.top_level_tasks.any?) ||
          defined?(::Rails::Generators::Base)
      end
    end
  end
end
