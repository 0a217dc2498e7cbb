# frozen_string_literal: true

require "socket"

module WebhookInbox
  module Handlers
    # Heartbeat - a Ruby worker's row in webhook_inbox_workers (db/022_worker_heartbeats.sql),
    # read by webhook_inbox:doctor: #beat refreshes it at most every INTERVAL_S (any thread may
    # call it from its round; one of them writes), #stopped marks a clean exit. On a schema
    # older than 22 both do nothing (the worker still runs; doctor says it cannot see it).
    class Heartbeat
      INTERVAL_S = 10
      PROC = "webhook_inbox_worker_beat(text,text,text,integer,integer)"
      BEAT_SQL = "SELECT count(*) FROM webhook_inbox_worker_beat($1, 'ruby', $2, $3::int, $4::int)" # void: no row type for the driver
      STOPPED_SQL = "SELECT count(*) FROM webhook_inbox_worker_stopped($1)"

      attr_reader :worker_id

      def initialize(worker_id, handlers:)
        @worker_id = worker_id
        @handlers = Integer(handlers)
        @lock = Mutex.new
        @last = nil
        @supported = nil
      end

      # Writes the heartbeat when the last one is INTERVAL_S old (or there was none); in its
      # own statement (outside a transaction: it commits at once).
      def beat(connection, force: false)
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        due = @lock.synchronize do
          (force || @last.nil? || now - @last >= INTERVAL_S).tap { |d| @last = now if d }
        end
        return unless due && supported?(connection)

        connection.select_value(BEAT_SQL, "webhook_inbox heartbeat", [@worker_id, Socket.gethostname, Process.pid, @handlers])
      end

      def stopped(connection)
        connection.select_value(STOPPED_SQL, "webhook_inbox heartbeat", [@worker_id]) if supported?(connection)
      end

      private

      def supported?(connection)
        return @supported unless @supported.nil?

        @supported = connection.select_value("SELECT to_regprocedure('#{PROC}') IS NOT NULL") ? true : false
      end
    end
  end
end
