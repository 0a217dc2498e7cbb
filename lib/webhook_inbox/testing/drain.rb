# frozen_string_literal: true

module WebhookInbox
  module Testing
    # Drain - what one sidecar does, synchronously, on an ActiveRecord connection: claim due
    # pending events with the sidecar's own SQL (webhook_inbox_dispatch_batch: routing, the
    # handler in a savepoint, done / quarantined / a charged failure with its backoff / waiting
    # for a route, all in the current transaction), and repeat until nothing is due. A failed
    # or waiting event is due again only after its delay, so it always ends.
    module Drain
      # result: "done", "quarantined", "retry" (charged, will run again) or "waiting" (no
      # route); detail: the outcome, reason or error; attempts: before this run.
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
        connection.uncached { claim_until_idle(connection, sql) }
      ensure
        connection.clear_query_cache
      end

      def claim_until_idle(connection, sql)
        outcomes = []
        MAX_ROUNDS.times do
          rows = connection.select_all(sql, "webhook_inbox drain").to_a
          return outcomes if rows.empty?

          rows.each { |row| outcomes << Outcome.new(**row.slice(*FIELDS).transform_keys(&:to_sym)) }
        end
        raise Error, "drain_webhook_inbox: events still due after #{MAX_ROUNDS} rounds"
      end
    end
  end
end
