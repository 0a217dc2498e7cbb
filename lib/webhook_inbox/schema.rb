# frozen_string_literal: true

module WebhookInbox
  # Schema - the inbox's versioned SQL, shared by the Rails migrations and the sidecar's
  # `migrate` (db/README.md): db/NNN_*.sql, the tables, indexes and constraints, in numbered
  # migrations (file NNN brings the tables to version NNN; a released file never changes), then
  # db/functions/*.sql, every function in its one current definition, applied by every migrate
  # (repeatable: CREATE OR REPLACE). Functions exist only in their current form, so this gem
  # builds its own VERSION and no older one; every file is idempotent.
  #
  #   WebhookInbox::Schema::VERSION                    # what this gem (and its sidecar) expects
  #   WebhookInbox::Schema.migrations(to: 4)           # [[file name, SQL], ...]: the tables as of v4
  #   WebhookInbox::Schema.statements(after: 20)       # what brings a v20 database to VERSION
  #   WebhookInbox::Schema.installed_version(select)   # select: ->(sql) { first value or nil }
  module Schema
    DIR = File.expand_path("../../db", __dir__)
    FILES = Dir[File.join(DIR, "[0-9][0-9][0-9]_*.sql")].sort.freeze
    FUNCTION_FILES = Dir[File.join(DIR, "functions", "*.sql")].sort.freeze
    # webhook_inbox_schema_version()'s body says it (the sidecar's WI_SCHEMA_VERSION too).
    VERSION_LINE = /schema_version\(\) RETURNS integer\s+LANGUAGE sql STABLE AS \$\$ SELECT (\d+) \$\$/.freeze
    VERSION = Integer(File.read(File.join(DIR, "functions", "schema_version.sql"))[VERSION_LINE, 1])
    # The session advisory lock `webhook-inbox-sidecar migrate` holds (WI_MIGRATE_LOCK_KEY in
    # sidecar/src/admin/migrate.h): a Rails migration takes it for its transaction, so the two never
    # replace the same functions at once ("tuple concurrently updated").
    LOCK_SQL = "SELECT pg_advisory_xact_lock(7310582026110401)"
    # The version a database built before versioning (001-003, no version function) reports.
    UNVERSIONED = 3
    # Objects the gem owns: recreated from this SQL, so Rails' dumps leave them out.
    TABLES = %w[webhook_inbox webhook_inbox_routes webhook_inbox_actions webhook_inbox_rejections
                webhook_inbox_outbox webhook_inbox_effects_received webhook_inbox_ruby_handlers
                webhook_inbox_reconcile_cursors webhook_inbox_redeliveries webhook_inbox_refused
                webhook_inbox_flow webhook_inbox_workers webhook_inbox_error_reports
                webhook_inbox_error_reporter webhook_inbox_recovery_reports
                webhook_inbox_effect_reports webhook_inbox_alerts].freeze
    FUNCTION_PREFIX = "webhook_inbox_"

    # 2: versioned, 1: the inbox predates versioning, 0: no inbox. (A CASE cannot call a
    # function that may not exist: PostgreSQL resolves it when parsing.)
    PRESENCE_SQL = <<~SQL.tr("\n", " ").freeze
      SELECT CASE WHEN to_regprocedure('webhook_inbox_schema_version()') IS NOT NULL THEN 2
                  WHEN to_regclass('webhook_inbox') IS NOT NULL THEN 1 ELSE 0 END
    SQL
    VERSION_SQL = "SELECT webhook_inbox_schema_version()"

    module_function

    # [[file name, SQL text], ...]: the numbered migrations up to version to (tables only; a
    # database of an older version for specs, or the first step of statements). Raises
    # ArgumentError for a version this gem does not have (a newer gem wrote it: upgrade the gem).
    def migrations(to: VERSION)
      to = Integer(to)
      unless to.between?(1, VERSION)
        raise ArgumentError, "webhook_inbox schema version #{to} is unknown to this gem (it has 1..#{VERSION}); " \
                             "a newer webhook_inbox_pg wrote it: upgrade the gem"
      end

      FILES.select { |f| File.basename(f).to_i <= to }.map { |f| [File.basename(f), File.read(f)] }
    end

    # [["functions/flow.sql", SQL text], ...]: every function file, to apply after the
    # migrations, each as one transaction (its SET LOCAL lets the files go in any order).
    def functions
      FUNCTION_FILES.map { |f| ["functions/#{File.basename(f)}", File.read(f)] }
    end

    # What brings a database at version after (0: none) to VERSION: the migrations newer than
    # after, then every function file. Empty for a database newer than this gem (never put
    # older bodies back under a newer version).
    def statements(after: 0)
      return [] if Integer(after) > VERSION

      migrations.reject { |name, _| name.to_i <= after } + functions
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
