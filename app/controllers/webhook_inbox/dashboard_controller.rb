# frozen_string_literal: true

module WebhookInbox
  # The overview: backlog, quarantine, last hour's done and latency (webhook_inbox_stats),
  # per-hour charts (webhook_inbox_hourly), rejected deliveries by scope and reason, refused
  # deliveries kept aside per endpoint (webhook_inbox_refused), the
  # outbox by destination (webhook_inbox_outbox_stats), types waiting for a route, the latest
  # actions; a notice when VACUUM is held back (CleanupHorizon). Every query reads pending,
  # quarantined or recent rows only (see db/005_history.sql).
  class DashboardController < ApplicationController
    PROCESS_REJECTIONS_SHOWN = 20

    def show
      @notice = take_notice
      hours = WebhookInbox.configuration.dashboard_chart_hours.to_i.clamp(1, 168)
      dashboard_connection do |c|
        @stats = c.select_one("SELECT * FROM webhook_inbox_stats()", "WebhookInbox stats")
        @hourly = c.select_all("SELECT to_char(hour AT TIME ZONE 'UTC', 'HH24:MI') AS hour, done, quarantined, " \
                               "latency_p95_ms FROM webhook_inbox_hourly($1)", "WebhookInbox hourly", [hours]).to_a
        @rejections = c.select_all(<<~SQL.squish, "WebhookInbox rejections", [hours]).to_a
          SELECT source_scope, reason, sum(count)::bigint AS count,
                 to_char(max(minute) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI"Z"') AS last_minute
            FROM webhook_inbox_rejections WHERE minute >= now() - $1 * interval '1 hour'
           GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 50
        SQL
        @rejections_hourly = c.select_all(<<~SQL.squish, "WebhookInbox rejections", [hours]).to_a
          SELECT to_char(h AT TIME ZONE 'UTC', 'HH24:MI') AS hour, coalesce(sum(r.count), 0)::bigint AS count
            FROM generate_series(date_trunc('hour', now()) - ($1 - 1) * interval '1 hour', date_trunc('hour', now()),
                                 interval '1 hour') h
            LEFT JOIN webhook_inbox_rejections r ON r.minute >= h AND r.minute < h + interval '1 hour'
           GROUP BY h ORDER BY h
        SQL
        @horizon = WebhookInbox::CleanupHorizon.oldest(c)
        @outbox = c.select_all("SELECT * FROM webhook_inbox_outbox_stats()", "WebhookInbox outbox stats").to_a
        @refused = c.select_all(<<~SQL.squish, "WebhookInbox refused").to_a
          SELECT endpoint, count(*) AS count, sum(octet_length(body))::bigint AS bytes,
                 to_char(max(received_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI"Z"') AS last_received
            FROM webhook_inbox_refused GROUP BY 1 ORDER BY 2 DESC LIMIT 50
        SQL
        @unrouted = c.select_all("SELECT event_type, pending FROM webhook_inbox_unrouted() LIMIT 20",
                                 "WebhookInbox unrouted").to_a
        @actions = c.select_all(<<~SQL.squish, "WebhookInbox actions").to_a
          SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"') AS at, actor, action, filter::text, count
            FROM webhook_inbox_actions ORDER BY id DESC LIMIT 5
        SQL
      end
      @hours = hours
      # This process's counts since boot: the largest few (Rejections bounds the rest too).
      @process_rejections = WebhookInbox.rejections.largest(PROCESS_REJECTIONS_SHOWN)
      @process_rejections_more = WebhookInbox.rejections.totals.size - @process_rejections.size
    end
  end
end
