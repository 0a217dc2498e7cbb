# frozen_string_literal: true

module WebhookInbox
  module Handlers
    # TimeLimit - how long one Ruby handler may run. At its deadline a watcher thread raises
    # TimeLimit::Exceeded in the handler's thread and cancels the statement that thread's
    # connection is running, if any (a handler waiting on a lock or a slow query: the raise
    # alone would leave the server running it, and the rollback that follows would wait for it).
    #
    # Why not Timeout.timeout: without an exception class, the timeout gem before 0.3 (Ruby
    # 3.0 and 3.1) unwinds with throw, which ActiveRecord treats as a block that completed: it
    # would release the handler's savepoint, writes kept. And it cannot cancel the statement.
    # What a raise from another thread can still do, and how it is contained:
    # - Exceeded is an Exception, not a StandardError: a handler's `rescue => e` does not
    #   swallow it; one that swallows it anyway (rescue Exception) is caught at its return;
    # - it is delivered only while the handler's code runs (Thread.handle_interrupt), never
    #   in the Runner's bookkeeping around it: the caller runs #run inside the handler's
    #   savepoint, so whatever the raise interrupts is rolled back with that savepoint;
    # - code of the handler that must not be interrupted (an ensure that releases a
    #   resource outside the database) can be, as with any Timeout: keep handlers short;
    # - the cancel may race with the end of the statement it aims at and hit the savepoint's
    #   rollback instead: the batch's transaction then fails and rolls back as a whole, and
    #   every run of it is due again after its backoff (fail closed: nothing applied twice).
    # A handler stuck in C code that holds the GVL cannot be interrupted by any of this.
    class TimeLimit
      # Raised in a handler that ran past its limit (an Exception: see above).
      class Exceeded < Exception; end # rubocop:disable Lint/InheritException

      Request = Struct.new(:thread, :deadline, :statement, :done)

      # The statement a handler's connection runs, cancelled from the watcher: with
      # pg_cancel_backend on a connection of its own, as the libpq cancel API is not safe
      # here (the pg gem's PG::CancelConnection, from the libpq it bundles, crashes on a
      # connection of the system libpq that this gem's extension loads). Built in the
      # handler's thread, so the watcher never calls into that thread's connection but to
      # read its status.
      class Statement
        def initialize(connection)
          @connection = connection
          @pid = connection.backend_pid
          @conninfo = connection.conninfo_hash.compact.reject { |_k, v| v == "" }
        end

        # Cancels it if one runs (best effort: a failure leaves it running, and the rollback waiting).
        def cancel
          return unless @connection.transaction_status == PG::PQTRANS_ACTIVE

          other = PG.connect(**@conninfo, connect_timeout: 5)
          other.exec_params("SELECT pg_cancel_backend($1)", [@pid])
        rescue StandardError
          nil
        ensure
          other&.close
        end
      end

      attr_reader :seconds

      # seconds: the limit (a positive number), or nil / 0 for none.
      def initialize(seconds)
        @seconds = seconds && Float(seconds)
        raise ArgumentError, "a handler time limit must be >= 0 seconds" if @seconds&.negative?

        @seconds = nil if @seconds&.zero?
        @mutex = Mutex.new
        @changed = ConditionVariable.new
        @requests = []
        @watcher = nil
      end

      # The Statement of an ActiveRecord connection, to pass to #run (nil without a limit).
      def statement_for(connection) = @seconds && Statement.new(connection.raw_connection)

      def message = "the handler ran past its time limit of #{format('%g', @seconds)} s"

      # Runs the block within the limit. statement: a Statement to cancel at the deadline
      # (nil: none). Returns the block's value, or raises Exceeded (also when the block
      # swallowed it, or returned past the deadline).
      def run(statement = nil, &block)
        return yield unless @seconds

        request = Request.new(Thread.current, now + @seconds, statement, false)
        Thread.handle_interrupt(Exceeded => :never) do
          watch(request)
          value = Thread.handle_interrupt(Exceeded => :immediate, &block)
          raise Exceeded, message if now >= request.deadline

          value
        ensure
          @mutex.synchronize { request.done = true }
        end
      end

      private

      def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

      def watch(request)
        @mutex.synchronize do
          @requests << request
          @watcher = Thread.new { watcher_loop } unless @watcher&.alive?
          @changed.signal
        end
      end

      def watcher_loop
        Thread.current.name = "webhook_inbox handler time limit"
        loop do
          expired = @mutex.synchronize do
            @requests.reject!(&:done)
            due, @requests = @requests.partition { |r| r.deadline <= now }
            due.each do |r|
              r.done = true
              r.thread.raise(Exceeded, message)
            end
            @changed.wait(@mutex, @requests.empty? ? nil : [@requests.map(&:deadline).min - now, 0.001].max) if due.empty?
            due
          end
          expired.each { |r| r.statement&.cancel }
        end
      end
    end
  end
end
