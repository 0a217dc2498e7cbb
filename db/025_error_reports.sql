-- 025_error_reports.sql - schema version 25: the C sidecar's quarantines reach the app's
-- Rails.error once each. The Ruby worker (and its `--report-only` mode, for apps with SQL
-- handlers only) records each quarantine it reported here, keyed by the event and its
-- processed_at (one quarantine: a requeued event quarantined again is a new one), in the
-- transaction that reported it, so two workers never both report one (the second's INSERT
-- waits for the first's commit, then conflicts). Only quarantines since this migration are
-- reported (webhook_inbox_error_reporter.since, a watermark from then on): an upgrade never
-- floods the tracker with history.
-- Idempotent: safe to re-run. On a Citus coordinator both stay local tables.
--
-- Redefines no function. New functions in db/functions/error_reports.sql
-- (webhook_inbox_error_reports_take) and history_retention.sql (webhook_inbox_error_reports_prune).
-- Additive: webhook_inbox_schema_min_worker() stays 4 (the sidecar never reads these tables).
--
-- On a large existing inbox, the CREATE INDEX below blocks inserts while it builds (receivers
-- wait, then time out); build it first without blocking, then run the migration:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_quarantined_at_idx ON webhook_inbox (processed_at) WHERE status = 'quarantined';

CREATE TABLE IF NOT EXISTS webhook_inbox_error_reports (
    source_scope text        NOT NULL,
    event_id     text        NOT NULL,
    processed_at timestamptz NOT NULL,
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_scope, event_id, processed_at)
);
COMMENT ON TABLE webhook_inbox_error_reports IS
    'Quarantines of the inbox (by the sidecar: SQL handlers, unrouted events, retries exhausted) already reported to the app''s Rails.error by a Ruby worker, one row per quarantine. Written by webhook_inbox_error_reports_take, deleted once the event moved on or is gone (webhook_inbox_error_reports_prune). Never edit by hand.';
COMMENT ON COLUMN webhook_inbox_error_reports.processed_at IS
    'The event''s processed_at when it was quarantined: with the event''s key, names this quarantine (a requeued event quarantined again has another).';

CREATE TABLE IF NOT EXISTS webhook_inbox_error_reporter (
    id    boolean     PRIMARY KEY DEFAULT true CONSTRAINT webhook_inbox_error_reporter_one_row CHECK (id),
    since timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_inbox_error_reporter IS
    'One row: where the scan for quarantines to report to Rails.error starts (first the time this table was created: older ones are history, never reported; then moved on by webhook_inbox_error_reports_take).';
INSERT INTO webhook_inbox_error_reporter (id) VALUES (true) ON CONFLICT DO NOTHING;

-- The reporter's scan: quarantined events by processed_at, from since.
CREATE INDEX IF NOT EXISTS webhook_inbox_quarantined_at_idx ON webhook_inbox (processed_at) WHERE status = 'quarantined';
COMMENT ON INDEX webhook_inbox_quarantined_at_idx IS
    'Quarantined events by when they were quarantined: the Ruby worker''s scan for quarantines not yet reported to Rails.error.';
