# frozen_string_literal: true

require "time"
require "base64"
require "json"

module WebhookInbox
  module Handlers
    # Runner - one round of the Ruby worker on an ActiveRecord connection: up to limit runs
    # (in the caller's transaction, as savepoints, when there is one: drain_webhook_inbox runs
    # in the test's). Per round (db/013_ruby_handler_fixes.sql):
    #  1. webhook_inbox_ruby_start, up to limit times in one statement: each call takes one
    #     due run, charges it and leases it for its backoff; one commit charges the batch,
    #     before any handler runs, so a handler that kills its process (exit!, kill -9, a
    #     segfault, OOM) has spent that attempt and is quarantined after its last one. A batch
    #     is first attempts only: any other run (attempt > 1: a retry, a batch-mate of a
    #     crash, an exhausted run) is given back uncharged (a savepoint) and is a round alone;
    #  2. the batch runs in one transaction (one commit): per run, in its event's order (two
    #     workers lock events in one order), webhook_inbox_ruby_lock locks its event, then the
    #     run (dispatch's order); the handler runs in a savepoint; webhook_inbox_ruby_finish
    #     records its result. A process killed mid-batch applies none of the batch: its runs
    #     are due again after their backoff, charged once, and each then runs alone, so a
    #     handler that kills its process dies alone from its second attempt on and its
    #     batch-mates succeed without it.
    # The handler's writes and its run marked delivered commit together, or not at all. A
    # batch-mate whose lease ran out before its turn (a batch slower than the backoff of a
    # first attempt, d/2..d) may be started by another worker meanwhile: charged a second
    # time, it runs there alone and this batch skips it (the lock is fenced by the attempt).
    # A handler's StandardError rolls its savepoint back and retries the run (the events'
    # backoff; quarantined at max_attempts), and so does a handler that raised
    # ActiveRecord::Rollback (the savepoint swallows it: the block did not complete, nothing
    # applied; a retry, not Permanent, as a condition it checked may pass later);
    # WebhookInbox::Permanent quarantines it (and its event) at once. Anything that breaks
    # the transaction itself (the connection, a signal) propagates: its transaction rolls
    # back (the whole batch, or the run alone), the attempts stay charged.
    class Runner
      LOCK_SQL = "SELECT * FROM webhook_inbox_ruby_lock($1, $2::int)"
      FINISH_SQL = "SELECT webhook_inbox_ruby_finish($1, $2::int, $3, $4, $5::float8, $6::int, $7::bigint, $8::bigint)"
      # A savepoint, then webhook_inbox_ruby_start called once per row of generate_series (its
      # argument refers to g: an argument that did not would be evaluated once), each call
      # seeing the runs the ones before it started. One statement, one round trip.
      START_BATCH_SQL = "SAVEPOINT webhook_inbox_start; SELECT s.* FROM generate_series(1, %d) g " \
                        "CROSS JOIN LATERAL webhook_inbox_ruby_start(%d + 0 * g, %d, %d) s"
      UNSTART_SQL = "ROLLBACK TO SAVEPOINT webhook_inbox_start"
      EVENTS_SQL = "SELECT operation_id, source_scope, source_event_id FROM webhook_inbox_outbox " \
                   "WHERE operation_id IN (SELECT jsonb_array_elements_text($1::jsonb))"

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
        started = connection.transaction(requires_new: true) { start_batch(connection, Integer(limit)) }
        return [] if started.empty?

        started = in_event_order(connection, started)
        connection.transaction(requires_new: true) { started.map { |s| run_one(connection, s) } }.compact
      end

      private

      # The round's runs, charged: first attempts, up to limit; or one other run (a retry, a
      # batch-mate of a crash, an exhausted run) alone. The starts are taken behind a
      # savepoint: a set with a run that is not a first attempt among others is given back
      # uncharged and taken again smaller (the first attempts before it, or it alone), so such
      # a run is never charged with, nor killed by, a batch-mate. Ends: n falls each time.
      def start_batch(connection, limit)
        n = limit
        loop do
          runs = start_many(connection, n)
          k = runs.index { |r| !first_attempt?(r) }
          return runs if k.nil? || runs.size == 1

          connection.execute(UNSTART_SQL, "webhook_inbox ruby start")
          n = [k, 1].max
        end
      end

      # Up to n starts in one statement after a savepoint (execute: the simple protocol takes
      # two statements, a prepared statement does not).
      def start_many(connection, n)
        result = connection.execute(format(START_BATCH_SQL, n, @max_attempts, @backoff_base_ms, @backoff_cap_ms),
                                    "webhook_inbox ruby start")
        runs = result.to_a.tap { result.clear }
        # A started run is leased past now(): taken twice, it would have been charged twice.
        raise Error, "webhook_inbox: a Ruby run was started twice in one batch" unless runs.uniq { |r| r["operation_id"] }.size == runs.size

        runs
      end

      def first_attempt?(run) = Integer(run["attempt"]) == 1 && ![true, "t"].include?(run["exhausted"])

      # The runs sorted by their event (then operation id), so two workers' batches
      # lock events in one order and never deadlock on two events they share.
      def in_event_order(connection, runs)
        return runs if runs.size < 2

        ids = JSON.generate(runs.map { |r| r["operation_id"] })
        keys = connection.select_all(EVENTS_SQL, "webhook_inbox ruby events", [ids])
                         .to_h { |r| [r["operation_id"], [r["source_scope"].to_s, r["source_event_id"].to_s]] }
        runs.sort_by { |r| [*keys.fetch(r["operation_id"], ["", ""]), r["operation_id"]] }
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
