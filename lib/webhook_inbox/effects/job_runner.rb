# frozen_string_literal: true

require "securerandom"
require "socket"
require_relative "../effects"

module WebhookInbox
  module Effects
    # JobRunner - performs the jobs handlers enqueued (Effects), in the Ruby worker after the
    # handlers' commit. One round on an ActiveRecord connection:
    #  1. webhook_inbox_outbox_claim("active_job", ...), committed alone: up to limit due jobs,
    #     each charged one attempt and leased to this runner for the lease (no row lock is held
    #     while a job runs; a paused "active_job" destination is not claimed);
    #  2. each job in its own transaction: ActiveJob::Base.execute(its serialized job), with
    #     WebhookInbox.effect_key set and further enqueues captured under its key, then
    #     webhook_inbox_outbox_save(delivered) under the lease, then the commit. The job's
    #     writes, the jobs it enqueued and its delivered mark commit together, or not at all;
    #  3. a job that raises: its transaction rolls back, and the retry (backoff, quarantined
    #     at max attempts) is saved in a statement of its own.
    # A worker killed before step 2 commits leaves the job pending and leased: once the lease
    # ends another round performs it again, under the same key (at least once). What a job did
    # outside the database before the kill (an SMTP send) is not rolled back: such a job runs
    # twice only if the process dies between that call and the commit (docs/effects.md).
    # A job slower than the lease may be started by another worker meanwhile; the slower one's
    # save then finds the lease gone and rolls back its writes (its outside calls stay).
    class JobRunner
      LEASE_MS = 60_000 # the worker's --job-lease
      CLAIM_SQL = "SELECT operation_id, payload, attempts FROM webhook_inbox_outbox_claim($1, $2::int, $3, $4::bigint, $5::int)"
      SAVE_SQL = "SELECT new_status FROM webhook_inbox_outbox_save($1, $2, $3, $4, NULL, NULL, NULL, $5::int, $6::bigint, $7::bigint)"
      CLAIM_SQL_TRACED = CLAIM_SQL.sub("attempts FROM", "attempts, trace_context FROM").freeze # v30, when tracing
      SOURCE_SQL = "SELECT source_scope, source_event_id FROM webhook_inbox_outbox WHERE operation_id = $1"

      # status: "delivered", "pending" (retried later), "quarantined", or nil (the lease was lost).
      # exception: what the job raised (nil when it succeeded). source_scope, source_event_id:
      # the event whose handler enqueued it, read only for a quarantined job (for its report).
      Result = Struct.new(:key, :job_class, :attempt, :status, :error, :duration_ms, :exception, :source_scope,
                          :source_event_id, keyword_init: true)

      attr_reader :owner # the lease owner: also the worker's id in webhook_inbox_workers

      def initialize(max_attempts: 10, backoff_base_ms: 1000, backoff_cap_ms: 3_600_000, lease_ms: LEASE_MS, on_result: nil)
        @max_attempts = Integer(max_attempts)
        @backoff_base_ms = Integer(backoff_base_ms)
        @backoff_cap_ms = Integer(backoff_cap_ms)
        @lease_ms = Integer(lease_ms)
        @owner = "ruby:#{Socket.gethostname}:#{Process.pid}:#{SecureRandom.hex(4)}"[0, 200]
        @on_result = on_result
      end

      # Performs up to limit due jobs; returns their Results (empty: none due, or ActiveJob is
      # not loaded in this app).
      def run_batch(connection, limit)
        return [] unless defined?(::ActiveJob::Base)

        claim = traced?(connection) ? CLAIM_SQL_TRACED : CLAIM_SQL
        claimed = in_own_transaction(connection) do
          connection.select_all(claim, "webhook_inbox job claim", [DESTINATION, Integer(limit), @owner, @lease_ms, @max_attempts]).to_a
        end
        claimed.map { |row| traced_perform(connection, row).tap { |r| @on_result&.call(r) } }
      end

      private

      # The app traces (Tracing.on?) and the outbox keeps contexts (v30; asked once).
      def traced?(connection)
        return false unless Tracing.on?

        @traced = Tracing.outbox_column?(connection) if @traced.nil?
        @traced
      end

      # perform, in a webhook_inbox.effect span when the job has a trace context (the handle
      # span of the handler that enqueued it): its key, class, attempt and outcome.
      def traced_perform(connection, row)
        return perform(connection, row) unless row["trace_context"]

        attrs = { "webhook_inbox.destination" => DESTINATION, "webhook_inbox.operation_id" => row["operation_id"].to_s,
                  "webhook_inbox.attempt" => Integer(row["attempts"]) }
        Tracing.continue(Tracing::EFFECT, row["trace_context"], attrs) do |span|
          perform(connection, row).tap do |r|
            span&.add_attributes("webhook_inbox.result" => r.status.to_s, "webhook_inbox.job_class" => r.job_class.to_s)
            span&.status = ::OpenTelemetry::Trace::Status.error(r.exception&.class&.name.to_s) if span && r.status != "delivered"
          end
        end
      end

      def perform(connection, row)
        key = row["operation_id"]
        data = JSON.parse(row["payload"])
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        status = connection.transaction(requires_new: true) do
          execute(connection, key, data)
          save(connection, key, "delivered", nil).tap { |s| raise ::ActiveRecord::Rollback unless s }
        end
        result(key, data, row, status, nil, t0)
      rescue StandardError => e
        raise if lost?(connection)

        error = "#{e.class}: #{e.message}"[0, 1000]
        status = in_own_transaction(connection) { save(connection, key, "retry", error) }
        result(key, data, row, status, error, t0).tap do |r|
          r.exception = e
          source(connection, r) if status == "quarantined"
        end
      end

      # The quarantined job's event (what Rails.error's context names); a failure to read it
      # leaves them nil: the job is saved, its report only says less.
      def source(connection, result)
        row = connection.select_one(SOURCE_SQL, "webhook_inbox job source", [result.key]) or return
        result.source_scope = row["source_scope"]
        result.source_event_id = row["source_event_id"]
      rescue StandardError
        nil
      end

      # The job performed as its adapter would perform it, with enqueues captured under its key.
      # ActiveJob leaves the job (its arguments with it) in ActiveSupport's execution context,
      # which Rails.error adds to every later report of the round: it is put back as it was.
      def execute(connection, key, data)
        outer = Thread.current[CURRENT]
        Thread.current[CURRENT] = key
        in_own_execution_context { Effects.capture(connection, key) { ::ActiveJob::Base.execute(data) } }
      ensure
        Thread.current[CURRENT] = outer
      end

      def in_own_execution_context(&block)
        context = defined?(::ActiveSupport::ExecutionContext) && ::ActiveSupport::ExecutionContext
        context.respond_to?(:set) ? context.set(job: nil, &block) : yield
      end

      def save(connection, key, outcome, error)
        connection.select_value(SAVE_SQL, "webhook_inbox job save",
                                [key, @owner, outcome, error, @max_attempts, @backoff_base_ms, @backoff_cap_ms])
      end

      # A statement committed alone outside a transaction; a savepoint inside the caller's (a test's drain).
      def in_own_transaction(connection, &block)
        connection.transaction_open? ? connection.transaction(requires_new: true, &block) : block.call
      end

      def lost?(connection)
        !connection.active?
      rescue StandardError
        true
      end

      def result(key, data, row, status, error, t0)
        Result.new(key: key, job_class: data.is_a?(Hash) ? data["job_class"] : nil, attempt: Integer(row["attempts"]),
                   status: status, error: error, duration_ms: (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000)
      end
    end
  end
end
