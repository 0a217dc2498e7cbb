# frozen_string_literal: true

require "time"
require "base64"

module WebhookInbox
  module Handlers
    # Runner - one round of the Ruby worker on an ActiveRecord connection: up to limit runs,
    # each in a transaction of its own (nested in the caller's, as savepoints, when there is
    # one: drain_webhook_inbox runs in the test's). Per run (db/013_ruby_handler_fixes.sql):
    # webhook_inbox_ruby_start takes one due run, charges it and leases it for its backoff, and
    # commits before the handler runs (with the previous run's result, else alone), so a
    # handler that kills its process (exit!, kill -9, a segfault, OOM) has spent that attempt
    # and is quarantined after its last one, and the runs committed before it stay done;
    # webhook_inbox_ruby_lock locks the run's event, then the run (dispatch's order); the
    # handler runs in a savepoint; webhook_inbox_ruby_finish records its result in the same
    # transaction: the handler's writes and its run marked delivered commit together, or not
    # at all. A handler's StandardError rolls its savepoint back and retries the run (the
    # events' backoff; quarantined at max_attempts), and so does a handler that raised
    # ActiveRecord::Rollback (the savepoint swallows it: the block did not complete, nothing
    # applied; a retry, not Permanent, as a condition it checked may pass later);
    # WebhookInbox::Permanent quarantines it (and its event) at once. Anything that breaks
    # the transaction itself (the connection, a signal) propagates: that run's transaction
    # rolls back, its attempt stays charged, it is due again after its backoff.
    class Runner
      START_SQL = "SELECT * FROM webhook_inbox_ruby_start($1::int, $2::bigint, $3::bigint)"
      LOCK_SQL = "SELECT * FROM webhook_inbox_ruby_lock($1, $2::int)"
      FINISH_SQL = "SELECT webhook_inbox_ruby_finish($1, $2::int, $3, $4, $5::float8, $6::int, $7::bigint, $8::bigint)"

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
        limit = Integer(limit)
        results = []
        started = connection.transaction(requires_new: true) { start(connection) }
        while started
          connection.transaction(requires_new: true) do
            result = run_one(connection, started)
            results << result if result
            # The next run's charge commits with this run's result.
            started = results.size < limit ? start(connection) : nil
          end
        end
        results
      end

      private

      def start(connection)
        connection.select_all(START_SQL, "webhook_inbox ruby start", [@max_attempts, @backoff_base_ms, @backoff_cap_ms]).first
      end

      # nil when the run is no longer this attempt's (another worker took it after its lease).
      def run_one(connection, started)
        attempt = Integer(started["attempt"])
        row = connection.select_all(LOCK_SQL, "webhook_inbox ruby lock", [started["operation_id"], attempt]).first
        return nil unless row

        event = event_for(row)
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        result, error =
          if [true, "t"].include?(started["exhausted"])
            ["quarantine", "attempt #{attempt} started and never finished (the worker was killed, crashed or lost its " \
                           "connection during the handler); it was the last of #{@max_attempts}"]
          else
            call_handler(connection, row["handler"], event)
          end
        ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000
        status = connection.select_value(FINISH_SQL, "webhook_inbox ruby finish",
                                         [row["operation_id"], attempt, result, error, ms, @max_attempts, @backoff_base_ms,
                                          @backoff_cap_ms])
        # NULL: the run locked is no longer pending at this attempt (changed under the lock:
        # the handler itself, a bug); its transaction fails and rolls back, the handler's writes with it.
        raise Error, "webhook_inbox: Ruby run #{row['operation_id']} was no longer pending when saved; its transaction rolled back" unless status

        Result.new(operation_id: row["operation_id"], handler: row["handler"], source_scope: row["source_scope"],
                   event_id: row["event_id"], event_type: row["event_type"], attempt: attempt, status: status,
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
