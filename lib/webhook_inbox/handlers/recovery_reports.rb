# frozen_string_literal: true

require_relative "../instrumentation"
require_relative "report_poll"

module WebhookInbox
  module Handlers
    # RecoveryReports - the events reconcile recovered from a provider's API (the C sidecar's
    # `reconcile` and `run --reconcile`) told to the app, from the Ruby worker: one
    # recover.webhook_inbox notification each, once across every worker (schema v27,
    # db/functions/app_reports.sql), polled as ReportPoll says. A recovery is news, not a
    # failure: no Rails.error. Recoveries from before the v27 migration are never published.
    # Each one also logs a line through Rails.logger tagged with the event id and type. Never
    # the payload or the request's headers.
    class RecoveryReports < ReportPoll
      PROC = "webhook_inbox_recovery_reports_take(integer,double precision,double precision)" # db/027: this class's schema
      TAKE_SQL = "SELECT * FROM webhook_inbox_recovery_reports_take($1::int, $2::float8, $3::float8)"
      PRUNE_SQL = "SELECT webhook_inbox_app_reports_prune($1::int)"
      NAME = "webhook_inbox recovery reports"
      LOG_EVENT = "recovery_reported"

      # What the notification says of one recovery (ids and names only). how: "fetched"
      # (inserted from the provider's event list) or "redelivered" (a redelivery reconcile
      # asked the provider for, stored by the receiver).
      def self.payload(row)
        { provider: Instrumentation.provider_of(row["source_scope"]), scope: row["source_scope"],
          event_id: row["event_id"], event_type: row["event_type"], how: row["how"] }
      end

      # The worker's own log line's fields.
      def log_fields(row)
        "event_id=#{row['event_id']} type=#{row['event_type']} how=#{row['how']} scope=#{row['source_scope']}"
      end

      private

      def report(row)
        Instrumentation.instrument("recover.webhook_inbox", self.class.payload(row))
        Instrumentation.log(:info, "webhook_inbox event=#{LOG_EVENT} #{log_fields(row)}",
                            tags: ["event_id=#{row['event_id']}", "type=#{row['event_type']}"])
      end
    end
  end
end
