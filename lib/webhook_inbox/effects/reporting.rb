# frozen_string_literal: true

require_relative "../instrumentation"

module WebhookInbox
  module Effects
    # Reporting - tells the app what became of one job a handler enqueued, once the worker
    # performed it (JobRunner's on_result): the effect.webhook_inbox notification, and
    # Rails.error for a job that failed for good (quarantined at its last attempt: unhandled,
    # error; one report). A failed attempt that will be retried is not reported: ActiveJob's
    # own instrumentation and the job's retry_on are where an app sees those. Never the job's
    # arguments.
    module Reporting
      OUTCOMES = { "delivered" => "done", "pending" => "retry", "quarantined" => "quarantined" }.freeze

      # A quarantined job that raised nothing this run (its arguments no longer deserialize,
      # ...): what Rails.error gets, with the stored error text.
      class Failure < Error; end

      module_function

      def outcome(result) = OUTCOMES.fetch(result.status.to_s, "lease_lost")

      # The notification and, for a quarantine, the report for one performed job.
      def call(result)
        out = outcome(result)
        context = context(result)
        Instrumentation.instrument("effect.webhook_inbox",
                                   context.merge(outcome: out, duration_ms: result.duration_ms.round(3),
                                                 error_class: result.exception&.class&.name))
        return unless out == "quarantined"

        error = result.exception || Failure.new(result.error.to_s)
        Instrumentation.report_error(error, handled: false, severity: :error, context: context)
      end

      # Ids and names only: the event whose handler enqueued the job (nil when not read), the
      # job's effect key (WebhookInbox.effect_key), its outbox destination ("active_job") and
      # class, the attempt.
      def context(result)
        { provider: result.source_scope && Instrumentation.provider_of(result.source_scope), scope: result.source_scope,
          event_id: result.source_event_id, effect_key: result.key, destination: Effects::DESTINATION,
          job_class: result.job_class, attempt: result.attempt }
      end
    end
  end
end
