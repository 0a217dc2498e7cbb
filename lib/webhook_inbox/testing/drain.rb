# frozen_string_literal: true

module WebhookInbox
  module Testing
    # Drain - what one sidecar does, synchronously, on an ActiveRecord connection: claim due
    # pending events with the sidecar's own SQL (webhook_inbox_dispatch_batch: routing, the
    # handler in a savepoint, done / quarantined / a charged failure with its backoff / waiting
    # for a route, all in the current transaction), and repeat until nothing is due. A failed
    # or waiting event is due again only after its delay, so it always ends.
    #
    # Ruby handlers (WebhookInbox.subscribe, app/webhooks) run inline too, as the Ruby worker
    # runs them: registered in this transaction, each run in a savepoint with its once-marker
    # (Handlers::Runner), so a handler runs once per event however often the event is stored,
    # replayed or drained. The handler's own transaction blocks get savepoints of their own,
    # as in the worker (Handlers::Savepoint), also inside the test's non-joinable transaction;
    # no time limit applies here (a debugger may stop in a handler). An event handed to them reports its final state: "done" once every
    # handler succeeded, "quarantined" (WebhookInbox::Permanent, or the last attempt), "retry"
    # while one will run again.
    module Drain
      # result: "done", "quarantined", "retry" (charged, or a Ruby handler that will run
      # again) or "waiting" (no route); detail: the outcome, reason or error; attempts: before this run.
      Outcome = Struct.new(:source_scope, :event_id, :event_type, :result, :detail, :attempts, :charged,
                           keyword_init: true)

      # A guard: a round that records nothing (a bug) would otherwise claim the same rows forever.
      MAX_ROUNDS = 1000
      BATCH_SQL = "SELECT * FROM webhook_inbox_dispatch_batch(%d, %s, %d, %d, %d, %d)"
      FIELDS = %w[source_scope event_id event_type result detail attempts charged].freeze

      module_function

      # The options mirror the sidecar's flags and defaults: --batch-size, --unrouted,
      # --max-attempts, --backoff-base, --backoff-cap, --unrouted-delay (milliseconds here).
      # The statements write, so ActiveRecord's query cache (on in tests) is bypassed and cleared.
      def run(connection, batch_size: 100, unrouted: "wait", max_attempts: 10, backoff_base_ms: 1000,
              backoff_cap_ms: 3_600_000, unrouted_delay_ms: 60_000)
        sql = format(BATCH_SQL, batch_size, connection.quote(unrouted.to_s), max_attempts, backoff_base_ms,
                     backoff_cap_ms, unrouted_delay_ms)
        runner = ruby_runner(connection, max_attempts: max_attempts, backoff_base_ms: backoff_base_ms,
                                         backoff_cap_ms: backoff_cap_ms)
        connection.uncached { claim_until_idle(connection, sql, runner, batch_size) }
      ensure
        connection.clear_query_cache
      end

      def claim_until_idle(connection, sql, runner, batch_size)
        outcomes = []
        MAX_ROUNDS.times do
          rows = connection.select_all(sql, "webhook_inbox drain").to_a
          ran = runner ? runner.run_batch(connection, batch_size) : []
          return outcomes.map { |o| o.result == "handed" ? settled(connection, o) : o } if rows.empty? && ran.empty?

          rows.each { |row| outcomes << Outcome.new(**row.slice(*FIELDS).transform_keys(&:to_sym)) }
        end
        raise Error, "drain_webhook_inbox: events still due after #{MAX_ROUNDS} rounds"
      end

      # A Runner over the app's handlers, registered in this transaction; nil when the app
      # has none and the schema predates them. A schema with Ruby handlers older than the
      # Runner's functions (db/016) raises Error: migrate first.
      def ruby_runner(connection, **options)
        Handlers.load_app_handlers
        return nil unless connection.select_value("SELECT to_regprocedure('webhook_inbox_ruby_claim(integer)') IS NOT NULL")
        unless connection.select_value("SELECT to_regprocedure('#{Handlers::Runner::START_BATCH_PROC}') IS NOT NULL")
          raise Error, "drain_webhook_inbox: the inbox schema is older than v16 (no webhook_inbox_ruby_start_batch): run bin/rails db:migrate"
        end

        Handlers.register(connection) unless Handlers.registry.empty?
        Handlers::Runner.new(Handlers.registry, **options)
      end

      SETTLED_SQL = "SELECT status, outcome, last_error FROM webhook_inbox WHERE source_scope = $1 AND event_id = $2"

      # A handed event's outcome once its Ruby handlers have run.
      def settled(connection, outcome)
        row = connection.select_all(SETTLED_SQL, "webhook_inbox drain", [outcome.source_scope, outcome.event_id]).first
        return outcome unless row

        result, detail = { "done" => ["done", row["outcome"]], "quarantined" => ["quarantined", row["last_error"]] }
                         .fetch(row["status"], ["retry", row["last_error"] || outcome.detail])
        outcome.dup.tap { |o| o.result = result; o.detail = detail }
      end
    end
  end
end
