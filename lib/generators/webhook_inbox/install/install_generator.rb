# frozen_string_literal: true

require "rails/generators"
require "rails/generators/active_record"

module WebhookInbox
  module Generators
    # `rails g webhook_inbox:install` - writes db/migrate/<ts>_create_webhook_inbox.rb holding
    # the gem's schema (every db/*.sql of the installed gem, read now, in file order), and
    # config/initializers/webhook_inbox.rb unless it exists.
    class InstallGenerator < ::Rails::Generators::Base
      include ::ActiveRecord::Generators::Migration

      source_root File.expand_path("templates", __dir__)
      desc "Creates the webhook_inbox migration (the gem's db/*.sql) and an initializer."

      GEM_DB_DIR = File.expand_path("../../../../db", __dir__)

      def create_migration_file
        migration_template "migration.rb.tt", File.join(db_migrate_path, "create_webhook_inbox.rb")
      end

      def create_initializer
        template "initializer.rb.tt", "config/initializers/webhook_inbox.rb", skip: true
      end

      private

      def schema_files
        Dir[File.join(GEM_DB_DIR, "*.sql")].sort
      end

      # The SQL, indented to sit inside the migration's heredoc.
      def schema_sql
        schema_files.map { |f| "-- #{File.basename(f)}\n#{File.read(f)}" }.join("\n")
                    .gsub(/^(?=.)/, "      ").rstrip
      end

      def migration_version
        "[#{::ActiveRecord::VERSION::MAJOR}.#{::ActiveRecord::VERSION::MINOR}]"
      end
    end
  end
end
