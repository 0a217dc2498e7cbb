# frozen_string_literal: true

require "time"
require "base64"
require "pg"
require_relative "../effects"
require_relative "../instrumentation"

module WebhookInbox
  module Handlers
    # Runner - one round of the Ruby worker on an ActiveRecord connection: up to limit runs
    # (in the caller's transaction, as savepoints, when there is one: drain_webhook_inbox runs
    # in the test's). Per round, three calls (db/functions/ruby_handlers.sql, v16):
    #  1. webhook_inbox_ruby_start_batch, one statement committed alone: up to limit due first
    #     attempts, each charged and leased for its backoff, before any handler runs, so a
    #     handler that kills its process (exit!, kill -9, a segfault, OOM) has spent that
    #     attempt and is quarantined after its last one. Any other run (attempt > 1: a retry,
    #     a batch-mate of a crash, an exhausted run) is a round alone;
    #  2. the batch runs in one transaction (one commit): webhook_inbox_ruby_lock_batch locks
    #     each run's event, then the run (dispatch's order), in the order of their events (two
    #     workers lock events in one order); each handler runs in a savepoint;
    #     webhook_inbox_ruby_finish_batch records every result, then the commit. A process
    #     killed mid-batch applies none of the batch: its runs are due again after their
    #     backoff, charged once, and each then runs alone, so a handler that kills its process
    #     dies alone from its second attempt on and its batch-mates succeed without it.
    # The handler's writes and its run marked delivered commit together, or not at all. A
    # batch-mate whose lease ran out before the lock (a batch slower than the backoff of a
    # first attempt, d/2..d) may be started by another worker meanwhile: charged a second
    # time, it runs there alone and this batch skips it (the lock is fenced by the attempt).
    # Each handler runs in a savepoint that no transaction block of its own joins (Savepoint):
    # its blocks roll back as they would outside the worker. A handler's StandardError rolls
    # its savepoint back and retries the run (the events' backoff; quarantined at
    # max_attempts), and so do a handler that ran past its time limit (TimeLimit: interrupted,
    # its statement cancelled; its batch-mates go on) and one that raised
    # ActiveRecord::Rollback (the savepoint swallows it: the block did not complete, nothing
    # applied; a retry, not Permanent, as a condition it checked may pass later);
    # WebhookInbox::Permanent quarantines it (and its event) at once. on_result gets each
    # Result once the batch committed (a log that says done means done). Anything that breaks
    # the transaction itself (the connection, a signal) propagates: its transaction rolls
    # back (the whole batch, or the run alone), the attempts stay charged. Jobs and mails a
    # handler enqueues are captured into the outbox in its savepoint (Effects): they commit
    # or roll back with its writes. Each handler call is published as run.webhook_inbox around
    # it (its SQL nested under it for an APM), with the handler's outcome, before the commit
    # (handle.webhook_inbox, from the Worker, says what committed).
    class Runner
      START_BATCH_PROC = "webhook_inbox_ruby_start_batch(integer, integer, bigint, bigint)" # db/016: this Runner's schema
      START_BATCH_SQL = "SELECT * FROM webhook_inbox_ruby_start_batch($1::int, $2::int, $3::bigint, $4::bigint)"
      LOCK_BATCH_SQL = "SELECT * FROM webhook_inbox_ruby_lock_batch($1::text[], $2::int[])"
      FINISH_BATCH_SQL = "SELECT * FROM webhook_inbox_ruby_finish_batch($1::text[], $2::int[], $3::text[], $4::text[], " \
                         "$5::float8[], $6::int, $7::bigint, $8::bigint)"
      # Schema v30, read only when the app traces (Tracing.on?): the runs' receipt contexts.
      TRACES_SQL = "SELECT operation_id, trace_context FROM webhook_inbox_outbox WHERE source_scope = ANY ($1::text[]) " \
                   "AND operation_id = ANY ($2::text[]) AND trace_context IS NOT NULL"
      TEXT_ARRAY = PG::TextEncoder::Array.new
      FLOAT_ARRAY = PG::TextEncoder::Array.new(elements_type: PG::TextEncoder::Float.new)

      RUN_OUTCOMES = { "done" => "done", "retry" => "retry", "quarantine" => "quarantined" }.freeze

      # status: the run's new status ("delivered", "pending" = will be retried, "quarantined").
      # exception: what the handler raised (nil when it raised nothing: error says why it failed).
      Result = Struct.new(:operation_id, :handler, :source_scope, :event_id, :event_type, :attempt, :status, :error,
                          :duration_ms, :exception, keyword_init: true)

      # time_limit: seconds a handler may run (nil: no limit).
      def initialize(registry, max_attempts: 10, backoff_base_ms: 1000, backoff_cap_ms: 3_600_000, on_result: nil,
                     time_limit: nil)
        @registry = registry
        @time_limit = TimeLimit.new(time_limit)
        @max_attempts = Integer(max_attempts)
        @backoff_base_ms = Integer(backoff_base_ms)
        @backoff_cap_ms = Integer(backoff_cap_ms)
        @on_result = on_result
      end

      # A handler's time limit in seconds, or nil.
      def time_limit = @time_limit.seconds

      # Runs up to limit due runs; returns their Results (empty: nothing due). The batch's
      # transaction stays joinable on purpose: inside a non-joinable one, each handler's
      # savepoint would run its records' commit callbacks when released, before the commit.
      def run_batch(connection, limit)
        started = start_batch(connection, Integer(limit))
        return [] if started.empty?

        results = connection.transaction(requires_new: true) { run_started(connection, started) }
        results.each { |r| @on_result&.call(r) } # after the commit (or the caller's savepoint)
      end

      private

      # The round's runs, charged and committed: first attempts, up to limit, or one other run
      # alone. Outside a transaction the statement commits itself (one round trip); in the
      # caller's, it is a savepoint.
      def start_batch(connection, limit)
        binds = [limit, @max_attempts, @backoff_base_ms, @backoff_cap_ms]
        select = proc { connection.select_all(START_BATCH_SQL, "webhook_inbox ruby start", binds).to_a }
        runs = connection.transaction_open? ? connection.transaction(requires_new: true, &select) : select.call
        # A started run is leased past now(): taken twice, it would have been charged twice.
        raise Error, "webhook_inbox: a Ruby run was started twice in one batch" unless runs.uniq { |r| r["operation_id"] }.size == runs.size

        runs
      end

      # In the batch's transaction: the runs locked (those still this attempt's, in their
      # events' order), each handler in its savepoint, every result saved in one call.
      def run_started(connection, started)
        exhausted = started.to_h { |s| [s["operation_id"], [true, "t"].include?(s["exhausted"])] }
        rows = connection.select_all(LOCK_BATCH_SQL, "webhook_inbox ruby lock",
                                     [TEXT_ARRAY.encode(started.map { |s| s["operation_id"] }),
                                      TEXT_ARRAY.encode(started.map { |s| Integer(s["attempt"]).to_s })]).to_a
        return [] if rows.empty?

        statement = @time_limit.statement_for(connection) # what TimeLimit cancels, taken in this thread
        traces = trace_contexts(connection, rows)
        ran = rows.map { |row| run_one(connection, row, exhausted.fetch(row["operation_id"]), statement, traces[row["operation_id"]]) }
        statuses = finish(connection, ran)
        ran.map do |r, _outcome|
          # NULL: the run locked is no longer pending at this attempt (changed under the lock:
          # a handler itself, a bug); the batch's transaction fails and rolls back, the handlers' writes with it.
          r.status = statuses[r.operation_id] or
            raise Error, "webhook_inbox: Ruby run #{r.operation_id} was no longer pending when saved; its transaction rolled back"
          r
        end
      end

      # { operation_id => traceparent } of the locked runs that have a receipt context, when the
      # app traces (Tracing.on?) and the schema has them (v30); {} otherwise, without a query.
      def trace_contexts(connection, rows)
        return {} unless Tracing.on?

        @traced = Tracing.outbox_column?(connection) if @traced.nil?
        return {} unless @traced

        connection.select_rows(TRACES_SQL, "webhook_inbox ruby traces",
                               [TEXT_ARRAY.encode(rows.map { |r| r["source_scope"] }.uniq),
                                TEXT_ARRAY.encode(rows.map { |r| r["operation_id"] })]).to_h
      end

      # The handler of one locked run (or the quarantine of an exhausted one): [its Result
      # (status set once saved), "done" | "retry" | "quarantine"]. With a receipt context
      # (trace), in a webhook_inbox.handle span, its child (Tracing.continue).
      def run_one(connection, row, exhausted, statement, trace = nil)
        attempt = Integer(row["attempt"])
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        result, error, exception =
          if exhausted
            ["quarantine", "attempt #{attempt} started and never finished (the worker was killed, crashed or lost its " \
                           "connection during the handler); it was the last of #{@max_attempts}"]
          elsif trace
            traced_call(connection, row, attempt, statement, trace)
          else
            instrumented_call(connection, row, attempt, statement)
          end
        ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000
        [Result.new(operation_id: row["operation_id"], handler: row["handler"], source_scope: row["source_scope"],
                    event_id: row["event_id"], event_type: row["event_type"], attempt: attempt, error: error, duration_ms: ms,
                    exception: exception),
         result]
      end

      # instrumented_call in a webhook_inbox.handle span, the child of the run's receipt span:
      # ids, names and the outcome, never the payload.
      def traced_call(connection, row, attempt, statement, trace)
        attrs = { "webhook_inbox.source_scope" => row["source_scope"].to_s, "webhook_inbox.event_type" => row["event_type"].to_s,
                  "webhook_inbox.event_id" => row["event_id"].to_s, "webhook_inbox.handler" => row["handler"].to_s,
                  "webhook_inbox.attempt" => attempt }
        Tracing.continue(Tracing::HANDLE, trace, attrs) do |span|
          out = instrumented_call(connection, row, attempt, statement, traced: true)
          span&.set_attribute("webhook_inbox.result", RUN_OUTCOMES.fetch(out[0]))
          span&.status = ::OpenTelemetry::Trace::Status.error(out[0]) if span && out[0] != "done"
          out
        end
      end

      # call_handler inside the run.webhook_inbox notification (ids and names only).
      def instrumented_call(connection, row, attempt, statement, traced: false)
        payload = lambda do |(result, *)|
          { provider: Instrumentation.provider_of(row["source_scope"]), scope: row["source_scope"], event_id: row["event_id"],
            event_type: row["event_type"], handler: row["handler"], attempt: attempt, outcome: RUN_OUTCOMES.fetch(result) }
        end
        Instrumentation.instrument("run.webhook_inbox", payload) do
          call_handler(connection, row["handler"], event_for(row), statement, traced)
        end
      end

      # Every run's outcome saved in one call: { operation_id => new status, or nil }.
      def finish(connection, ran)
        runs = ran.map(&:first)
        binds = [TEXT_ARRAY.encode(runs.map(&:operation_id)), TEXT_ARRAY.encode(runs.map { |r| r.attempt.to_s }),
                 TEXT_ARRAY.encode(ran.map(&:last)), TEXT_ARRAY.encode(runs.map(&:error)),
                 FLOAT_ARRAY.encode(runs.map(&:duration_ms)), @max_attempts, @backoff_base_ms, @backoff_cap_ms]
        connection.select_all(FINISH_BATCH_SQL, "webhook_inbox ruby finish", binds).to_h { |r| [r["operation_id"], r["status"]] }
      end

      # ["done", nil] | ["retry", error(, exception)] | ["quarantine", reason(, exception)]
      # traced: in a handle span, whose context the jobs it enqueues keep (their effect spans' parent).
      def call_handler(connection, name, event, statement, traced = false)
        subscription = @registry[name]
        return ["retry", "no handler named #{name} is subscribed in this app"] unless subscription
        return ["retry", "the event row is missing"] if event.type.nil?

        completed = false
        savepoint = nil
        Savepoint.run(connection) do |sp|
          savepoint = sp
          # Jobs and mails it enqueues go to the outbox in this savepoint (Effects).
          Effects.capture(connection, event.operation_id, source_scope: event.scope, source_event_id: event.id,
                                                          trace: traced ? Tracing.traceparent : nil) do
            @time_limit.run(statement) { subscription.callable.call(event) }
          end
          completed = true
        end
        # ActiveRecord::Rollback is swallowed by the savepoint: nothing of the handler applied.
        return ["retry", "ActiveRecord::Rollback: the handler rolled its writes back"] unless completed

        ["done", nil]
      rescue Permanent => e
        ["quarantine", describe(e), e]
      rescue StandardError, TimeLimit::Exceeded => e
        raise if connection_lost?(connection)

        ["retry", describe(e), e]
      ensure
        close_rolled_back(connection, savepoint) unless completed
      end

      # ActiveRecord rolls a failed handler's savepoint back (ROLLBACK TO) but leaves it open,
      # so the next handler's savepoint (same name) would nest inside it: a batch with many
      # failures would pile up subtransactions (past 64, every snapshot on the server is
      # suboverflowed). Releases it; nothing of the handler remains either way.
      def close_rolled_back(connection, savepoint)
        return unless savepoint.respond_to?(:savepoint_name) && savepoint.materialized? && connection.active?

        connection.release_savepoint(savepoint.savepoint_name)
      rescue StandardError
        nil # the connection failed meanwhile: the batch's transaction fails as it would have
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
