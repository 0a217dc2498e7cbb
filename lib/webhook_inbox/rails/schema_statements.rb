# frozen_string_literal: true

module WebhookInbox
  module Rails
    # SchemaStatements - what migrations and db/schema.rb call to build the inbox (mixed into
    # ActiveRecord's connection adapters, so `load_webhook_inbox_schema version: 4` works in
    # both, like fx's create_function):
    #
    #   load_webhook_inbox_schema version: 4           # the gem's db/ (at its own version), never echoed
    #   add_webhook_inbox_route "payment_intent.succeeded", "orders_on_payment_succeeded"
    #   add_webhook_inbox_route "status.*", destination: :app_identity  # v7: to an outbox destination
    #   add_webhook_inbox_route "customer.*", "app_on_customer", strict: true  # v14: see ordering
    #   add_webhook_inbox_route "payment_intent.succeeded", "orders_on_payment_succeeded",
    #                           batch: "orders_on_payment_succeeded_batch"      # v19: see batch handlers
    #   remove_webhook_inbox_route "payment_intent.succeeded"
    #   webhook_inbox_functions sql                    # CREATE FUNCTION ... (schema.rb's dump)
    #   webhook_inbox_triggers sql                     # CREATE TRIGGER ... on the app's tables (ditto)
    #
    # Plus the reads the dumpers need: webhook_inbox_route_rows, webhook_inbox_app_functions,
    # webhook_inbox_app_triggers.
    # Migrations get them through MigrationMethods.
    module SchemaStatements
      ROUTE_UPSERT = <<~SQL.tr("\n", " ").freeze
        INSERT INTO webhook_inbox_routes (event_type, handler) VALUES (%s, %s::regproc)
        ON CONFLICT (event_type) DO UPDATE SET handler = EXCLUDED.handler
      SQL
      # From schema v7 on (the destination column), a route is written whole.
      DESTINATION_ROUTE_UPSERT = <<~SQL.tr("\n", " ").freeze
        INSERT INTO webhook_inbox_routes (event_type, handler, destination) VALUES (%s, %s::regproc, %s)
        ON CONFLICT (event_type) DO UPDATE SET handler = EXCLUDED.handler, destination = EXCLUDED.destination
      SQL
      DELIVER_HANDLER = "webhook_inbox_deliver"
      DESTINATION_NAME = /\A[a-z][a-z0-9_]{0,62}\z/

      # The app's own functions: every function and procedure in the search path that no
      # extension owns and whose name does not start with webhook_inbox_ (the gem's, recreated
      # by load_webhook_inbox_schema). Handlers and the helpers they call are among them.
      APP_FUNCTIONS = <<~SQL.freeze
        SELECT pg_get_functiondef(p.oid)
          FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = ANY (current_schemas(false))
           AND p.prokind IN ('f', 'p')
           AND p.proname NOT LIKE 'webhook\\_inbox\\_%'
           AND NOT EXISTS (SELECT 1 FROM pg_depend d
                            WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
         ORDER BY n.nspname, p.proname, p.oid::regprocedure::text
      SQL

      # The app's own triggers: every trigger a user created on a table (or partitioned table)
      # in the search path, one row each, [table, definition]: pg_get_triggerdef's CREATE TRIGGER
      # plus the ALTER TABLE that puts back a trigger not enabled as usual. Left out: internal
      # ones (foreign keys), the clones a partition gets of its parent's (recreated with it),
      # extension-owned ones, and the gem's (webhook_inbox_* on its tables, recreated by
      # load_webhook_inbox_schema).
      APP_TRIGGERS = <<~SQL.freeze
        SELECT c.relname,
               pg_get_triggerdef(t.oid) || ';' ||
               CASE t.tgenabled
                 WHEN 'D' THEN format(E'\\nALTER TABLE %s DISABLE TRIGGER %I;', t.tgrelid::regclass, t.tgname)
                 WHEN 'R' THEN format(E'\\nALTER TABLE %s ENABLE REPLICA TRIGGER %I;', t.tgrelid::regclass, t.tgname)
                 WHEN 'A' THEN format(E'\\nALTER TABLE %s ENABLE ALWAYS TRIGGER %I;', t.tgrelid::regclass, t.tgname)
                 ELSE ''
               END
          FROM pg_trigger t
          JOIN pg_class c ON c.oid = t.tgrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = ANY (current_schemas(false))
           AND c.relkind IN ('r', 'p')
           AND NOT t.tgisinternal
           AND t.tgparentid = 0
           AND NOT (c.relname IN (#{WebhookInbox::Schema::TABLES.map { |t| "'#{t}'" }.join(', ')})
                AND t.tgname LIKE 'webhook\\_inbox\\_%')
           AND NOT EXISTS (SELECT 1 FROM pg_depend d
                            WHERE d.classid = 'pg_trigger'::regclass AND d.objid = t.oid AND d.deptype = 'e')
         ORDER BY n.nspname, c.relname, t.tgname
      SQL

      # Brings the inbox schema to WebhookInbox::Schema::VERSION: the gem's numbered files the
      # database does not have yet, then every function file (db/README.md), in one transaction
      # under the migrate lock. version is what the migration was written for (1..VERSION); the
      # functions exist only in their current form, so an older one builds VERSION too. A newer
      # schema is left as it is. Never goes down; prints nothing itself.
      def load_webhook_inbox_schema(version: WebhookInbox::Schema::VERSION)
        WebhookInbox::Schema.migrations(to: version) # raises for a version newer than the gem
        transaction(requires_new: true) do
          execute(WebhookInbox::Schema::LOCK_SQL, "webhook_inbox migrate lock")
          steps = WebhookInbox::Schema.statements(after: webhook_inbox_schema_version)
          steps.each { |name, sql| execute(sql, "webhook_inbox #{name}") }
        end
        nil
      end

      # The database's inbox schema version (0: none).
      def webhook_inbox_schema_version
        WebhookInbox::Schema.installed_version(->(sql) { select_value(sql, "webhook_inbox schema version") })
      end

      # Routes event_type (exact, 'prefix*' or '*') to the SQL function handler (a name), or
      # (schema v7) to an outbox destination: the sidecar then POSTs each event, once, to the
      # destination of that name (the app's receive_effect, say) with retries and backoff.
      # strict: (schema v14) a quarantined event holds the later events of its ordering key.
      # batch: (schema v19) a function (webhook_inbox[]) RETURNS text[] doing handler's work
      # for a run of events at once (db/019_batch_handlers.sql has the contract).
      def add_webhook_inbox_route(event_type, handler = nil, destination: nil, strict: false, batch: nil)
        if handler.nil? == destination.nil?
          raise ArgumentError, "add_webhook_inbox_route #{event_type.to_s.inspect}: give a handler function or destination:, not both"
        end
        if batch && destination
          raise ArgumentError, "add_webhook_inbox_route #{event_type.to_s.inspect}: batch: needs a handler function, not destination:"
        end

        if destination
          webhook_inbox_route_destination!(destination)
          execute(format(DESTINATION_ROUTE_UPSERT, quote(event_type.to_s), quote(DELIVER_HANDLER), quote(destination.to_s)),
                  "webhook_inbox route")
        elsif webhook_inbox_route_destinations?
          execute(format(DESTINATION_ROUTE_UPSERT, quote(event_type.to_s), quote(handler.to_s), "NULL"), "webhook_inbox route")
        else
          execute(format(ROUTE_UPSERT, quote(event_type.to_s), quote(handler.to_s)), "webhook_inbox route")
        end
        webhook_inbox_route_strict!(event_type, strict)
        webhook_inbox_route_batch!(event_type, batch)
      end

      def remove_webhook_inbox_route(event_type)
        execute("DELETE FROM webhook_inbox_routes WHERE event_type = #{quote(event_type.to_s)}", "webhook_inbox route")
      end

      # Runs function definitions with body checks off (as pg_dump does), so functions that
      # call each other load in any order.
      def webhook_inbox_functions(sql)
        execute("SET check_function_bodies = off")
        execute(sql, "webhook_inbox functions")
      ensure
        execute("RESET check_function_bodies")
      end

      # Runs trigger definitions (schema.rb's dump: after the tables and the functions they call).
      def webhook_inbox_triggers(sql)
        execute(sql, "webhook_inbox triggers")
      end

      # [[event_type, handler, destination or nil, strict, batch handler or nil], ...] in
      # event_type order.
      def webhook_inbox_route_rows
        return [] unless select_value("SELECT to_regclass('webhook_inbox_routes') IS NOT NULL")

        destination = webhook_inbox_route_destinations? ? "destination" : "NULL"
        strict = webhook_inbox_route_column?("strict") ? "strict" : "false"
        batch = webhook_inbox_route_column?("batch_handler") ? "batch_handler::text" : "NULL"
        select_rows("SELECT event_type, handler::text, #{destination}, #{strict}, #{batch} FROM webhook_inbox_routes " \
                    "ORDER BY event_type", "webhook_inbox routes").map do |type, handler, dest, st, bh|
          [type, handler, dest, [true, "t"].include?(st), bh]
        end
      end

      # Whether the routes table has v7's destination column.
      def webhook_inbox_route_destinations? = webhook_inbox_route_column?("destination")

      def webhook_inbox_route_column?(name)
        select_value(<<~SQL, "webhook_inbox routes") == 1
          SELECT 1 FROM pg_attribute
           WHERE attrelid = to_regclass('webhook_inbox_routes') AND attname = #{quote(name)} AND NOT attisdropped
        SQL
      end

      # Writes the route's strict flag (v14's column); strict: true on an older schema raises.
      def webhook_inbox_route_strict!(event_type, strict)
        webhook_inbox_route_set!(event_type, "strict", strict ? "true" : "false", given: strict, what: "strict routes",
                                 version: 14)
      end

      # Writes the route's batch handler (v19's column; nil clears it); batch: on an older
      # schema raises.
      def webhook_inbox_route_batch!(event_type, batch)
        webhook_inbox_route_set!(event_type, "batch_handler", batch ? "#{quote(batch.to_s)}::regproc" : "NULL",
                                 given: batch, what: "batch handlers", version: 19)
      end

      # Sets column to the SQL value on the route; on a schema without the column, nothing
      # when the option was not given, else an error naming the version it needs.
      def webhook_inbox_route_set!(event_type, column, value, given:, what:, version:)
        unless webhook_inbox_route_column?(column)
          return unless given

          webhook_inbox_schema_too_old!(what, version)
        end
        execute("UPDATE webhook_inbox_routes SET #{column} = #{value} WHERE event_type = #{quote(event_type.to_s)}",
                "webhook_inbox route")
      end

      def webhook_inbox_schema_too_old!(what, version)
        raise ActiveRecord::ActiveRecordError, "#{what} need the inbox schema v#{version} (this database has " \
                                               "v#{webhook_inbox_schema_version}): run `bin/rails generate " \
                                               "webhook_inbox:install` for the upgrade migration, before this one"
      end

      def webhook_inbox_route_destination!(destination)
        unless destination.to_s.match?(DESTINATION_NAME)
          raise ArgumentError, "destination #{destination.to_s.inspect}: a sidecar --destination name ([a-z][a-z0-9_]*, at most 63)"
        end
        webhook_inbox_schema_too_old!("routes to a destination", 7) unless webhook_inbox_route_destinations?
      end

      # The app's function definitions (CREATE OR REPLACE ...), see APP_FUNCTIONS.
      def webhook_inbox_app_functions
        select_values(APP_FUNCTIONS, "webhook_inbox functions")
      end

      # [[table, trigger definition], ...] for the app's triggers, see APP_TRIGGERS.
      def webhook_inbox_app_triggers
        select_rows(APP_TRIGGERS, "webhook_inbox triggers")
      end
    end
  end
end

module WebhookInbox
  module Rails
    # MigrationMethods - SchemaStatements' writers in ActiveRecord::Migration (and so in
    # ActiveRecord::Schema, db/schema.rb's class). Migration#method_missing would turn the
    # first argument into a table name; these forward as given and print one short line.
    module MigrationMethods
      SQL_TEXT = %i[webhook_inbox_functions webhook_inbox_triggers].freeze

      %i[load_webhook_inbox_schema add_webhook_inbox_route remove_webhook_inbox_route webhook_inbox_functions
         webhook_inbox_triggers].each do |name|
        define_method(name) do |*args, **options|
          shown = SQL_TEXT.include?(name) ? "" : [*args.map(&:inspect), *options.map { |k, v| "#{k}: #{v.inspect}" }].join(", ")
          say_with_time("#{name}(#{shown})") { connection.public_send(name, *args, **options) }
        end
      end
    end
  end
end
