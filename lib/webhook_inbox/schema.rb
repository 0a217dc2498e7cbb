# frozen_string_literal: true

module WebhookInbox
  # Schema - the inbox's versioned SQL, shared by the Rails migrations and the sidecar's
  # `migrate`: db/NNN_*.sql in the gem, applied in order. File NNN brings the database to
  # schema version NNN; released files never change (a change is a new file), so applying
  # 001..N from any later gem version yields the same schema N. Every file is idempotent.
  #
  #   WebhookInbox::Schema::VERSION                    # what this gem (and its sidecar) expects
  #   WebhookInbox::Schema.statements(to: 4)           # [[file name, SQL], ...] to apply
  #   WebhookInbox::Schema.installed_version(select)   # select: ->(sql) { first value or nil }
  module Schema
    DIR = File.expand_path("../../db", __dir__)
    FILES = Dir[File.join(DIR, "[0-9][0-9][0-9]_*.sql")].sort.freeze
    VERSION = File.basename(FILES.last).to_i
    # The version a database built before versioning (001-003, no version function) reports.
    UNVERSIONED = 3
    # Objects the gem owns: recreated from this SQL, so Rails' dumps leave them out.
    TABLES = %w[webhook_inbox webhook_inbox_routes webhook_inbox_actions webhook_inbox_rejections
                webhook_inbox_outbox webhook_inbox_effects_received webhook_inbox_ruby_handlers
                webhook_inbox_reconcile_cursors webhook_inbox_redeliveries webhook_inbox_refused
                webhook_inbox_flow webhook_inbox_workers].freeze
    FUNCTION_PREFIX = "webhook_inbox_"

    # 2: versioned, 1: the inbox predates versioning, 0: no inbox. (A CASE cannot call a
    # function that may not exist: PostgreSQL resolves it when parsing.)
    PRESENCE_SQL = <<~SQL.tr("\n", " ").freeze
      SELECT CASE WHEN to_regprocedure('webhook_inbox_schema_version()') IS NOT NULL THEN 2
                  WHEN to_regclass('webhook_inbox') IS NOT NULL THEN 1 ELSE 0 END
    SQL
    VERSION_SQL = "SELECT webhook_inbox_schema_version()"

    module_function

    # [[file name, SQL text], ...] for versions 1..to. Raises ArgumentError for a version this
    # gem does not have (a schema.rb written by a newer gem: upgrade the gem first).
    def statements(to: VERSION)
      to = Integer(to)
      unless to.between?(1, VERSION)
        raise ArgumentError, "webhook_inbox schema version #{to} is unknown to this gem (it has 1..#{VERSION}); " \
                             "a newer webhook_inbox_pg wrote it: upgrade the gem"
      end

      FILES.select { |f| File.basename(f).to_i <= to }.map { |f| [File.basename(f), File.read(f)] }
    end

    # The database's schema version: 0 when the inbox is missing. select runs one SQL query
    # and returns its single value.
    def installed_version(select)
      case Integer(select.call(PRESENCE_SQL))
      when 2 then Integer(select.call(VERSION_SQL))
      when 1 then UNVERSIONED
      else 0
      end
    end

    # What to tell a developer whose database is at installed (nil when it is current).
    def problem(installed)
      return nil if installed >= VERSION

      state, effect =
        if installed.zero? then ["missing", "webhooks are answered 503 and nothing is processed"]
        else ["at version #{installed}, older than this gem's #{VERSION}", "the sidecar refuses to process events"]
        end
      "webhook_inbox: the inbox schema is #{state}. Run `bin/rails generate webhook_inbox:install` " \
        "(it writes the migration that brings it to #{VERSION}) and `bin/rails db:migrate`; without Rails, " \
        "`webhook-inbox-sidecar migrate`. Until then #{effect}."
    end
  end
end
