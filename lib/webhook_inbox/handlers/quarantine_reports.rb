# frozen_string_literal: true

require_relative "../instrumentation"

module WebhookInbox
  module Handlers
    # QuarantineReports - the quarantines the C sidecar made (a SQL handler's
    # webhook_inbox_quarantine or an error at its last attempt, an unrouted event, one
    # quarantined at receipt) told to the app, from the Ruby worker: one Rails.error report
    # each (unhandled, error) and quarantine.webhook_inbox, once across every worker (schema
    # v25, db/functions/error_reports.sql). Per poll, in one transaction: up to limit
    # quarantines taken (recorded as reported), each reported, then the commit. A worker that
    # dies before its commit leaves them to the next poll of any worker: at least once toward
    # the tracker, exactly once when nothing crashes. Quarantines from before the v25
    # migration are never reported, nor one committed more than grace_s after it set
    # processed_at (the scan's watermark follows an hour behind). A Ruby handler's quarantine is not one of these: the
    # worker reports it when the run commits (Reporting). Each one also logs a line through
    # Rails.logger tagged with the event id, type and attempt. Never the payload.
    class QuarantineReports
      PROC = "webhook_inbox_error_reports_take(integer,double precision)" # db/025: this class's schema
      TAKE_SQL = "SELECT * FROM webhook_inbox_error_reports_take($1::int, $2::float8)"
      PRUNE_SQL = "SELECT webhook_inbox_error_reports_prune($1::int)"
      LIMIT = 100
      # How long after it set processed_at a quarantine's transaction may commit and still be
      # reported; each poll rereads the quarantines of this last hour (one index probe each).
      GRACE_S = 3600
      PRUNE_EVERY_S = 60

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

      # on_failure: called with (row, exception) when the notification or Rails.error raised
      # for one row (the others are still reported; the row stays reported).
      def initialize(limit: LIMIT, grace_s: GRACE_S, on_failure: nil)
        @limit = Integer(limit)
        @grace_s = Float(grace_s)
        @on_failure = on_failure
        @pruned_at = nil
      end

      # Whether the database has the reporter's functions (schema v25+).
      def self.available?(connection)
        [true, "t"].include?(connection.select_value("SELECT to_regprocedure('#{PROC}') IS NOT NULL"))
      end

      # One poll on connection (outside a transaction: its own; in the caller's, a savepoint):
      # the rows reported, as the function returned them. Raises when the database does
      # (nothing then counts as reported).
      def run(connection)
        prune(connection)
        connection.transaction(requires_new: true) do
          rows = connection.select_all(TAKE_SQL, "webhook_inbox quarantine reports", [@limit, @grace_s]).to_a
          rows.each { |row| report(row) }
          rows
        end
      end

      # What the report and the notification say of one quarantine (ids and names only;
      # handler nil: the sidecar's, not a Ruby handler).
      def self.context(row)
        { provider: Instrumentation.provider_of(row["source_scope"]), scope: row["source_scope"],
          event_id: row["event_id"], event_type: row["event_type"], handler: nil, attempt: Integer(row["attempts"]) }
      end

      private

      def report(row)
        context = self.class.context(row)
        message = self.class.message(row["last_error"])
        Instrumentation.report_error(Quarantined.new(message), handled: false, severity: :error, context: context)
        Instrumentation.instrument("quarantine.webhook_inbox", context.merge(error: message))
        Instrumentation.log(:error, "webhook_inbox event=quarantine_reported event_id=#{row['event_id']} type=#{row['event_type']} " \
                                    "attempt=#{row['attempts']} scope=#{row['source_scope']}",
                            tags: ["event_id=#{row['event_id']}", "type=#{row['event_type']}", "attempt=#{row['attempts']}"])
      rescue StandardError => e
        @on_failure&.call(row, e)
      end

      # Report rows of quarantines that are over, at most once a minute per worker.
      def prune(connection)
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        return if @pruned_at && now - @pruned_at < PRUNE_EVERY_S

        @pruned_at = now
        connection.select_value(PRUNE_SQL, "webhook_inbox quarantine reports prune", [@limit * 10])
      end
    end
  end
end
