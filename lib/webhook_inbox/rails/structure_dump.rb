# frozen_string_literal: true

module WebhookInbox
  module Rails
    # StructureDump - db/structure.sql keeps the route rows (prepended to
    # ActiveRecord::Tasks::DatabaseTasks). pg_dump already writes the inbox's tables,
    # functions and trigger; routes are data, so they are appended as upserts, like the
    # schema_migrations rows Rails appends itself.
    module StructureDump
      def structure_dump(db_config, filename)
        super
        pool = respond_to?(:migration_connection_pool) ? migration_connection_pool : ActiveRecord::Base.connection_pool
        rows, search_path = pool.with_connection { |c| [c.webhook_inbox_route_rows, c.select_value("SHOW search_path")] }
        return if rows.empty?

        File.open(filename, "a") do |f|
          f.puts "-- webhook_inbox routes (appended by webhook_inbox_pg; pg_dump emptied the search path)"
          f.puts "SET search_path TO #{search_path};"
          rows.each do |type, handler, destination, strict, batch|
            f.puts route_upsert(type, handler, destination)
            f.puts "UPDATE webhook_inbox_routes SET strict = true WHERE event_type = #{quote(type)};" if strict
            if batch
              f.puts "UPDATE webhook_inbox_routes SET batch_handler = #{quote(batch)}::regproc WHERE event_type = #{quote(type)};"
            end
          end
          f.puts
        end
      end

      private

      # A destination route is written with its column (v7); a handler route without it, so
      # the file also loads into a schema older than v7.
      def route_upsert(type, handler, destination)
        if destination
          "INSERT INTO webhook_inbox_routes (event_type, handler, destination) " \
            "VALUES (#{quote(type)}, #{quote(handler)}::regproc, #{quote(destination)}) " \
            "ON CONFLICT (event_type) DO UPDATE SET handler = EXCLUDED.handler, destination = EXCLUDED.destination;"
        else
          "INSERT INTO webhook_inbox_routes (event_type, handler) VALUES (#{quote(type)}, #{quote(handler)}::regproc) " \
            "ON CONFLICT (event_type) DO UPDATE SET handler = EXCLUDED.handler;"
        end
      end

      def quote(text)
        "'#{text.gsub("'", "''")}'"
      end
    end
  end
end
