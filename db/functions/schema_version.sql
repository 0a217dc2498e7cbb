-- functions/schema_version.sql - the schema's version and the oldest sidecar it accepts.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- The version of the inbox schema in this database: every db/NNN file up to this number and
-- every db/functions/ file of this version have been applied. The number is this gem's
-- WebhookInbox::Schema::VERSION (read from this line) and the sidecar's WI_SCHEMA_VERSION
-- (sidecar/src/pg/schema.h); the sidecar refuses a database without it or with an older one.
-- 24: the 1.0 layout (db/README.md); no table changed.
-- 25: webhook_inbox_error_reports (db/025): quarantines reported to Rails.error once each.
-- 26: the outbox's key (db/026): one key on one node and on Citus.
-- 27: webhook_inbox_recovery_reports, _effect_reports (db/027): reconcile's recoveries and the
--     HTTP effects quarantined told to the app once each.
-- 28: webhook_inbox_alerts (db/028): operational notifications (`run --notify`).
-- 29: webhook_inbox_routes.handler_name, batch_handler_name (db/029): handlers resolved by name
--     on the node that runs them.
-- 30: webhook_inbox.trace_context, webhook_inbox_outbox.trace_context (db/030): the receipt's
--     W3C trace context, inherited by its effects.
-- 31: webhook_inbox_ordering_idx on (ordering_key, ordering_at) (db/031): a keyed receipt's
--     index entry less than half the size.
-- 32: the wake-up triggers (functions/triggers.sql) send their NOTIFY from their WHEN
--     condition: no PL/pgSQL call per inserting statement; webhook_inbox_prepared() and
--     webhook_inbox_log_entry_at() (a Citus worker's batch); no table changed.
CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 32 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN, db/functions/ of this version). Sidecars older or newer check it at start and after every reconnect.';

-- The oldest sidecar schema version that still works against this database. A sidecar whose
-- own version is below this refuses to run ("upgrade it"); one whose version is at least this,
-- even if older than webhook_inbox_schema_version(), works. Raised only when a change breaks
-- what older sidecars call.
CREATE OR REPLACE FUNCTION webhook_inbox_schema_min_worker() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 4 $$;
COMMENT ON FUNCTION webhook_inbox_schema_min_worker() IS
    'Oldest sidecar schema version (WI_SCHEMA_VERSION) that works against this database; an older sidecar refuses to run.';
