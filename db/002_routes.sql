-- 002_routes.sql - event routing for the sidecar: event type -> SQL handler function.
-- Idempotent: safe to re-run.
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

CREATE TABLE IF NOT EXISTS webhook_inbox_routes (
    event_type text    PRIMARY KEY,
    handler    regproc NOT NULL
);
COMMENT ON TABLE webhook_inbox_routes IS
    'Which SQL function handles which event type. Exact match first; then the longest prefix pattern ending in ''*'' (''payment_intent.*''); ''*'' alone matches every type. A handler takes a webhook_inbox row and returns text (the outcome).';
COMMENT ON COLUMN webhook_inbox_routes.event_type IS 'An exact event type, a prefix pattern ending in ''*'', or ''*''.';
COMMENT ON COLUMN webhook_inbox_routes.handler IS 'Function (webhook_inbox) RETURNS text, run by the sidecar inside a savepoint of the claiming transaction.';
