# frozen_string_literal: true

require "json"
require "digest"

module WebhookInbox
  # Effects - the jobs and mails a Ruby handler starts (perform_later, deliver_later), kept in
  # the inbox's outbox so they commit with the handler's writes and run after the commit,
  # whatever the app's job backend (docs/effects.md):
  #   1. while a handler runs (Handlers::Runner), Effects.capture is active on its thread: an
  #      ActiveJob enqueued then (Effects::JobCapture) is not given to the app's adapter but
  #      inserted into webhook_inbox_outbox (destination "active_job", its serialized job as
  #      payload, scheduled_at as the due time) on the handler's connection, in its savepoint:
  #      a handler that fails leaves no job behind, one that commits leaves each exactly once;
  #   2. the Ruby worker (Effects::JobRunner) leases due ones, performs each job in its process
  #      (ActiveJob::Base.execute, the app's callbacks and retry_on/discard_on as under any
  #      adapter) in a transaction that also marks it delivered, and retries one that raises
  #      with backoff, under the same key, until the worker's max attempts (then quarantined:
  #      requeue from the dashboard or rake webhook_inbox:requeue_effects).
  # Each captured job's key (its outbox operation id, WebhookInbox.effect_key while it runs)
  # is "<enqueuer's key>/<n>": the handler run's operation id and the job's place among the
  # run's enqueues, so a retried handler records the same keys and a job performed again
  # after a crash sees the same key. Job ids are stable too (serialized with the job).
  module Effects
    DESTINATION = "active_job"
    KEY_MAX = 200 # webhook_inbox_outbox.operation_id's CHECK: printable ASCII, at most 200
    INSERT_SQL = <<~SQL.tr("\n", " ").freeze
      INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, source_scope, source_event_id, next_attempt_at)
      VALUES ($1, $2, $3::jsonb, coalesce($4, ''), $5, coalesce(to_timestamp($6::float8), now()))
      ON CONFLICT (source_scope, operation_id) DO NOTHING
    SQL
    # Schema v30, only for a capture that has a trace context (the handle span's): the job keeps it.
    INSERT_SQL_TRACED = INSERT_SQL.sub("next_attempt_at)", "next_attempt_at, trace_context)")
                                  .sub("now()))", "now()), webhook_inbox_trace_context($7))").freeze
    # webhook_inbox_emit() with the handler's event as the source (the Ruby worker does not set
    # the settings the SQL handlers' runs set).
    EMIT_SQL = <<~SQL.tr("\n", " ").freeze
      SELECT webhook_inbox_emit($1, $2, $3::jsonb) FROM (SELECT set_config('webhook_inbox.source_scope', coalesce($4, ''), true),
             set_config('webhook_inbox.source_event_id', coalesce($5, ''), true)) s
    SQL
    STATE = :webhook_inbox_effects_scope # thread- (fiber-) local: the capture in force
    CURRENT = :webhook_inbox_effect_key   # likewise: the key of the effect being performed

    # What enqueues record into while a handler (or a captured job) runs: its connection, its
    # key, the event it came from, how many it recorded so far, and the trace context its jobs
    # keep (nil: none; Tracing).
    Scope = Struct.new(:connection, :key, :source_scope, :source_event_id, :count, :trace) do
      # Inserts job (an ActiveJob instance) into the outbox; returns its key.
      def record(job)
        self.count += 1
        key = Effects.child_key(self.key, count)
        binds = [key, DESTINATION, JSON.generate(job.serialize), source_scope, source_event_id,
                 job.scheduled_at&.to_f]
        connection.exec_query(trace ? INSERT_SQL_TRACED : INSERT_SQL, "webhook_inbox effect", trace ? binds << trace : binds)
        job.provider_job_id = key if job.respond_to?(:provider_job_id=)
        key
      end
    end

    module_function

    # Runs the block with enqueues captured into the outbox on connection; key is the
    # enqueuer's own stable key (a handler run's operation id, or a captured job's key).
    # Nests: the inner capture is restored to the outer one when the block ends.
    def capture(connection, key, source_scope: nil, source_event_id: nil, trace: nil)
      outer = Thread.current[STATE]
      Thread.current[STATE] = Scope.new(connection, key, source_scope, source_event_id, 0, trace)
      yield
    ensure
      Thread.current[STATE] = outer
    end

    # The capture in force on this thread, or nil.
    def capturing = Thread.current[STATE]

    # The key of the n-th effect recorded under parent: "<parent>/<n>", or its sha256 when
    # that is longer than the outbox allows (a deep chain of jobs enqueuing jobs).
    def child_key(parent, n)
      key = "#{parent}/#{n}"
      key.bytesize <= KEY_MAX ? key : "effect_#{Digest::SHA256.hexdigest(key)}"
    end

    # Adapters known not to commit with the app's database: a job enqueued through them from
    # a transaction is sent (or run) whether it commits or not, and lost with the process.
    NON_TRANSACTIONAL = %w[async inline sidekiq resque sneakers sucker_punch backburner qu test].freeze

    # The app's ActiveJob adapter name ("async"), or nil when ActiveJob is not loaded.
    def app_adapter_name
      return nil unless defined?(::ActiveJob::Base)

      ::ActiveJob::Base.queue_adapter_name.to_s
    rescue StandardError
      nil
    end

    # Whether name is an adapter that does not commit with the database.
    def non_transactional?(name) = NON_TRANSACTIONAL.include?(name.to_s)

    # Logs a warning (once per mailer and process) when a mail is delivered directly
    # (deliver_now) while a handler runs: it is sent before the handler's transaction commits,
    # and again at each retry of the handler; deliver_later is kept in the outbox instead.
    def watch_direct_deliveries!(logger)
      return if @watching

      @watching = true
      warned = {}
      ::ActiveSupport::Notifications.subscribe("deliver.action_mailer") do |*, payload|
        next unless capturing && Thread.current[CURRENT].nil?

        mailer = payload[:mailer].to_s
        next if warned[mailer]

        warned[mailer] = true
        logger&.warn("webhook_inbox: #{mailer} delivered a mail with deliver_now inside a Ruby handler: it is sent " \
                     "before the handler commits, and again if the handler is retried; use deliver_later (kept in " \
                     "the outbox, sent once after the commit: docs/effects.md)")
      end
    end

    # Prepends the capture into ActiveJob::Base (the railtie does it when ActiveJob loads).
    def install!
      require_relative "effects/job_capture"
      ::ActiveJob::Base.prepend(JobCapture) unless ::ActiveJob::Base <= JobCapture
    end
  end

  # Records an HTTP effect for the sidecar's destination (its --destination NAME=URL) in the
  # current transaction, as webhook_inbox_emit() does in SQL: inside a Ruby handler, on the
  # handler's connection and with its event as the source, so it commits with the handler's
  # writes; the sidecar POSTs payload with operation_id as its Idempotency-Key after the
  # commit. Idempotent per operation id: returns true when recorded now, false when it was
  # there already; the same id for another destination raises ActiveRecord::StatementInvalid.
  #   WebhookInbox.emit("refund:#{charge_id}", destination: :refunds, payload: { charge: charge_id })
  def self.emit(operation_id, destination:, payload:)
    scope = Effects.capturing
    connection = scope&.connection || ::ActiveRecord::Base.connection
    connection.select_value(Effects::EMIT_SQL, "webhook_inbox emit",
                            [operation_id.to_s, destination.to_s, JSON.generate(payload), scope&.source_scope, scope&.source_event_id])
  end

  # The key of the effect running on this thread (a captured job performed by the Ruby
  # worker): stable across its retries and redeliveries; pass it to APIs as their
  # idempotency key. nil outside one.
  def self.effect_key = Thread.current[Effects::CURRENT]
end
