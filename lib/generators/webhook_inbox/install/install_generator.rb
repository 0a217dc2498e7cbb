# frozen_string_literal: true

require "rails/generators"
require "rails/generators/active_record"
require_relative "../migration_version"

module WebhookInbox
  module Generators
    # `rails g webhook_inbox:install` - the migration that brings the inbox schema to this gem's
    # version (loaded from the installed gem, not copied), config/initializers/webhook_inbox.rb
    # and bin/webhook-inbox-sidecar (both only if missing), the sidecar's line in
    # Procfile.dev (with bin/dev when the app has neither), and the dashboard's mount line with
    # its protection in the initializer: the app's admin controller and its authenticating
    # before_action when one exists (ADMIN_CONTROLLERS), else HTTP Basic. Run it again after
    # upgrading the gem: it writes an upgrade migration when the app's migrations stop short of
    # the gem's schema version, and nothing when they are current.
    class InstallGenerator < ::Rails::Generators::Base
      include ::ActiveRecord::Generators::Migration
      include MigrationVersion

      source_root File.expand_path("templates", __dir__)
      desc "Creates (or upgrades) the webhook_inbox migration, an initializer, bin/webhook-inbox-sidecar and its Procfile.dev line."

      # A migration written by this generator (any version), or by the pre-versioning one.
      VERSION_IN_MIGRATION = /load_webhook_inbox_schema\s*\(?\s*version:\s*(\d+)/.freeze
      LEGACY_MIGRATION = /CREATE TABLE IF NOT EXISTS webhook_inbox \(/.freeze
      SIDECAR_PROCESS = "sidecar: bin/webhook-inbox-sidecar run"
      SIDECAR_LINE = %r{^\s*\w+:.*bin/webhook-inbox-sidecar run}.freeze
      # Where an app keeps the controller its admin pages inherit, and its class name.
      ADMIN_CONTROLLERS = { "app/controllers/admin_controller.rb" => "AdminController",
                            "app/controllers/admin/base_controller.rb" => "Admin::BaseController",
                            "app/controllers/admin/application_controller.rb" => "Admin::ApplicationController" }.freeze
      # An authenticating before_action by its usual names (Devise's authenticate_admin!, ...).
      AUTH_FILTER = /^\s*before_action\s+:((?:authenticate|require|ensure|check|verify)_\w*[!?]?)/.freeze

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

      # The dashboard, mounted with the protection the initializer chooses (closed outside
      # development and test until that protection is in force).
      def mount_dashboard
        routes = File.join(destination_root, "config/routes.rb")
        return unless File.exist?(routes)
        return say_status(:identical, "config/routes.rb mounts WebhookInbox::Engine", :blue) if File.read(routes).include?("WebhookInbox::Engine")

        route %(mount WebhookInbox::Engine => "/webhook_inbox" # protected as config/initializers/webhook_inbox.rb says)
      end

      def create_sidecar_binstub
        template "sidecar_binstub.tt", "bin/webhook-inbox-sidecar", skip: true
        chmod "bin/webhook-inbox-sidecar", 0o755, verbose: false
      end

      # `bin/dev` runs the sidecar beside the server: the line goes into an existing
      # Procfile.dev (jsbundling, cssbundling, foreman users); an app without one gets a
      # Procfile.dev and, if it has no bin/dev either, a foreman-based bin/dev. Without the
      # sidecar, development receives events and never processes them.
      def add_sidecar_to_procfile_dev
        procfile = File.join(destination_root, "Procfile.dev")
        if File.exist?(procfile)
          return say_status(:identical, "Procfile.dev runs the sidecar", :blue) if File.read(procfile).match?(SIDECAR_LINE)

          append_to_file "Procfile.dev", "#{"\n" unless File.read(procfile).end_with?("\n")}#{SIDECAR_PROCESS}\n"
        else
          create_file "Procfile.dev", "web: bin/rails server\n#{SIDECAR_PROCESS}\n"
          template "dev_binstub.tt", "bin/dev", skip: true
          chmod "bin/dev", 0o755, verbose: false
        end
      end

      def explain_dashboard_protection
        initializer = File.join(destination_root, "config/initializers/webhook_inbox.rb")
        return unless File.exist?(initializer) && File.read(initializer).include?("c.dashboard_auth = :http_basic")

        say "The dashboard asks for HTTP Basic credentials outside development and test: add them with " \
            "`bin/rails credentials:edit` (webhook_inbox: dashboard_user: ..., dashboard_password: ...) " \
            "or set WEBHOOK_INBOX_DASHBOARD_USER and WEBHOOK_INBOX_DASHBOARD_PASSWORD. See docs/dashboard.md."
      end

      private

      # [class name, filter] of the app's admin controller that authenticates, or nil.
      def dashboard_admin
        return @dashboard_admin if defined?(@dashboard_admin)

        @dashboard_admin = ADMIN_CONTROLLERS.each do |file, name|
          path = File.join(destination_root, file)
          filter = File.exist?(path) && File.read(path)[AUTH_FILTER, 1]
          break [name, filter] if filter
        end.then { |found| found.is_a?(Array) ? found : nil }
      end

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
