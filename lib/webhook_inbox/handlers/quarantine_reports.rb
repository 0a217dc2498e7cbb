# frozen_string_literal: true

require_relative "../instrumentation"
require_relative "report_poll"

module WebhookInbox
  module Handlers
    # QuarantineReports - the quarantines the C sidecar made (a SQL handler's
    # webhook_inbox_quarantine or an error at its last attempt, an unrouted event, one
    # quarantined at receipt) told to the app, from the Ruby worker: one Rails.error report
    # each (unhandled, error) and quarantine.webhook_inbox, once across every worker (schema
    # v25, db/functions/error_reports.sql), polled as ReportPoll says. Quarantines from before
    # the v25 migration are never reported, nor one committed more than grace_s after it set
    # processed_at. A Ruby handler's quarantine is not one of these: the worker reports it
    # when the run commits (Reporting). Each one also logs a line through Rails.logger tagged
    # with the event id, type and attempt. Never the payload.
    class QuarantineReports < ReportPoll
      PROC = "webhook_inbox_error_reports_take(integer,double precision,double precision)" # v27: this class's schema
      TAKE_SQL = "SELECT * FROM webhook_inbox_error_reports_take($1::int, $2::float8, $3::float8)"
      PRUNE_SQL = "SELECT webhook_inbox_error_reports_prune($1::int)"
      NAME = "webhook_inbox quarantine reports"
      LOG_EVENT = "quarantine_reported"

      # What Rails.error gets for a sidecar's quarantine; its message says why (QuarantineReports.message).
      class Quarantined < Error; end

      # A database error's stored text ("22P02: invalid input syntax ... \"4242...\"") can
      # quote payload values (the sidecar logs only its SQLSTATE, for that reason).
      DATABASE_ERROR = /\A([0-9A-Z]{5}): /.freeze

      # What the report and the notification say of the quarantine's reason: a handler's own
      # (webhook_inbox_quarantine's, like a Ruby exception's message) or the sidecar's as
      # stored; of a database error, its SQLSTATE only.
      def self.message(last_error)
        text = last_error.to_s
        code = text[DATABASE_ERROR, 1]
        code ? "#{code}: database error at the last attempt (its text is in the dashboard)" : text
      end

      # What the report and the notification say of one quarantine (ids and names only;
      # handler: the SQL handler of the route its event type takes, nil when unrouted).
      def self.context(row)
        { provider: Instrumentation.provider_of(row["source_scope"]), scope: row["source_scope"],
          event_id: row["event_id"], event_type: row["event_type"], handler: row["handler"], attempt: Integer(row["attempts"]) }
      end

      # The worker's own log line's fields.
      def log_fields(row)
        "event_id=#{row['event_id']} type=#{row['event_type']} attempt=#{row['attempts']} scope=#{row['source_scope']}"
      end

      private

      def report(row)
        context = self.class.context(row)
        message = self.class.message(row["last_error"])
        Instrumentation.report_error(Quarantined.new(message), handled: false, severity: :error, context: context)
        Instrumentation.instrument("quarantine.webhook_inbox", context.merge(error: message))
        Instrumentation.log(:error, "webhook_inbox event=#{LOG_EVENT} #{log_fields(row)}",
                            tags: ["event_id=#{row['event_id']}", "type=#{row['event_type']}", "attempt=#{row['attempts']}"])
      end
    end
  end
end
