# frozen_string_literal: true

module WebhookInbox
  module Handlers
    # ReportPoll - how the Ruby worker polls for what the C sidecar did that the app must hear
    # of (QuarantineReports, RecoveryReports): per poll, in one transaction, up to limit rows
    # taken by a db/functions take function (each recorded as told, once across workers),
    # each told to the app (the subclass's #report), then the commit. A worker that dies
    # before its commit leaves them to the next poll of any worker: at least once toward the
    # app, exactly once when nothing crashes. Polls are short: the take reads the last
    # window_s seconds (cheap however many rows the last hour holds); about once every
    # rescan_every_s it reads the whole grace_s instead and moves the function's watermark
    # there (so a row whose transaction committed up to grace_s after its time is still
    # taken, within a minute; one committed later is never). The first poll of a worker is a
    # full one, and one that came back full is followed by another until one is not.
    # A subclass defines PROC (its take's signature, for available?), TAKE_SQL ($1 limit,
    # $2 grace, $3 window: NULL for a full scan), PRUNE_SQL ($1 limit), NAME (the queries'
    # name in logs), LOG_EVENT, #report(row) and #log_fields(row).
    class ReportPoll
      LIMIT = 100
      GRACE_S = 3600
      WINDOW_S = 10
      RESCAN_EVERY_S = 60
      PRUNE_EVERY_S = 60

      # on_failure: called with (row, exception) when telling the app raised for one row (the
      # others are still told; the row stays recorded as told).
      def initialize(limit: LIMIT, grace_s: GRACE_S, window_s: WINDOW_S, rescan_every_s: RESCAN_EVERY_S, on_failure: nil)
        @limit = Integer(limit)
        @grace_s = Float(grace_s)
        @window_s = Float(window_s)
        @rescan_every_s = Float(rescan_every_s)
        @on_failure = on_failure
        @pruned_at = nil
        @rescanned_at = nil
      end

      attr_reader :limit

      # Whether the database has this reporter's take function.
      def self.available?(connection)
        [true, "t"].include?(connection.select_value("SELECT to_regprocedure('#{self::PROC}') IS NOT NULL"))
      end

      # One poll on connection (outside a transaction: its own; in the caller's, a savepoint):
      # the rows told, as the take function returned them. Raises when the database does
      # (nothing then counts as told).
      def run(connection)
        prune(connection)
        now = monotonic
        full = @rescanned_at.nil? || now - @rescanned_at >= @rescan_every_s
        rows = connection.transaction(requires_new: true) do
          taken = connection.select_all(self.class::TAKE_SQL, self.class::NAME, [@limit, @grace_s, full ? nil : @window_s]).to_a
          taken.each { |row| tell(row) }
          taken
        end
        @rescanned_at = now if full && rows.size < @limit
        rows
      end

      private

      def tell(row)
        report(row)
      rescue StandardError => e
        @on_failure&.call(row, e)
      end

      # Rows of what is over, at most once a minute per worker.
      def prune(connection)
        now = monotonic
        return if @pruned_at && now - @pruned_at < PRUNE_EVERY_S

        @pruned_at = now
        connection.select_value(self.class::PRUNE_SQL, "#{self.class::NAME} prune", [@limit * 10])
      end

      def monotonic = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
