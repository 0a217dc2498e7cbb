-- 027_recovery_reports.sql - schema version 27: reconcile's recoveries reach the app as
-- recover.webhook_inbox notifications, once each. As for the quarantines (db/025), the Ruby
-- worker records each recovery it published here in the transaction that published it, keyed
-- by the event and its recovered_at, so two workers never both publish one. Only recoveries
-- since this migration are published (webhook_inbox_error_reporter.recovered_since, a
-- watermark from then on): an upgrade never replays history into the app.
-- Idempotent: safe to re-run. On a Citus coordinator the new table stays local.
--
-- Redefines no function. New functions in db/functions/recovery_reports.sql
-- (webhook_inbox_recovery_reports_take, _prune); functions/error_reports.sql's take gains the
-- route's handler and a short read window (v27 there too).
-- Additive: webhook_inbox_schema_min_worker() stays 4 (the sidecar never reads these tables).
--
-- The index below covers recovered events only (few; reconcile's and GitHub redeliveries'),
-- so the receipt of an ordinary delivery pays nothing for it. On a large existing inbox its
-- CREATE INDEX still reads the whole table under a lock that blocks inserts; build it first:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_recovered_at_idx ON webhook_inbox (recovered_at) WHERE recovered_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS webhook_inbox_recovery_reports (
    source_scope text        NOT NULL,
    event_id     text        NOT NULL,
    recovered_at timestamptz NOT NULL,
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_scope, event_id, recovered_at)
);
COMMENT ON TABLE webhook_inbox_recovery_reports IS
    'Events reconcile recovered (inserted from a provider''s event list, or a redelivery it asked for) already published to the app (recover.webhook_inbox) by a Ruby worker, one row per recovery. Written by webhook_inbox_recovery_reports_take, deleted once behind the reporter''s watermark (webhook_inbox_recovery_reports_prune). Never edit by hand.';
COMMENT ON COLUMN webhook_inbox_recovery_reports.recovered_at IS
    'The event''s recovered_at: with the event''s key, names this recovery.';

ALTER TABLE webhook_inbox_error_reporter ADD COLUMN IF NOT EXISTS recovered_since timestamptz NOT NULL DEFAULT now();
COMMENT ON COLUMN webhook_inbox_error_reporter.recovered_since IS
    'Where the scan for recoveries to publish starts (first this column''s creation: older recoveries are history, never published; then moved on by webhook_inbox_recovery_reports_take).';

-- The reporter's scan: recovered events by recovered_at, from recovered_since.
CREATE INDEX IF NOT EXISTS webhook_inbox_recovered_at_idx ON webhook_inbox (recovered_at) WHERE recovered_at IS NOT NULL;
COMMENT ON INDEX webhook_inbox_recovered_at_idx IS
    'Recovered events by when reconcile recovered them: the Ruby worker''s scan for recoveries not yet published to the app.';
