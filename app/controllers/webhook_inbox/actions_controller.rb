# frozen_string_literal: true

module WebhookInbox
  # The audit trail: every requeue and replay, newest first (webhook_inbox_actions).
  class ActionsController < ApplicationController
    def index
      @notice = take_notice
      @actions = dashboard_connection do |c|
        c.select_all(<<~SQL.squish, "WebhookInbox actions").to_a
          SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"') AS at, actor, action, filter::text, count
            FROM webhook_inbox_actions ORDER BY id DESC LIMIT 200
        SQL
      end
    end
  end
end
