-- 007_outbox_routes.sql - schema version 7: event types routed straight to an outbox
-- destination (no SQL handler: the Rails app's receive_effect block runs once per event, with
-- the sidecar's retries and backoff), and the deliverer's batched save.
-- Idempotent: safe to re-run. Applied after 001..006 by `webhook-inbox-sidecar migrate` and
-- the Rails generator.
--
-- Additive: webhook_inbox_schema_min_worker() stays 004's 4 (not redefined here). A v6
-- sidecar keeps working (it saves one effect per statement); the new column is nullable and
-- every route written before keeps its meaning.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 7 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- A route's destination: set (with handler webhook_inbox_deliver) for event types whose work
-- is done by a destination (the Rails app's receive_effect, an internal service) instead of a
-- SQL function. Adding a nullable column without a default rewrites nothing.
ALTER TABLE webhook_inbox_routes
    ADD COLUMN IF NOT EXISTS destination text
        CONSTRAINT webhook_inbox_routes_destination_check CHECK (destination ~ '^[a-z][a-z0-9_]{0,62}$');
COMMENT ON COLUMN webhook_inbox_routes.destination IS
    'Outbox destination (a sidecar --destination NAME) that receives the event, for routes whose handler is webhook_inbox_deliver; NULL for SQL handlers.';

-- The route an event type takes, whole: exact match first, else the longest 'prefix*'
-- pattern, '*' last. The one definition of matching: webhook_inbox_route() (003's, with the
-- same result) and webhook_inbox_route_destination() read its columns.
CREATE OR REPLACE FUNCTION webhook_inbox_route_match(p_event_type text) RETURNS webhook_inbox_routes
LANGUAGE sql STABLE AS $$
    SELECT r
      FROM webhook_inbox_routes r
     WHERE r.event_type = p_event_type
        OR (right(r.event_type, 1) = '*'
            AND starts_with(p_event_type, left(r.event_type, -1)))
     ORDER BY (r.event_type = p_event_type) DESC, length(r.event_type) DESC
     LIMIT 1
$$;
COMMENT ON FUNCTION webhook_inbox_route_match(text) IS
    'The routes row an event type takes: exact match, else the longest matching ''prefix*'' pattern (''*'' matches all); NULL when unrouted.';

CREATE OR REPLACE FUNCTION webhook_inbox_route(p_event_type text) RETURNS regproc
LANGUAGE sql STABLE AS $$ SELECT (webhook_inbox_route_match(p_event_type)).handler $$;
COMMENT ON FUNCTION webhook_inbox_route(text) IS
    'The handler for an event type (webhook_inbox_route_match''s); NULL when unrouted.';

CREATE OR REPLACE FUNCTION webhook_inbox_route_destination(p_event_type text) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT (webhook_inbox_route_match(p_event_type)).destination $$;
COMMENT ON FUNCTION webhook_inbox_route_destination(text) IS
    'The destination named by the route an event type takes (webhook_inbox_route_match''s), or NULL.';

-- The handler of destination routes: records one effect per event in the handler's
-- transaction, so "event done" and "effect to deliver" commit together. Its operation id is
-- derived from (source_scope, event_id): a replay of the event finds the same effect and
-- sends nothing again (requeue the effect instead: `requeue --effects`). The payload is the
-- event: {"source_scope", "event_id", "event_type", "received_at", "payload"} (plus
-- "raw_body_base64" for a body kept as bytes). A route without a destination fails closed:
-- the event is retried (and quarantined at the maximum), never marked done.
--   INSERT INTO webhook_inbox_routes (event_type, handler, destination)
--   VALUES ('status.updated', 'webhook_inbox_deliver', 'app_kyc');
CREATE OR REPLACE FUNCTION webhook_inbox_deliver(ev webhook_inbox) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    dest text := webhook_inbox_route_destination(ev.event_type);
    op text := 'event_' || encode(sha256(convert_to(ev.source_scope || E'\n' || ev.event_id, 'UTF8')), 'hex');
BEGIN
    IF dest IS NULL THEN
        RAISE EXCEPTION 'webhook_inbox_deliver: the route for event type % names no destination', ev.event_type
              USING ERRCODE = 'WIR02';
    END IF;
    PERFORM webhook_inbox_emit(op, dest,
        jsonb_build_object('source_scope', ev.source_scope, 'event_id', ev.event_id, 'event_type', ev.event_type,
                           'received_at', ev.received_at, 'payload', ev.payload)
        || CASE WHEN ev.payload IS NULL AND ev.raw_body IS NOT NULL
                THEN jsonb_build_object('raw_body_base64', translate(encode(ev.raw_body, 'base64'), E'\n', ''))
                ELSE '{}'::jsonb END);
    RETURN 'to ' || dest || ' as ' || op;
END
$$;
COMMENT ON FUNCTION webhook_inbox_deliver(webhook_inbox) IS
    'Handler for routes with a destination: records the event as one outbox effect (operation id event_<sha256(scope, event id)>) delivered by the sidecar; fails (retried) when the route names no destination.';

-- The deliverer's save for every answer it has collected: one statement and one commit for
-- the lot. Each element does exactly what webhook_inbox_outbox_save() does, as one set: the
-- rows are locked by primary key in operation id order (two savers never wait on each other
-- in a cycle), then updated by one UPDATE (per element, a statement of its own cost ten times
-- more than the row change). One row out per element, in operation id order, NULL statuses
-- where the lease was lost; an operation id given twice saves its first answer only (the
-- other finds no lease, as it would after the first). force_generic_plan: one plan, made
-- once per session (PL/pgSQL otherwise planned the statement again at every call for some
-- batch sizes: 140 instead of 55 us per answer in batches of 6).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save_batch(
        p_owner text, p_operation_ids text[], p_results text[], p_errors text[], p_statuses integer[],
        p_bodies text[], p_retry_after_ms bigint[], p_max_attempts integer, p_backoff_base_ms bigint,
        p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, new_status text, new_attempts integer, retry_in_ms bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n integer := coalesce(cardinality(p_operation_ids), 0);
    bad text;
BEGIN
    IF coalesce(cardinality(p_results), 0) <> n OR coalesce(cardinality(p_errors), 0) <> n
       OR coalesce(cardinality(p_statuses), 0) <> n OR coalesce(cardinality(p_bodies), 0) <> n
       OR coalesce(cardinality(p_retry_after_ms), 0) <> n THEN
        RAISE EXCEPTION 'webhook_inbox_outbox_save_batch: the arrays must have one element per operation id'
              USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(r, 'NULL') INTO bad FROM unnest(p_results) r
     WHERE r IS NULL OR r NOT IN ('delivered', 'retry', 'quarantine') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'webhook_inbox: p_result must be delivered, retry or quarantine, not %', bad
              USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH a AS (
        SELECT u.id, u.result, u.error, u.status, u.body, u.retry_after_ms, u.ord
          FROM unnest(p_operation_ids, p_results, p_errors, p_statuses, p_bodies, p_retry_after_ms)
               WITH ORDINALITY u(id, result, error, status, body, retry_after_ms, ord)
    ), first AS ( -- an operation id twice: its first answer is saved, the other finds no lease
        SELECT DISTINCT ON (a.id) a.* FROM a ORDER BY a.id, a.ord
    ), locked AS ( -- by primary key, in operation id order
        SELECT o.operation_id, o.attempts AS seen, o.status = 'pending' AND o.lease_owner = p_owner AS owned
          FROM webhook_inbox_outbox o
         WHERE o.operation_id = ANY (p_operation_ids)
         ORDER BY o.operation_id
           FOR UPDATE
    ), saved AS (
        UPDATE webhook_inbox_outbox o
           SET status = CASE WHEN f.result = 'delivered' THEN 'delivered'
                             WHEN f.result = 'quarantine' OR l.seen >= p_max_attempts THEN 'quarantined'
                             ELSE 'pending' END,
               lease_owner = NULL, lease_until = NULL,
               last_error = CASE WHEN f.result = 'delivered' THEN NULL ELSE left(f.error, 1000) END,
               response_status = f.status,
               response_excerpt = left(f.body, 1000),
               provider_id = coalesce(webhook_inbox_outbox_provider_id(f.body), o.provider_id),
               next_attempt_at = CASE WHEN d.delay_ms IS NULL THEN o.next_attempt_at
                                      ELSE clock_timestamp() + d.delay_ms * interval '1 millisecond' END,
               processed_at = CASE WHEN f.result <> 'retry' OR l.seen >= p_max_attempts THEN clock_timestamp() END
          FROM locked l
          JOIN first f ON f.id = l.operation_id
         CROSS JOIN LATERAL (
               SELECT CASE WHEN f.result = 'retry'
                           THEN greatest(webhook_inbox_retry_delay_ms(l.seen - 1, p_backoff_base_ms, p_backoff_cap_ms),
                                         least(coalesce(f.retry_after_ms, 0), 86400000)) END AS delay_ms) d
         WHERE o.operation_id = l.operation_id AND l.owned
        RETURNING o.operation_id, o.status, o.attempts, d.delay_ms
    )
    SELECT a.id, s.status, s.attempts, CASE WHEN s.status = 'pending' THEN s.delay_ms END
      FROM a
      LEFT JOIN first f ON f.id = a.id AND f.ord = a.ord
      LEFT JOIN saved s ON s.operation_id = f.id
     ORDER BY a.id, a.ord;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save_batch(text, text[], text[], text[], integer[], text[], bigint[], integer, bigint, bigint) IS
    'Sidecar v7: webhook_inbox_outbox_save() for many deliveries in one statement (same arguments, per-delivery ones as arrays); one row per delivery, NULL statuses where the lease was lost.';
