# frozen_string_literal: true

require "rails/generators"
require "rails/generators/active_record"
require_relative "../migration_version"

module WebhookInbox
  module Generators
    # `rails g webhook_inbox:handler payment_intent.succeeded` - a migration holding a SQL
    # handler to fill in (the lock-first template; until it is written it raises, so events
    # stay pending and are retried, never marked done) and its route, plus a test that runs
    # it through the sidecar's dispatch (spec/ when the app has one, else test/).
    # With --ruby: a Ruby handler class in app/webhooks/ instead (raising until written, so
    # its runs are retried, never marked done), its test, and the Ruby worker's line in
    # Procfile.dev; no migration (the worker registers the class when it starts).
    # With --batch: also the route's batch handler, <function>_batch, deferring every run to
    # the SQL handler until it is written.
    class HandlerGenerator < ::Rails::Generators::Base
      include ::ActiveRecord::Generators::Migration
      include MigrationVersion

      source_root File.expand_path("templates", __dir__)
      desc "Creates a SQL handler migration (function + route) and a test for an event type."
      argument :event_type, type: :string, banner: "EVENT_TYPE (exact, or a prefix ending in *)"
      class_option :function, type: :string, desc: "SQL function name (default: handle_<event type>)"
      class_option :ruby, type: :boolean, default: false, desc: "A Ruby handler class in app/webhooks/ instead of SQL"
      class_option :batch, type: :boolean, default: false,
                           desc: "Also a batch handler (schema v19): the SQL handler's work for many events at once"

      PROCFILE_LINE = "handlers: bin/webhook-inbox-sidecar ruby\n"

      def check_options
        raise ::Thor::Error, "--batch is for SQL handlers (a Ruby handler runs one event at a time)" if options[:ruby] && options[:batch]
      end

      def create_ruby_handler
        return unless options[:ruby]

        template "ruby_handler.rb.tt", "app/webhooks/#{slug}_handler.rb"
        if File.directory?(File.join(destination_root, "spec"))
          template "ruby_handler_spec.rb.tt", "spec/webhooks/#{slug}_handler_spec.rb"
        else
          template "ruby_handler_test.rb.tt", "test/webhooks/#{slug}_handler_test.rb"
        end
        procfile = File.join(destination_root, "Procfile.dev")
        append_to_file "Procfile.dev", PROCFILE_LINE if File.file?(procfile) && !File.read(procfile).include?("webhook-inbox-sidecar ruby")
      end

      def create_migration_file
        return if options[:ruby]

        migration_template "handler_migration.rb.tt",
                           File.join(db_migrate_path, "add_webhook_inbox_handler_#{slug}.rb")
      end

      def create_test
        return if options[:ruby]

        if File.directory?(File.join(destination_root, "spec"))
          template "handler_spec.rb.tt", "spec/webhook_inbox/#{function_name}_spec.rb"
        else
          template "handler_test.rb.tt", "test/webhook_inbox/#{function_name}_test.rb"
        end
      end

      private

      def slug
        s = event_type.downcase.gsub(/[^a-z0-9]+/, "_").gsub(/\A_+|_+\z/, "")
        s.empty? ? "all" : s
      end

      def function_name
        name = options[:function] || "handle_#{slug}"
        raise ::Thor::Error, "--function must be a plain SQL identifier" unless name.match?(/\A[a-z_][a-z0-9_]{0,62}\z/)
        raise ::Thor::Error, "handler names must not start with webhook_inbox_ (the gem's own)" if name.start_with?("webhook_inbox_")

        name
      end

      # An event type the test can deliver (a pattern's prefix, with a sample suffix).
      def sample_type
        event_type.end_with?("*") ? "#{event_type.chomp('*')}example" : event_type
      end

      def handler_class_name = "#{slug.camelize}Handler"

      def class_name_for(prefix)
        "#{prefix}#{slug.camelize}"
      end
    end
  end
end
