-- 005_history.sql - schema version 5: every run's history on the row (attempt_log), latency
-- per processing (requeued_at), the delivery's request headers (request_headers), requeue
-- and replay in SQL with an audit table, stats that
-- cost in proportion to pending and recent rows, and rejected-delivery counts for the
-- dashboard. Idempotent: safe to re-run. Applied after 001..004.
--
-- v4 sidecars keep working (webhook_inbox_schema_min_worker() stays 4): every v4 function
-- keeps its signature and result columns; only bodies change (CREATE OR REPLACE), and what
-- they add (a log entry, the latency base) is invisible to a v4 caller.
--
-- On a large existing inbox, CREATE INDEX below blocks inserts while it builds (receivers
-- answer 503 and providers retry). Build them first without blocking, outside a transaction:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_received_idx ON webhook_inbox (received_at);
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_done_idx ON webhook_inbox (processed_at) WHERE status = 'done';
-- and this file then skips them. (The quarantined index is small; the columns are added
-- without a table rewrite.)
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS attempt_log jsonb NOT NULL DEFAULT '[]';
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS requeued_at timestamptz;
COMMENT ON COLUMN webhook_inbox.attempt_log IS
    'Every handler run, oldest first, the last 50: {"at": ISO-8601 UTC, "result": retry|quarantined|done|waiting|requeued, "detail": outcome, reason or error (<= 1000 chars), "duration_ms": number, or null when the sidecar charged a failure after losing the run''s connection}. Kept after success; last_error holds only the current problem (cleared when done).';
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS request_headers jsonb;
COMMENT ON COLUMN webhook_inbox.request_headers IS
    'The first accepted delivery''s HTTP request headers, {"lower-case-name": "value"}, as the receiver kept them: credentials (authorization, cookie, names with token, secret, password, api-key) left out, values cut to 1024 bytes, at most 64 headers. NULL for rows inserted without them (SQL, or a receiver connected before this column existed).';
COMMENT ON COLUMN webhook_inbox.requeued_at IS
    'When a requeue or replay last moved the row back to pending (NULL: never). Latency counts from here, else from received_at, so a requeue does not inflate the percentiles.';

-- The dashboard's event list (newest first, keyset on received_at) and prune's "done rows
-- received before" both walk received_at; without it each is a scan of the whole table.
CREATE INDEX IF NOT EXISTS webhook_inbox_received_idx ON webhook_inbox (received_at);
COMMENT ON INDEX webhook_inbox_received_idx IS
    'Newest-first event lists with keyset pagination, and retention by received_at, without scanning the table.';
-- Done rows by completion time: stats' recent window and the dashboard's done-per-hour.
-- Partial: a receipt (pending) never writes to it.
CREATE INDEX IF NOT EXISTS webhook_inbox_done_idx ON webhook_inbox (processed_at) WHERE status = 'done';
COMMENT ON INDEX webhook_inbox_done_idx IS
    'Partial index on done rows by processed_at: recent-window counts and latency percentiles cost in proportion to recent rows.';
-- Quarantined rows are few and wanted often (stats, the dashboard); partial, so cheap.
CREATE INDEX IF NOT EXISTS webhook_inbox_quarantined_idx ON webhook_inbox (received_at) WHERE status = 'quarantined';
COMMENT ON INDEX webhook_inbox_quarantined_idx IS
    'Partial index on quarantined rows: their count and list without scanning done rows.';

-- Requeue and replay, audited.
CREATE TABLE IF NOT EXISTS webhook_inbox_actions (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL,
    action   text        NOT NULL CONSTRAINT webhook_inbox_actions_action_check CHECK (action IN ('requeue', 'replay')),
    filter   jsonb       NOT NULL,
    count    bigint      NOT NULL
);
COMMENT ON TABLE webhook_inbox_actions IS
    'Audit trail of operator actions on the inbox (dashboard, webhook_inbox_requeue()): who, when, what, on which filter, how many rows moved.';
COMMENT ON COLUMN webhook_inbox_actions.actor IS 'Who acted, as the caller named them (the dashboard''s dashboard_actor; ''unknown'' when none).';
COMMENT ON COLUMN webhook_inbox_actions.action IS 'requeue: quarantined -> pending; replay: done -> pending (e.g. after fixing a handler).';
COMMENT ON COLUMN webhook_inbox_actions.filter IS 'The filter as given: keys scope, event_id, type, from, to, error (see webhook_inbox_requeue).';
COMMENT ON COLUMN webhook_inbox_actions.count IS 'Rows moved back to pending.';

-- Signature and other rejections, counted per endpoint scope, reason and minute. The
-- receiver never writes here per request: each process adds its counts up in memory and
-- flushes them at most every few seconds (WebhookInbox::Rejections), so a flood of 401s
-- costs one upsert per scope, reason and flush. Never a body, header or address.
CREATE TABLE IF NOT EXISTS webhook_inbox_rejections (
    source_scope text        NOT NULL,
    reason       text        NOT NULL,
    minute       timestamptz NOT NULL,
    count        bigint      NOT NULL,
    PRIMARY KEY (source_scope, reason, minute)
);
COMMENT ON TABLE webhook_inbox_rejections IS
    'Rejected deliveries (401 signature/timestamp failures, 400, 413, 415) per endpoint scope, reason and minute, flushed from each process''s in-memory counters; never bodies. Rows older than 7 days are deleted by the flush.';
COMMENT ON COLUMN webhook_inbox_rejections.minute IS 'Start of the minute the rejections happened in (the flush''s clock).';
