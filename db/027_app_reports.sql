-- 027_app_reports.sql - schema version 27: more of what the C sidecar did reaches the app,
-- once each: reconcile's recoveries (recover.webhook_inbox notifications) and the HTTP
-- effects its outbox delivery quarantined (Rails.error and effect.webhook_inbox). As for the
-- quarantines (db/025), the Ruby worker records each one it told here in the transaction
-- that told it, keyed by the row and its time (recovered_at; an effect's processed_at: a
-- requeued effect quarantined again is a new one), so two workers never both tell one. Only
-- those since this migration are told (webhook_inbox_error_reporter.recovered_since and
-- effects_since, watermarks from then on): an upgrade never replays history into the app.
-- Idempotent: safe to re-run. On a Citus coordinator the new tables stay local.
--
-- Redefines no function. New functions in db/functions/app_reports.sql (the two takes and
-- webhook_inbox_app_reports_prune); functions/error_reports.sql's take gains the route's
-- handler and a short read window (v27 there too).
-- Additive: webhook_inbox_schema_min_worker() stays 4 (the sidecar never reads these tables).
--
-- The indexes below cover recovered events and quarantined effects only (few), so the receipt
-- of an ordinary delivery and a delivered effect pay nothing for them. On a large existing
-- inbox or outbox each CREATE INDEX still reads the whole table under a lock that blocks
-- inserts; build them first:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_recovered_at_idx ON webhook_inbox (recovered_at) WHERE recovered_at IS NOT NULL;
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_outbox_quarantined_at_idx ON webhook_inbox_outbox (processed_at) WHERE status = 'quarantined';

CREATE TABLE IF NOT EXISTS webhook_inbox_recovery_reports (
    source_scope text        NOT NULL,
    event_id     text        NOT NULL,
    recovered_at timestamptz NOT NULL,
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_scope, event_id, recovered_at)
);
COMMENT ON TABLE webhook_inbox_recovery_reports IS
    'Events reconcile recovered (inserted from a provider''s event list, or a redelivery it asked for) already published to the app (recover.webhook_inbox) by a Ruby worker, one row per recovery. Written by webhook_inbox_recovery_reports_take, deleted once behind the reporter''s watermark (webhook_inbox_app_reports_prune). Never edit by hand.';
COMMENT ON COLUMN webhook_inbox_recovery_reports.recovered_at IS
    'The event''s recovered_at: with the event''s key, names this recovery.';

ALTER TABLE webhook_inbox_error_reporter ADD COLUMN IF NOT EXISTS recovered_since timestamptz NOT NULL DEFAULT now();
COMMENT ON COLUMN webhook_inbox_error_reporter.recovered_since IS
    'Where the scan for recoveries to publish starts (first this column''s creation: older recoveries are history, never published; then moved on by webhook_inbox_recovery_reports_take).';

-- The reporter's scan: recovered events by recovered_at, from recovered_since.
CREATE INDEX IF NOT EXISTS webhook_inbox_recovered_at_idx ON webhook_inbox (recovered_at) WHERE recovered_at IS NOT NULL;
COMMENT ON INDEX webhook_inbox_recovered_at_idx IS
    'Recovered events by when reconcile recovered them: the Ruby worker''s scan for recoveries not yet published to the app.';

CREATE TABLE IF NOT EXISTS webhook_inbox_effect_reports (
    source_scope text        NOT NULL,
    operation_id text        NOT NULL,
    processed_at timestamptz NOT NULL,
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_scope, operation_id, processed_at)
);
COMMENT ON TABLE webhook_inbox_effect_reports IS
    'HTTP effects the sidecar''s outbox delivery quarantined (a 4xx, or its last attempt failed) already reported to the app''s Rails.error by a Ruby worker, one row per quarantine. Written by webhook_inbox_effect_reports_take, deleted once behind the reporter''s watermark (webhook_inbox_app_reports_prune). Never edit by hand.';
COMMENT ON COLUMN webhook_inbox_effect_reports.processed_at IS
    'The effect''s processed_at when it was quarantined: with its key (source_scope, operation_id), names this quarantine (a requeued effect quarantined again has another).';

ALTER TABLE webhook_inbox_error_reporter ADD COLUMN IF NOT EXISTS effects_since timestamptz NOT NULL DEFAULT now();
COMMENT ON COLUMN webhook_inbox_error_reporter.effects_since IS
    'Where the scan for quarantined HTTP effects to report starts (first this column''s creation: older ones are history, never reported; then moved on by webhook_inbox_effect_reports_take).';

-- The reporter's scan: quarantined effects by processed_at, from effects_since.
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_quarantined_at_idx ON webhook_inbox_outbox (processed_at) WHERE status = 'quarantined';
COMMENT ON INDEX webhook_inbox_outbox_quarantined_at_idx IS
    'Quarantined effects by when they were quarantined: the Ruby worker''s scan for HTTP effects not yet reported to Rails.error.';
