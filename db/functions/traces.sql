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

-- The context a handler runs under, so its effects are children of its handle span, not of the
-- receipt: the receipt's trace id and flags, a span id that the sidecar derives alike in C
-- (sidecar/src/observability/traceparent.c, wi_traceparent_handle): the first 8 bytes of
-- SHA-256 over "<receipt span id hex>:<octets of scope>:<scope><event id>:<attempts before
-- this run>" (the scope's length keeps scope and id apart; an all-zero id becomes ...01). The
-- same event and attempt give the same span wherever the batch runs (one node or a Citus
-- worker), so no id travels back from the database. NULL when the receipt stored none.
CREATE OR REPLACE FUNCTION webhook_inbox_handle_trace_context(
        p_receipt text, p_scope text, p_event_id text, p_attempts integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT left(p_receipt, 36)
           || coalesce(nullif(left(encode(sha256(convert_to(
                  substr(p_receipt, 37, 16) || ':' || octet_length(p_scope) || ':' || p_scope
                  || p_event_id || ':' || p_attempts, 'UTF8')), 'hex'), 16), '0000000000000000'),
                       '0000000000000001')
           || substr(p_receipt, 53)
$$;
COMMENT ON FUNCTION webhook_inbox_handle_trace_context(text, text, text, integer) IS
    'The traceparent of the sidecar''s webhook_inbox.handle span for this event and attempt (child of the receipt context p_receipt, its span id derived from receipt span, scope, event id and attempts; NULL when p_receipt is NULL): what the dispatch sets as webhook_inbox.trace_context, so effects are the handle span''s children.';
