# frozen_string_literal: true

require_relative "../instrumentation"
require_relative "report_poll"

module WebhookInbox
  module Handlers
    # EffectReports - the HTTP effects (WebhookInbox.emit, webhook_inbox_emit) the C sidecar's
    # outbox delivery quarantined (a 4xx, or its last attempt failed) told to the app, from the
    # Ruby worker: one Rails.error report each (unhandled, error) and effect.webhook_inbox
    # (outcome quarantined), once across every worker (schema v27,
    # db/functions/app_reports.sql), polled as ReportPoll says. Jobs and mails the worker
    # performs itself are reported when it quarantines them (Effects::Reporting), not here.
    # Effects quarantined before the v27 migration are never reported. Each one also logs a
    # line through Rails.logger tagged with the operation id and destination. Never the
    # request's body, the destination's URL or a credential, nor the answer's body.
    class EffectReports < ReportPoll
      PROC = "webhook_inbox_effect_reports_take(integer,double precision,double precision)" # db/027: this class's schema
      TAKE_SQL = "SELECT * FROM webhook_inbox_effect_reports_take($1::int, $2::float8, $3::float8)"
      PRUNE_SQL = "SELECT webhook_inbox_app_reports_prune($1::int)"
      NAME = "webhook_inbox effect reports"
      LOG_EVENT = "effect_quarantine_reported"

      # What Rails.error gets for a quarantined HTTP effect; its message is the sidecar's
      # reason ("HTTP 422 (not retried: ...)", "max attempts reached (before: HTTP 503 ...)").
      class Failed < Error; end

      # What the report says of one quarantined effect (ids and names only): the event whose
      # handler emitted it (scope and event id nil for an effect emitted outside a handler).
      def self.context(row)
        scope = row["source_scope"].to_s.empty? ? nil : row["source_scope"]
        { provider: scope && Instrumentation.provider_of(scope), scope: scope, event_id: row["source_event_id"],
          operation_id: row["operation_id"], destination: row["destination"], attempt: Integer(row["attempts"]) }
      end

      # effect.webhook_inbox's payload for it: the keys of a job's, the operation id as its
      # effect_key, no job class, no duration (the sidecar's delivery times are its metrics').
      def self.payload(row)
        c = context(row)
        { provider: c[:provider], scope: c[:scope], event_id: c[:event_id], effect_key: c[:operation_id],
          destination: c[:destination], job_class: nil, attempt: c[:attempt], outcome: "quarantined", duration_ms: nil,
          error_class: Failed.name }
      end

      # The worker's own log line's fields.
      def log_fields(row)
        "operation_id=#{row['operation_id']} destination=#{row['destination']} attempt=#{row['attempts']} " \
          "event_id=#{row['source_event_id']} scope=#{row['source_scope']}"
      end

      private

      def report(row)
        Instrumentation.report_error(Failed.new(row["last_error"].to_s), handled: false, severity: :error, context: self.class.context(row))
        Instrumentation.instrument("effect.webhook_inbox", self.class.payload(row))
        Instrumentation.log(:error, "webhook_inbox event=#{LOG_EVENT} #{log_fields(row)}",
                            tags: ["operation_id=#{row['operation_id']}", "destination=#{row['destination']}"])
      end
    end
  end
end
