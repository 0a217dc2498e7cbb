# frozen_string_literal: true

module WebhookInbox
  module Testing
    # Drain - what one sidecar does, synchronously, on an ActiveRecord connection: claim due
    # pending events with the sidecar's own SQL (webhook_inbox_dispatch_batch: routing,
    # handler in a savepoint, done/quarantined in the same transaction), record transient
    # failures the same way, and repeat until nothing is due. Rows a retry pushed into the
    # future are not claimed again, so it always ends.
    module Drain
      # result: "done", "quarantined" or "retry"; detail: the outcome, reason or error.
      Outcome = Struct.new(:source_scope, :event_id, :event_type, :result, :detail, :attempts, keyword_init: true)

      # A guard: a round that records nothing (a bug) would otherwise claim the same rows forever.
      MAX_ROUNDS = 1000
      BATCH_SQL = "SELECT * FROM webhook_inbox_dispatch_batch(%d, %s)"
      FAILURE_SQL = "SELECT webhook_inbox_record_failure(%s, %s, %d, %d, %s, %d)"

      module_function

      # unrouted: as the sidecar's --unrouted; max_attempts as --max-attempts; retry_delay_ms:
      # the backoff recorded for a transient failure.
      # The statements write, so ActiveRecord's query cache (on in tests) is bypassed and cleared.
      def run(connection, **options)
        connection.uncached { claim_until_idle(connection, **options) }
      ensure
        connection.clear_query_cache
      end

      def claim_until_idle(connection, batch_size: 100, unrouted: "retry", max_attempts: 25, retry_delay_ms: 1000)
        outcomes = []
        MAX_ROUNDS.times do
          rows = connection.select_all(format(BATCH_SQL, batch_size, connection.quote(unrouted)), "webhook_inbox drain").to_a
          break if rows.empty?

          rows.each do |row|
            record_failure(connection, row, max_attempts, retry_delay_ms) if row["result"] == "retry"
            outcomes << Outcome.new(**row.slice(*%w[source_scope event_id event_type result detail attempts]).transform_keys(&:to_sym))
          end
        end.then { |done| raise Error, "drain_webhook_inbox: events still due after #{MAX_ROUNDS} rounds" if done == MAX_ROUNDS }
        outcomes
      end

      def record_failure(connection, row, max_attempts, delay_ms)
        q = connection.method(:quote)
        connection.select_value(format(FAILURE_SQL, q.(row["source_scope"]), q.(row["event_id"]), row["attempts"].to_i,
                                       delay_ms, q.(row["detail"].to_s), max_attempts), "webhook_inbox drain")
      end
    end
  end
end
