# frozen_string_literal: true

require "active_record"
require "webhook_inbox/rails/schema_statements"

# An ActiveRecord connection to one database of a throwaway cluster with the gem's schema
# statements (add_webhook_inbox_route, webhook_inbox_route_rows, ...), as a migration and
# db/schema.rb use them: yields it, then disconnects.
module SchemaStatementsConnection
  module_function

  def with(pg, database = pg.dbname)
    model = Class.new(ActiveRecord::Base) do
      self.abstract_class = true
      def self.name = "SchemaStatementsRecord"
    end
    model.establish_connection(adapter: "postgresql", host: pg.socket_dir, port: pg.port, database: database,
                               username: pg.url[/user=(\S+)/, 1], min_messages: "error")
    conn = model.connection
    conn.extend(WebhookInbox::Rails::SchemaStatements)
    yield conn
  ensure
    model&.remove_connection
  end
end
