# frozen_string_literal: true

module WebhookInbox
  module Rails
    # RouteCheck - the boot check's second question: are the event routes the app's schema
    # file declares (db/schema.rb's add_webhook_inbox_route lines, structure.sql's route
    # upserts) in its database? A route that is missing leaves its events pending with
    # 'no route for event type', which otherwise nobody sees until something is not done.
    module RouteCheck
      SCHEMA_RB = /^\s*add_webhook_inbox_route\s+("(?:[^"\\]|\\.)*")/
      STRUCTURE_SQL = /^INSERT INTO webhook_inbox_routes \([^)]*\) VALUES \('((?:[^']|'')*)'/

      module_function

      # The warning for connection's database, or nil: every declared route is there, the
      # schema file declares none, or (test) the database is about to be rebuilt from it.
      def problem(connection, db_config: connection.pool.db_config)
        path = schema_path(db_config)
        declared = path ? declared(path) : []
        return nil if declared.empty?

        missing = declared - connection.webhook_inbox_route_rows.map(&:first)
        return nil if missing.empty? || rebuilt_before_tests?(db_config)

        shown = missing.first(5).join(", ") + (missing.size > 5 ? ", ..." : "")
        "webhook_inbox: #{missing.size} of the #{declared.size} event routes in #{File.basename(path)} are missing " \
          "from the database (#{shown}): events of those types wait unprocessed ('no route for event type'). " \
          "Something deleted them from webhook_inbox_routes (DatabaseCleaner required after boot? give it " \
          "except: %w[webhook_inbox_routes]). In test `bin/rails db:test:prepare` brings them back; in development " \
          "`bin/rails db:schema:load` (it resets the data) or the migrations' add_webhook_inbox_route."
      end

      # The event types the schema file at path declares routes for, in file order.
      def declared(path)
        text = File.read(path)
        if path.end_with?(".sql")
          text.scan(STRUCTURE_SQL).map { |(type)| type.gsub("''", "'") }
        else
          text.scan(SCHEMA_RB).map { |(literal)| ruby_string(literal) }
        end
      rescue SystemCallError
        []
      end

      # The dumper writes String#inspect, which keeps UTF-8 as is; undump takes ASCII only.
      def ruby_string(literal)
        literal.ascii_only? ? literal.undump : literal[1..-2].gsub(/\\(.)/, '\\1')
      end

      def schema_path(db_config)
        path = ::ActiveRecord::Tasks::DatabaseTasks.schema_dump_path(db_config)
        path && File.file?(path) ? path : nil
      end

      # Rails' test helper reloads a test database whose schema is not the file's (maintain_test_schema).
      def rebuilt_before_tests?(db_config)
        ::Rails.env.test? && ::ActiveRecord.maintain_test_schema &&
          !::ActiveRecord::Tasks::DatabaseTasks.schema_up_to_date?(db_config)
      end
    end
  end
end
