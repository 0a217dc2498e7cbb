# frozen_string_literal: true

module WebhookInbox
  module Effects
    # JobCapture - prepended to ActiveJob::Base (Effects.install!): while Effects.capture is in
    # force on this thread, a job's enqueue (perform_later, deliver_later, retry_on's retry)
    # is recorded in the outbox on the capture's connection instead of reaching the app's
    # adapter, at once, in the caller's transaction: never deferred to after the commit
    # (enqueue_after_transaction_commit), since the outbox commits with it. The enqueue
    # callbacks still run around it. ActiveJob.perform_all_later asks each job's
    # queue_adapter, which is then the capture's. Outside a capture nothing changes.
    module JobCapture
      # The adapter perform_all_later groups by: the capture's while one is in force.
      def queue_adapter
        (scope = Effects.capturing) ? CaptureAdapter.new(scope) : super
      end

      private

      def raw_enqueue
        scope = Effects.capturing or return super

        scope.record(self)
        self.successfully_enqueued = true
      end
    end

    # The adapter face of a capture (perform_all_later, and anything that asks a job for its
    # adapter): enqueues go to the outbox in the caller's transaction.
    class CaptureAdapter
      def initialize(scope) = @scope = scope
      def enqueue(job) = @scope.record(job)
      def enqueue_at(job, _timestamp) = @scope.record(job) # scheduled_at is in the job
      def enqueue_after_transaction_commit? = false
      def ==(other) = other.is_a?(CaptureAdapter)
      alias eql? ==
      def hash = CaptureAdapter.hash
    end
  end
end
