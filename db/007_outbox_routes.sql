-- 007_outbox_routes.sql - schema version 7: event types routed straight to an outbox
-- destination (no SQL handler: the Rails app's receive_effect block runs once per event, with
-- the sidecar's retries and backoff), and the deliverer's batched save.
-- Idempotent: safe to re-run. Applied after 001..006 by `webhook-inbox-sidecar migrate` and
-- the Rails generator.
--
-- Additive: webhook_inbox_schema_min_worker() stays 004's 4 (not redefined here). A v6
-- sidecar keeps working (it saves one effect per statement); the new column is nullable and
-- every route written before keeps its meaning.
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

-- A route's destination: set (with handler webhook_inbox_deliver) for event types whose work
-- is done by a destination (the Rails app's receive_effect, an internal service) instead of a
-- SQL function. Adding a nullable column without a default rewrites nothing.
ALTER TABLE webhook_inbox_routes
    ADD COLUMN IF NOT EXISTS destination text
        CONSTRAINT webhook_inbox_routes_destination_check CHECK (destination ~ '^[a-z][a-z0-9_]{0,62}$');
COMMENT ON COLUMN webhook_inbox_routes.destination IS
    'Outbox destination (a sidecar --destination NAME) that receives the event, for routes whose handler is webhook_inbox_deliver; NULL for SQL handlers.';
