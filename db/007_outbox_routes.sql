-- 007_outbox_routes.sql - schema version 7: event types routed straight to an outbox
-- destination (no SQL handler: the Rails app's receive_effect block runs once per event, with
-- the sidecar's retries and backoff), a claim and a save whose cost does not grow with the
-- backlog, the deliverer's batched save, and outbox stats that read only pending, quarantined
-- and last-hour rows.
-- Idempotent: safe to re-run. Applied after 001..006 by `webhook-inbox-sidecar migrate` and
-- the Rails generator.
--
-- Additive: webhook_inbox_schema_min_worker() stays 4. A v6 sidecar keeps working (it saves
-- one effect per statement); the new column is nullable and every route written before
-- keeps its meaning.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 7 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

CREATE OR REPLACE FUNCTION webhook_inbox_schema_min_worker() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 4 $$;
COMMENT ON FUNCTION webhook_inbox_schema_min_worker() IS
    'Oldest sidecar schema version (WI_SCHEMA_VERSION) that works against this database; an older sidecar refuses to run.';

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

-- The claim (same signature and rows as v6) without the sweep that made it cost as much as
-- the pending backlog: v6 first quarantined every pending effect of the destination at
-- --max-attempts with a free lease, and found none in a scan of all pending rows, at every
-- claim (a backlog of 20000 took 2 ms per claim of 8). Now the due rows it picks (one
-- ordered index range, LIMIT p_limit, SKIP LOCKED) are split: those at the maximum are
-- quarantined (their last allowed delivery was started and never saved, or --max-attempts was
-- lowered), the others leased. Such an effect is quarantined once due, not earlier, and takes
-- one of the p_limit rows (the claim returns fewer: the sidecar claims again at once).
-- Its statements find their rows by primary key (= ANY of the picked ids), so the one generic
-- plan is good whatever p_limit is: plan_cache_mode = force_generic_plan spares the planning
-- that PL/pgSQL otherwise repeats at every call (a custom plan looked cheaper than the
-- generic one, which joined the whole table by hash).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_claim(
        p_destination text, p_limit integer, p_owner text, p_lease_ms bigint, p_max_attempts integer)
RETURNS TABLE (operation_id text, payload text, attempts integer)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_owner IS NULL OR p_lease_ms IS NULL OR p_lease_ms < 1
       OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'webhook_inbox: limit, lease and max attempts must be >= 1, owner non-NULL' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT c.operation_id, c.attempts >= p_max_attempts AS spent
          FROM webhook_inbox_outbox c
         WHERE c.destination = p_destination AND c.status = 'pending' AND c.next_attempt_at <= now()
           AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
         ORDER BY c.next_attempt_at, c.created_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), quarantined AS (
        UPDATE webhook_inbox_outbox o
           SET status = 'quarantined', processed_at = clock_timestamp(), lease_owner = NULL, lease_until = NULL,
               last_error = left(CASE WHEN o.lease_until IS NULL THEN 'max attempts reached'
                                      ELSE 'max attempts reached; the last delivery was never saved (sidecar stopped): outcome unknown'
                                 END || coalesce(' (before: ' || o.last_error || ')', ''), 1000)
         WHERE o.operation_id = ANY (ARRAY(SELECT due.operation_id FROM due WHERE due.spent))
        RETURNING o.operation_id
    )
    UPDATE webhook_inbox_outbox o
       SET attempts = o.attempts + 1, lease_owner = p_owner,
           lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
           last_attempt_at = clock_timestamp()
     WHERE o.operation_id = ANY (ARRAY(SELECT due.operation_id FROM due WHERE NOT due.spent))
    RETURNING o.operation_id, o.payload::text, o.attempts;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer) IS
    'Sidecar v6: lease up to p_limit due pending effects of one destination to p_owner for p_lease_ms (attempts + 1 each); due effects already at p_max_attempts (last delivery never saved) are quarantined instead, and not returned. Args: destination, limit, owner, lease ms, max attempts.';

-- The save of one delivery (same signature, rows and effect as v6), its row found by primary
-- key only: v6 also put status = 'pending' and the owner in the locking SELECT, and the
-- planner took the pending partial index for it, reading every pending effect at every save
-- (130 us per save with a backlog of a few thousand, growing with it).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save(
        p_operation_id text, p_owner text, p_result text, p_error text, p_status integer, p_body text,
        p_retry_after_ms bigint, p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    seen integer;
    cur_status text;
    cur_owner text;
    delay_ms bigint;
BEGIN
    IF p_result IS NULL OR p_result NOT IN ('delivered', 'retry', 'quarantine') THEN
        RAISE EXCEPTION 'webhook_inbox: p_result must be delivered, retry or quarantine, not %', p_result
              USING ERRCODE = '22023';
    END IF;
    -- By primary key only, then checked: with status and owner in the WHERE the planner may
    -- walk the pending partial index instead (every pending row, at every save).
    SELECT o.attempts, o.status, o.lease_owner INTO seen, cur_status, cur_owner FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id
       FOR UPDATE;
    IF NOT FOUND OR cur_status <> 'pending' OR cur_owner IS DISTINCT FROM p_owner THEN
        RETURN;
    END IF;
    IF p_result = 'retry' THEN
        delay_ms := greatest(webhook_inbox_retry_delay_ms(seen - 1, p_backoff_base_ms, p_backoff_cap_ms),
                             least(coalesce(p_retry_after_ms, 0), 86400000));
    END IF;
    UPDATE webhook_inbox_outbox o
       SET status = CASE WHEN p_result = 'delivered' THEN 'delivered'
                         WHEN p_result = 'quarantine' OR seen >= p_max_attempts THEN 'quarantined'
                         ELSE 'pending' END,
           lease_owner = NULL, lease_until = NULL,
           last_error = CASE WHEN p_result = 'delivered' THEN NULL ELSE left(p_error, 1000) END,
           response_status = p_status,
           response_excerpt = left(p_body, 1000),
           provider_id = coalesce(webhook_inbox_outbox_provider_id(p_body), o.provider_id),
           next_attempt_at = CASE WHEN delay_ms IS NULL THEN o.next_attempt_at
                                  ELSE clock_timestamp() + delay_ms * interval '1 millisecond' END,
           processed_at = CASE WHEN p_result <> 'retry' OR seen >= p_max_attempts THEN clock_timestamp() END
     WHERE o.operation_id = p_operation_id
    RETURNING o.status, o.attempts INTO new_status, new_attempts;
    IF new_status = 'pending' THEN
        retry_in_ms := delay_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save(text, text, text, text, integer, text, bigint, integer, bigint, bigint) IS
    'Sidecar v6: save one delivery (delivered / retry with backoff or Retry-After / quarantine) if p_owner still holds the lease; NULLs otherwise. Args: operation id, owner, result, error, HTTP status, body, Retry-After ms, max attempts, backoff base ms, backoff cap ms.';

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

-- Stats read through partial indexes, like webhook_inbox_stats(): pending rows (claim index),
-- quarantined rows, and the rows delivered in the last hour; delivered effects older than that
-- are never read (they are the bulk of the table until pruned).
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_quarantined_idx
    ON webhook_inbox_outbox (destination) WHERE status = 'quarantined';
COMMENT ON INDEX webhook_inbox_outbox_quarantined_idx IS
    'Partial index for stats, metrics and requeue: only quarantined effects.';
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_delivered_idx
    ON webhook_inbox_outbox (processed_at) WHERE status = 'delivered';
COMMENT ON INDEX webhook_inbox_outbox_delivered_idx IS
    'Partial index for stats (delivered in the last hour) and retention (delivered before a time).';

-- Same columns as v6; delivered now counts the last hour's deliveries only.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_stats(
        OUT destination text, OUT pending bigint, OUT retrying bigint, OUT leased bigint,
        OUT oldest_pending_age_s double precision, OUT quarantined bigint, OUT delivered bigint)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT coalesce(p.destination, q.destination, d.destination),
           coalesce(p.pending, 0), coalesce(p.retrying, 0), coalesce(p.leased, 0), p.oldest,
           coalesce(q.n, 0), coalesce(d.n, 0)
      FROM (SELECT o.destination, count(*) AS pending,
                   count(*) FILTER (WHERE o.attempts > 0 AND o.lease_until IS NULL) AS retrying,
                   count(*) FILTER (WHERE o.lease_until > clock_timestamp()) AS leased,
                   extract(epoch FROM clock_timestamp() - min(o.created_at))::float8 AS oldest
              FROM webhook_inbox_outbox o WHERE o.status = 'pending' GROUP BY o.destination) p
      FULL JOIN (SELECT o.destination, count(*) AS n
                   FROM webhook_inbox_outbox o WHERE o.status = 'quarantined' GROUP BY o.destination) q
             ON q.destination = p.destination
      FULL JOIN (SELECT o.destination, count(*) AS n
                   FROM webhook_inbox_outbox o
                  WHERE o.status = 'delivered' AND o.processed_at >= now() - interval '1 hour'
                  GROUP BY o.destination) d
             ON d.destination = coalesce(p.destination, q.destination)
     ORDER BY 1
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_stats() IS
    'Outbox per destination: pending, retrying, leased (being delivered), oldest pending age in s, quarantined, delivered IN THE LAST HOUR (what `webhook-inbox-sidecar stats` and /metrics show). Reads only pending, quarantined and last-hour rows.';

-- Retention (`prune --older-than`, `run --retain`) deletes delivered effects processed before
-- its window, through webhook_inbox_outbox_delivered_idx (the statement is the sidecar's, like
-- the events'). Idempotency per operation id therefore lasts as long as the effect is kept.
COMMENT ON FUNCTION webhook_inbox_emit(text, text, jsonb) IS
    'Record an external side effect (operation id, destination name, JSON payload) in the caller''s transaction; idempotent per operation id while the effect is kept (true = recorded now, false = already there). Retention deletes delivered effects after its window (`prune`, `run --retain`): the same operation id emitted after that is a new effect.';

-- As in 005, except how the batch's done rows are marked. 005 ran that UPDATE ... FROM
-- unnest(...) as a static statement, so PL/pgSQL cached one generic plan per connection,
-- made when the sidecar connected: on a young inbox (a few hundred rows) a hash join over a
-- sequential scan of webhook_inbox, kept while the table grew, so every batch read the whole
-- inbox (seen in bench/pipeline: 3-10 ms per batch after a few minutes, PostgreSQL CPU per
-- event 3-4x the process-only figure). EXECUTE plans it at each call, with the batch's real
-- size and the table's current one: an index lookup per done row.
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_batch(
        p_limit integer, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    ev         webhook_inbox;
    handler    regproc;
    routed     text;           -- event type whose route is in handler (batches are often one type)
    t0         timestamptz;
    done_scope text[] := '{}';
    done_id    text[] := '{}';
    done_what  text[] := '{}';
    done_ms    float8[] := '{}';
BEGIN
    FOR ev IN
        SELECT * FROM webhook_inbox w
         WHERE w.status = 'pending' AND w.next_attempt_at <= now()
         ORDER BY w.next_attempt_at, w.received_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    LOOP
        source_scope := ev.source_scope;
        event_id := ev.event_id;
        event_type := ev.event_type;
        attempts := ev.attempts;
        t0 := clock_timestamp();
        latency_ms := extract(epoch FROM t0 - coalesce(ev.requeued_at, ev.received_at)) * 1000;
        IF routed IS DISTINCT FROM ev.event_type THEN
            handler := webhook_inbox_route(ev.event_type);
            routed := ev.event_type;
        END IF;
        SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO result, detail, charged, retry_in_ms
          FROM webhook_inbox_run_event(ev, handler, p_unrouted, p_max_attempts, p_backoff_base_ms,
                                       p_backoff_cap_ms, p_unrouted_delay_ms) r;
        IF result = 'done' THEN
            done_scope := done_scope || ev.source_scope;
            done_id := done_id || ev.event_id;
            done_what := done_what || detail;
            done_ms := done_ms || (extract(epoch FROM clock_timestamp() - t0) * 1000)::float8;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF cardinality(done_id) > 0 THEN
        EXECUTE $sql$
            UPDATE webhook_inbox w
               SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL,
                   attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', d.outcome, d.ms))
              FROM unnest($1, $2, $3, $4) AS d(scope, id, outcome, ms)
             WHERE w.source_scope = d.scope AND w.event_id = d.id
        $sql$ USING done_scope, done_id, done_what, done_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4 (v7: the done rows'' UPDATE planned at every call): claim up to p_limit due events (FOR UPDATE SKIP LOCKED), run each handler in its own subtransaction, record done/quarantined/retry (charged, with backoff)/waiting and an attempt_log entry in the same transaction; one row per event; latency from requeued_at or received_at. Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';
