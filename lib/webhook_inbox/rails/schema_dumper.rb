# frozen_string_literal: true

module WebhookInbox
  module Rails
    # SchemaDumper - db/schema.rb keeps the inbox (prepended to ActiveRecord::SchemaDumper).
    # Rails cannot dump the inbox's functions, trigger or regproc column, nor route rows, nor
    # the triggers a migration puts on the app's tables, so the gem's tables are left out of
    # the table list and one section is written after the app's tables instead:
    #
    #   load_webhook_inbox_schema version: 4          # the gem's objects, from the gem
    #   webhook_inbox_functions <<-'WEBHOOK_INBOX_SQL'  # the app's SQL functions (handlers)
    #   webhook_inbox_triggers <<-'WEBHOOK_INBOX_SQL'   # the app's triggers (CREATE TRIGGER ...)
    #   add_webhook_inbox_route "payment_intent.succeeded", "orders_on_payment_succeeded"
    #   add_webhook_inbox_route "status.*", destination: "app_identity"
    #
    # so db:schema:load, db:prepare and the test databases get a working inbox back.
    # WebhookInbox.configuration.dump_functions = false leaves functions and triggers to
    # another tool (fx dumps both).
    module SchemaDumper
      TERMINATOR = "WEBHOOK_INBOX_SQL"

      private

      def ignored?(table_name)
        super || WebhookInbox::Schema::TABLES.include?(table_name.to_s)
      end

      def tables(stream)
        super
        webhook_inbox(stream)
      end

      def webhook_inbox(stream)
        version = @connection.webhook_inbox_schema_version
        return if version.zero?

        stream.puts
        stream.puts "  # webhook_inbox: the gem's schema, the app's SQL functions and the event routes"
        stream.puts "  load_webhook_inbox_schema version: #{version}"
        if WebhookInbox.configuration.dump_functions
          functions(stream)
          triggers(stream)
        end
        @connection.webhook_inbox_route_rows.each do |type, handler, destination, strict, batch|
          stream.puts "  add_webhook_inbox_route #{type.inspect}, #{destination ? "destination: #{destination.inspect}" : handler.inspect}" \
                      "#{", strict: true" if strict}#{", batch: #{batch.inspect}" if batch}"
        end
      end

      def functions(stream)
        defs = @connection.webhook_inbox_app_functions
        sql_section(stream, :webhook_inbox_functions, "a SQL function", defs.map { |d| "#{d.rstrip};\n" }.join("\n"))
      end

      # Triggers on tables this dump leaves out (ignore_tables) would not load: skipped too.
      def triggers(stream)
        defs = @connection.webhook_inbox_app_triggers.reject do |table, _|
          ignored?(table) && !WebhookInbox::Schema::TABLES.include?(table)
        end
        sql_section(stream, :webhook_inbox_triggers, "a trigger", defs.map { |_, d| "#{d}\n" }.join)
      end

      def sql_section(stream, method, what, sql)
        return if sql.empty?
        raise ActiveRecord::ActiveRecordError, "#{what} contains the line #{TERMINATOR}" if sql.match?(/^\s*#{TERMINATOR}$/)

        stream.puts "  #{method} <<-'#{TERMINATOR}'"
        stream.print sql
        stream.puts "  #{TERMINATOR}"
      end
    end
  end
end
