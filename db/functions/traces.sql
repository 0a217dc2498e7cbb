-- functions/traces.sql - the W3C trace context the receipt stores and the effects inherit.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- p_value when it is a version-00 W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lower case,
-- neither id all zeros), else NULL: a malformed or oversized context is dropped, never an
-- error (a receipt or an effect is never lost for it). An inlinable SQL expression; the gem's
-- C insert (ext/webhook_inbox/store.c) writes the same test inline.
CREATE OR REPLACE FUNCTION webhook_inbox_trace_context(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(p_value) = 55
                 AND p_value ~ '^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$' THEN p_value END
$$;
COMMENT ON FUNCTION webhook_inbox_trace_context(text) IS
    'The value when it is a valid version-00 W3C traceparent (55 characters), else NULL: what the inbox and outbox store as trace_context.';
