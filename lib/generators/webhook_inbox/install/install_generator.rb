# frozen_string_literal: true

require "rails/generators"
require "rails/generators/active_record"
require_relative "../migration_version"

module WebhookInbox
  module Generators
    # `rails g webhook_inbox:install` - the migration that brings the inbox schema to this gem's
    # version (loaded from the installed gem, not copied), config/initializers/webhook_inbox.rb
    # and bin/webhook-inbox-sidecar (both only if missing). Run it again after upgrading the
    # gem: it writes an upgrade migration when the app's migrations stop short of the gem's
    # schema version, and nothing when they are current.
    class InstallGenerator < ::Rails::Generators::Base
      include ::ActiveRecord::Generators::Migration
      include MigrationVersion

      source_root File.expand_path("templates", __dir__)
      desc "Creates (or upgrades) the webhook_inbox migration, an initializer and bin/webhook-inbox-sidecar."

      # A migration written by this generator (any version), or by the pre-versioning one.
      VERSION_IN_MIGRATION = /load_webhook_inbox_schema\s*\(?\s*version:\s*(\d+)/.freeze
      LEGACY_MIGRATION = /CREATE TABLE IF NOT EXISTS webhook_inbox \(/.freeze

      def create_migration_file
        have = migrated_version
        if have >= schema_version
          say_status :identical, "the inbox migrations already reach schema version #{schema_version}", :blue
        elsif have.zero?
          migration_template "migration.rb.tt", File.join(db_migrate_path, "create_webhook_inbox.rb")
        else
          @from_version = have
          migration_template "upgrade_migration.rb.tt",
                             File.join(db_migrate_path, "upgrade_webhook_inbox_to_v#{schema_version}.rb")
        end
      end

      def create_initializer
        template "initializer.rb.tt", "config/initializers/webhook_inbox.rb", skip: true
      end

      def create_sidecar_binstub
        template "sidecar_binstub.tt", "bin/webhook-inbox-sidecar", skip: true
        chmod "bin/webhook-inbox-sidecar", 0o755, verbose: false
      end

      private

      def schema_version
        WebhookInbox::Schema::VERSION
      end

      # The highest schema version the app's migrations load (0: none).
      def migrated_version
        Dir[File.join(destination_root, db_migrate_path, "*.rb")].map do |file|
          text = File.read(file)
          if (m = text.match(VERSION_IN_MIGRATION)) then m[1].to_i
          elsif text.match?(LEGACY_MIGRATION) then WebhookInbox::Schema::UNVERSIONED
          else 0
          end
        end.max || 0
      end
    end
  end
end
