# frozen_string_literal: true

module WebhookInbox
  module Generators
    # The `[7.2]` of `ActiveRecord::Migration[7.2]` for the app's ActiveRecord, for the
    # generators' migration templates.
    module MigrationVersion
      private

      def migration_version
        "[#{::ActiveRecord::VERSION::MAJOR}.#{::ActiveRecord::VERSION::MINOR}]"
      end
    end
  end
end
