# frozen_string_literal: true

module WebhookInbox
  module Handlers
    # Savepoint - the savepoint a Ruby handler runs in, which no transaction block joins:
    # every block the handler opens directly in it (Model.transaction, and the one each save
    # opens) gets a savepoint of its own, so ActiveRecord::Rollback, or an exception that leaves
    # the block (rescued by the handler or not), rolls back that block's writes exactly as a
    # top-level transaction would outside the worker; blocks nested in those join them as they
    # would outside, and requires_new: true opens a savepoint as Rails documents.
    #
    # Why not Rails' `transaction(requires_new: true, joinable: false)` (what transactional
    # tests use): a block opened in a non-joinable transaction runs its commit callbacks when
    # it ends (after_commit, and ActiveRecord.after_all_transactions_commit, through which
    # ActiveJob enqueues after the commit: deliver_later), so they would run before the batch
    # commits, for writes that may still roll back. Here the savepoint stays joinable for
    # records and callbacks: they move up to the batch's transaction and run after its commit.
    module Savepoint
      # Extends a connection: a transaction block opened directly in a handler's savepoint is
      # given requires_new. Everything else is ActiveRecord's own transaction.
      module Unjoinable
        def transaction(requires_new: nil, **options, &block)
          requires_new = true if !requires_new && @webhook_inbox_handler_savepoint&.equal?(current_transaction)
          super(requires_new: requires_new, **options, &block)
        end

        def webhook_inbox_handler_savepoint(savepoint)
          outer = @webhook_inbox_handler_savepoint
          @webhook_inbox_handler_savepoint = savepoint
          yield
        ensure
          @webhook_inbox_handler_savepoint = outer
        end
      end

      module_function

      # Runs the block in a new savepoint on connection (ActiveRecord's, lazily materialized),
      # yielding that Transaction; ActiveRecord's rules otherwise (an exception rolls it back
      # and propagates; ActiveRecord::Rollback rolls it back and is swallowed). Returns the
      # block's value.
      def run(connection)
        connection.extend(Unjoinable) unless connection.is_a?(Unjoinable)
        connection.transaction(requires_new: true) do
          savepoint = connection.current_transaction
          connection.webhook_inbox_handler_savepoint(savepoint) { yield savepoint }
        end
      end
    end
  end
end
