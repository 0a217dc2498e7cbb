# frozen_string_literal: true

module WebhookInbox
  module Rails
    # SchemaDumper - db/schema.rb keeps the inbox (prepended to ActiveRecord::SchemaDumper).
    # Rails cannot dump the inbox's functions, trigger or regproc column, nor route rows, so
    # the gem's tables are left out of the table list and one section is written after the
    # app's tables instead:
    #
    #   load_webhook_inbox_schema version: 4          # the gem's objects, from the gem
    #   webhook_inbox_functions <<-'WEBHOOK_INBOX_SQL'  # the app's SQL functions (handlers)
    #   add_webhook_inbox_route "payment_intent.succeeded", "orders_on_payment_succeeded"
    #   add_webhook_inbox_route "status.*", destination: "app_identity"
    #
    # so db:schema:load, db:prepare and the test databases get a working inbox back.
    # WebhookInbox.configuration.dump_functions = false leaves functions to another tool (fx).
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
        functions(stream) if WebhookInbox.configuration.dump_functions
        @connection.webhook_inbox_route_rows.each do |type, handler, destination|
          stream.puts "  add_webhook_inbox_route #{type.inspect}, #{destination ? "destination: #{destination.inspect}" : handler.inspect}"
        end
      end

      def functions(stream)
        defs = @connection.webhook_inbox_app_functions
        return if defs.empty?

        sql = defs.map { |d| "#{d.rstrip};\n" }.join("\n")
        raise ActiveRecord::ActiveRecordError, "a SQL function contains the line #{TERMINATOR}" if sql.match?(/^\s*#{TERMINATOR}$/)

        stream.puts "  webhook_inbox_functions <<-'#{TERMINATOR}'"
        stream.print sql
        stream.puts "  #{TERMINATOR}"
      end
    end
  end
end
