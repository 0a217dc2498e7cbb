# frozen_string_literal: true

module WebhookInbox
  module Rails
    # Truncation - the event routes survive the ways an app empties its database, as
    # schema_migrations does: routes are configuration a migration wrote (and db/schema.rb
    # keeps), not rows a test left behind. Without this, the second run of a parallel test
    # suite found no route: once their schema is current Rails truncates the worker databases
    # instead of reloading them.
    # - ActiveRecord's truncate_tables (db:truncate_all, db:seed:replant, the parallel test
    #   databases) leaves webhook_inbox_routes out (Adapter, prepended to the PostgreSQL adapter);
    # - DatabaseCleaner's truncation and deletion strategies get it in their except: list
    #   (installed when DatabaseCleaner is loaded with ActiveRecord or by boot; one required
    #   later needs `except: %w[webhook_inbox_routes]`).
    # Events, effects and the audit rows are data: they are emptied as before. No trigger can
    # do this in the database: both tools disable every trigger while they clean.
    module Truncation
      KEPT_TABLES = %w[webhook_inbox_routes webhook_inbox_ruby_handlers].freeze

      module_function

      # Whether table (a name, schema-qualified or not) is one truncation leaves alone.
      def kept?(table)
        KEPT_TABLES.include?(table.to_s.split(".").last)
      end

      # Prepends the except: list to DatabaseCleaner's ActiveRecord strategies, once; a no-op
      # when DatabaseCleaner is not loaded.
      def database_cleaner!
        return unless defined?(::DatabaseCleaner::ActiveRecord::Truncation)

        strategy = ::DatabaseCleaner::ActiveRecord::Truncation
        strategy.prepend(DatabaseCleanerStrategy) unless strategy <= DatabaseCleanerStrategy
      end

      # ActiveRecord's truncate_tables(*table_names), without the kept tables.
      module Adapter
        def truncate_tables(*table_names, **options)
          super(*table_names.reject { |t| Truncation.kept?(t) }, **options)
        end
      end

      # DatabaseCleaner::ActiveRecord::Truncation.new(opts) (Deletion is a Truncation).
      module DatabaseCleanerStrategy
        def initialize(opts = {})
          super(opts.merge(except: Array(opts[:except]).map(&:to_s) | KEPT_TABLES))
        end
      end
    end
  end
end
