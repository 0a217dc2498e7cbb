# frozen_string_literal: true

require "time"
require "base64"

module WebhookInbox
  module Handlers
    # Runner - one round of the Ruby worker on an ActiveRecord connection, inside the caller's
    # transaction (the worker opens one per round; drain_webhook_inbox runs in the test's):
    # lock up to limit due runs (webhook_inbox_ruby_claim, FOR UPDATE SKIP LOCKED), run each
    # handler in a savepoint, and record its result in the same transaction
    # (webhook_inbox_ruby_save): the handler's writes and its run marked delivered commit
    # together, or not at all. A handler's StandardError rolls its savepoint back and charges
    # the run (the events' backoff; quarantined at max_attempts), and so does a handler that
    # raised ActiveRecord::Rollback (the savepoint swallows it: the block did not complete,
    # nothing applied; a retry, not Permanent, as a condition it checked may pass later, and
    # the last attempt quarantines it like any failure); WebhookInbox::Permanent
    # quarantines it (and its event) at once. Anything that breaks the transaction itself (the
    # connection, a signal) propagates: nothing of the round is recorded, the runs are due again.
    class Runner
      CLAIM_SQL = "SELECT * FROM webhook_inbox_ruby_claim($1::int)"
      SAVE_SQL = "SELECT webhook_inbox_ruby_save($1, $2, $3, $4::float8, $5::int, $6::bigint, $7::bigint)"

      # status: the run's new status ("delivered", "pending" = will be retried, "quarantined").
      Result = Struct.new(:operation_id, :handler, :source_scope, :event_id, :event_type, :attempt, :status, :error,
                          :duration_ms, keyword_init: true)

      def initialize(registry, max_attempts: 10, backoff_base_ms: 1000, backoff_cap_ms: 3_600_000, on_result: nil)
        @registry = registry
        @max_attempts = Integer(max_attempts)
        @backoff_base_ms = Integer(backoff_base_ms)
        @backoff_cap_ms = Integer(backoff_cap_ms)
        @on_result = on_result
      end

      # Runs up to limit due runs; returns their Results (empty: nothing due).
      def run_batch(connection, limit)
        rows = connection.select_all(CLAIM_SQL, "webhook_inbox ruby claim", [Integer(limit)]).to_a
        rows.map { |row| run_one(connection, row) }
      end

      private

      def run_one(connection, row)
        event = event_for(row)
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        result, error = call_handler(connection, row["handler"], event)
        ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000
        status = connection.select_value(SAVE_SQL, "webhook_inbox ruby save",
                                         [row["operation_id"], result, error, ms, @max_attempts, @backoff_base_ms, @backoff_cap_ms])
        # NULL: the run claimed is no longer a pending Ruby run (changed under the lock: a bug);
        # the round fails and rolls back, the handler's writes with it.
        raise Error, "webhook_inbox: Ruby run #{row['operation_id']} was no longer pending when saved; round rolled back" unless status
        Result.new(operation_id: row["operation_id"], handler: row["handler"], source_scope: row["source_scope"],
                   event_id: row["event_id"], event_type: row["event_type"], attempt: event.attempt, status: status,
                   error: error, duration_ms: ms).tap { |r| @on_result&.call(r) }
      end

      # ["done", nil] | ["retry", error] | ["quarantine", reason]
      def call_handler(connection, name, event)
        subscription = @registry[name]
        return ["retry", "no handler named #{name} is subscribed in this app"] unless subscription
        return ["retry", "the event row is missing"] if event.type.nil?

        completed = false
        connection.transaction(requires_new: true) do
          subscription.callable.call(event)
          completed = true
        end
        # ActiveRecord::Rollback is swallowed by the savepoint: nothing of the handler applied.
        return ["retry", "ActiveRecord::Rollback: the handler rolled its writes back"] unless completed

        ["done", nil]
      rescue Permanent => e
        ["quarantine", describe(e)]
      rescue StandardError => e
        raise if connection_lost?(connection)

        ["retry", describe(e)]
      end

      def describe(error) = "#{error.class}: #{error.message}"[0, 1000]

      # A handler error that took the connection with it is not the handler's: the round fails.
      def connection_lost?(connection)
        !connection.active?
      rescue StandardError
        true
      end

      def event_for(row)
        raw = row["raw_body_base64"] && Base64.strict_decode64(row["raw_body_base64"])
        received = row["received_at"]
        received = Time.parse(received) if received.is_a?(String)
        Event.new(scope: row["source_scope"], id: row["event_id"], type: row["event_type"], received_at: received,
                  attempt: Integer(row["attempt"]), operation_id: row["operation_id"], handler: row["handler"],
                  payload_json: row["payload"], raw_body: raw)
      end
    end
  end
end
