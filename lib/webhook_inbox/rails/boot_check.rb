# frozen_string_literal: true

module WebhookInbox
  module Rails
    # BootCheck - what the app's boot checks:
    # - run (development and test): says when the inbox schema is missing or older than this
    #   gem expects (after a gem upgrade), or when routes the schema file declares are missing
    #   (RouteCheck), with the command that fixes it. On a test database that Rails is about to
    #   load from the schema file (maintain_test_schema: the first test run after db:create)
    #   it says nothing: that load brings the inbox with it. Warns, never
    #   raises: db:create and friends must boot before the database exists, so rake tasks,
    #   generators and an unreachable database are skipped silently;
    # - check_configuration! (every environment): raises ConfigurationError naming each
    #   endpoint whose secrets, scope or provider options cannot receive (a nil credential),
    #   so the app does not boot to answer every delivery 500. Rake tasks and generators are
    #   skipped (assets:precompile and db:* run without credentials; webhook_inbox:doctor
    #   lists the same problems);
    # - effects_note (development: stderr and the log; test: the log): with Ruby handlers and an
    #   ActiveJob adapter that does not commit with the database (:async, the default), that
    #   their jobs are captured into the outbox and jobs enqueued elsewhere are not.
    module BootCheck
      module_function

      def check_configuration!(config = WebhookInbox.configuration)
        config.validate! unless rake_or_generator?
      end

      def run(logger: ::Rails.logger, io: $stderr)
        return if rake_or_generator?

        note_effects(logger, ::Rails.env.development? ? io : nil)
        return if test_schema_pending?

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

      # Whether Rails will (re)load this test database from the schema file before the tests
      # run (ActiveRecord::Migration.maintain_test_schema!, after boot): the inbox comes with it.
      def test_schema_pending?
        return false unless ::Rails.env.test?

        ::ActiveRecord::Base # loaded first: its on_load hooks copy config.active_record.maintain_test_schema over
        return false unless ::ActiveRecord.respond_to?(:maintain_test_schema) && ::ActiveRecord.maintain_test_schema

        ::ActiveRecord::Migration.respond_to?(:any_schema_needs_update?, true) &&
          ::ActiveRecord::Migration.send(:any_schema_needs_update?) ? true : false
      rescue ::ActiveRecord::ActiveRecordError, ArgumentError
        false
      end

      def note_effects(logger, io)
        message = effects_note or return
        logger&.info(message)
        io&.puts(message)
      end

      # The note about the app's job adapter, or nil (no Ruby handlers, or an adapter that
      # commits with the database).
      def effects_note(app = ::Rails.application)
        return nil unless app.root.join(Handlers::APP_DIR).directory? || !Handlers.registry.empty?

        adapter = (app.config.respond_to?(:active_job) && app.config.active_job.queue_adapter) || :async
        return nil unless adapter.is_a?(Symbol) || adapter.is_a?(String)
        return nil unless WebhookInbox::Effects.non_transactional?(adapter)

        "webhook_inbox: ActiveJob's adapter :#{adapter} does not commit with the database. Jobs and mails enqueued " \
          "inside Ruby handlers (deliver_later, perform_later) are kept in the inbox's outbox with the handler's " \
          "transaction and performed by the Ruby worker after it, once; enqueued anywhere else (a controller, a " \
          "receive_effect block) they are lost if the process stops first. See docs/effects.md."
      end

      def rake_or_generator?
        (defined?(::Rake.application) && ::Rake.application.top_level_tasks.any?) ||
          defined?(::Rails::Generators::Base)
      end
    end
  end
end
