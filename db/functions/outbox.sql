-- functions/outbox.sql - effects: emit, the outbox's claim and delivery bookkeeping, destination routes.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Records an external side effect in the caller's transaction (a handler's: it commits or
-- rolls back with the handler's business change). Idempotent: the same operation id again in
-- the same source scope (the handler's event's, '' outside a handler: db/025's key) is the
-- same effect; returns true when this call recorded it, false when it existed. The same
-- operation id for another destination is a bug in the caller: raises (22023). On Citus the
-- insert and the lookup name the key, so each is one router query to the scope's shard.
--   PERFORM webhook_inbox_emit('receipt:' || payment_id, 'receipts', jsonb_build_object(...));
--
-- Retention (`prune --older-than`, `run --retain`) deletes delivered effects processed before
-- its window, through webhook_inbox_outbox_delivered_idx (the statement is the sidecar's, like
-- the events'). Idempotency per operation id therefore lasts as long as the effect is kept.
CREATE OR REPLACE FUNCTION webhook_inbox_emit(p_operation_id text, p_destination text, p_payload jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    existing text;
    scope    text := coalesce(current_setting('webhook_inbox.source_scope', true), '');
    event    text := nullif(current_setting('webhook_inbox.source_event_id', true), '');
    trace    text := webhook_inbox_trace_context(current_setting('webhook_inbox.trace_context', true)); -- v30
BEGIN
    IF p_operation_id IS NULL OR p_operation_id !~ '^[!-~]{1,200}$' THEN
        RAISE EXCEPTION 'webhook_inbox_emit: operation id must be 1..200 printable ASCII characters without spaces'
              USING ERRCODE = '22023';
    END IF;
    IF p_destination IS NULL OR p_destination !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'webhook_inbox_emit: destination must match [a-z][a-z0-9_]{0,62}' USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'webhook_inbox_emit: payload must not be NULL' USING ERRCODE = '22023';
    END IF;
    INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, source_scope, source_event_id, trace_context)
    VALUES (p_operation_id, p_destination, p_payload, scope, event, trace)
    ON CONFLICT (source_scope, operation_id) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT o.destination INTO existing FROM webhook_inbox_outbox o
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id;
    IF existing IS DISTINCT FROM p_destination THEN
        RAISE EXCEPTION 'webhook_inbox_emit: operation % was emitted to destination %, not %',
              p_operation_id, existing, p_destination USING ERRCODE = '22023';
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION webhook_inbox_emit(text, text, jsonb) IS
    'Record an external side effect (operation id, destination name, JSON payload) in the caller''s transaction; idempotent per (source scope, operation id) while the effect is kept (true = recorded now, false = already there). Retention deletes delivered effects after its window (`prune`, `run --retain`): the same operation id emitted after that is a new effect.';

-- The provider's id in an answer: the top-level "id" of a JSON object body, else NULL.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_provider_id(p_body text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    doc jsonb;
BEGIN
    IF p_body IS NULL OR left(ltrim(p_body), 1) <> '{' THEN
        RETURN NULL;
    END IF;
    doc := p_body::jsonb;
    RETURN left(doc ->> 'id', 200);
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_provider_id(text) IS
    'The top-level "id" of a JSON object (at most 200 characters), or NULL when the body is not one.';

-- Saves one delivery's outcome, only while p_owner still holds the lease (another sidecar
-- that took over an expired lease owns the effect now: this save then changes nothing and
-- every OUT value is NULL). p_result:
--   'delivered'  -> status delivered (a 2xx)
--   'retry'      -> pending again, next attempt after webhook_inbox_retry_delay_ms(attempts - 1,
--                   ...) or the destination's Retry-After (p_retry_after_ms, at most a day),
--                   whichever is later; quarantined when attempts reached p_max_attempts
--   'quarantine' -> status quarantined (a 4xx other than 408/429), p_error says why
-- p_status is the HTTP status (NULL: no answer), p_body the answer's body (bounded by the
-- caller); the first 1000 characters are kept, and a JSON "id" as provider_id. The effect is
-- the one of that operation id this owner leases (an id is unique per source scope: db/025),
-- its scope read unlocked by the key's first column, then saved by the whole key
-- (webhook_inbox_outbox_save_scoped: on Citus one router query to the scope's shard).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save(
        p_operation_id text, p_owner text, p_result text, p_error text, p_status integer, p_body text,
        p_retry_after_ms bigint, p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    scope text;
BEGIN
    -- No status in the WHERE: with it the planner may walk the pending partial index instead
    -- of the primary key (every pending row, at every save).
    SELECT o.source_scope INTO scope FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id AND o.lease_owner = p_owner;
    SELECT s.new_status, s.new_attempts, s.retry_in_ms INTO new_status, new_attempts, retry_in_ms
      FROM webhook_inbox_outbox_save_scoped(scope, p_operation_id, p_owner, p_result, p_error, p_status, p_body,
                                            p_retry_after_ms, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms) s;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save(text, text, text, text, integer, text, bigint, integer, bigint, bigint) IS
    'Sidecar v6: save one delivery (delivered / retry with backoff or Retry-After / quarantine) if p_owner still holds the lease; NULLs otherwise. Args: operation id, owner, result, error, HTTP status, body, Retry-After ms, max attempts, backoff base ms, backoff cap ms.';

-- webhook_inbox_outbox_save() on the effect (p_scope, p_operation_id), found by its primary
-- key (NULL scope: none, NULLs out). The times are in variables: Citus refuses a function or
-- operator that is not IMMUTABLE (timestamptz + interval) in a CASE of an UPDATE.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save_scoped(
        p_scope text, p_operation_id text, p_owner text, p_result text, p_error text, p_status integer, p_body text,
        p_retry_after_ms bigint, p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    seen       integer;
    cur_status text;
    cur_owner  text;
    delay_ms   bigint;
    t          timestamptz := clock_timestamp();
    nxt        timestamptz;
BEGIN
    PERFORM webhook_inbox_check_choice('webhook_inbox', 'p_result', p_result, 'delivered', 'retry', 'quarantine');
    SELECT o.attempts, o.status, o.lease_owner, o.next_attempt_at INTO seen, cur_status, cur_owner, nxt
      FROM webhook_inbox_outbox o
     WHERE o.source_scope = p_scope AND o.operation_id = p_operation_id
       FOR UPDATE;
    IF NOT FOUND OR cur_status <> 'pending' OR cur_owner IS DISTINCT FROM p_owner THEN
        RETURN;
    END IF;
    IF p_result = 'retry' THEN
        delay_ms := greatest(webhook_inbox_retry_delay_ms(seen - 1, p_backoff_base_ms, p_backoff_cap_ms),
                             least(coalesce(p_retry_after_ms, 0), 86400000));
        nxt := t + delay_ms * interval '1 millisecond';
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
           next_attempt_at = nxt,
           processed_at = CASE WHEN p_result <> 'retry' OR seen >= p_max_attempts THEN t END
     WHERE o.source_scope = p_scope AND o.operation_id = p_operation_id
    RETURNING o.status, o.attempts INTO new_status, new_attempts;
    IF new_status = 'pending' THEN
        retry_in_ms := delay_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save_scoped(text, text, text, text, text, integer, text, bigint, integer, bigint, bigint) IS
    'webhook_inbox_outbox_save() on the effect of one (source scope, operation id): its primary key (on Citus one shard).';

-- Monitoring, per destination: pending (of which retrying: attempted before, and leased:
-- being delivered now), the oldest pending effect's age, quarantined, delivered in the last hour.
-- PL/pgSQL: Citus cannot plan a SQL function's query over a distributed table.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_stats(
        OUT destination text, OUT pending bigint, OUT retrying bigint, OUT leased bigint,
        OUT oldest_pending_age_s double precision, OUT quarantined bigint, OUT delivered bigint)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
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
     ORDER BY 1;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_stats() IS
    'Outbox per destination: pending, retrying, leased (being delivered), oldest pending age in s, quarantined, delivered IN THE LAST HOUR (what `webhook-inbox-sidecar stats` and /metrics show). Reads only pending, quarantined and last-hour rows.';

-- quarantined -> pending (attempts 0, due now) by operation id, destination, or all (both
-- NULL); wakes the deliverers. Returns how many moved.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_requeue(p_operation_id text, p_destination text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    UPDATE webhook_inbox_outbox o
       SET status = 'pending', attempts = 0, next_attempt_at = now(), last_error = NULL,
           lease_owner = NULL, lease_until = NULL, processed_at = NULL
     WHERE o.status = 'quarantined'
       AND (p_operation_id IS NULL OR o.operation_id = p_operation_id)
       AND (p_destination IS NULL OR o.destination = p_destination);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('webhook_inbox_outbox', '');
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_requeue(text, text) IS
    'quarantined effects -> pending with attempts reset, by operation id and/or destination (NULL = any); returns the count (`requeue --effects`).';

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
-- rows are locked by primary key in key order (two savers never wait on each other in a
-- cycle), then updated by one UPDATE (per element, a statement of its own cost ten times
-- more than the row change). One row out per element, in operation id order, NULL statuses
-- where the lease was lost; an operation id given twice saves its first answer only (the
-- other finds no lease, as it would after the first). force_generic_plan: one plan, made
-- once per session (PL/pgSQL otherwise planned the statement again at every call for some
-- batch sizes: 140 instead of 55 us per answer in batches of 6). On Citus (the outbox
-- distributed: webhook_inbox_outbox_save_scopes) the same statement runs once per source
-- scope of the leased effects, a router query each (custom plans: citus/002), the rows out
-- scope by scope, then those whose lease was lost; the backoff (VOLATILE: its jitter) is
-- computed in the locking SELECT and the next attempt's time with IMMUTABLE functions, as
-- Citus wants in an UPDATE.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save_batch(
        p_owner text, p_operation_ids text[], p_results text[], p_errors text[], p_statuses integer[],
        p_bodies text[], p_retry_after_ms bigint[], p_max_attempts integer, p_backoff_base_ms bigint,
        p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, new_status text, new_attempts integer, retry_in_ms bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    n      integer := coalesce(cardinality(p_operation_ids), 0);
    bad    text;
    s      text;
    ids    text[];
    done   text[] := '{}';
    whole  boolean := false; -- all scopes at once (a plain table)
    t      timestamptz := clock_timestamp();
    t_s    double precision := extract(epoch FROM clock_timestamp());
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
    FOR s, ids IN SELECT x.scope, x.ids FROM webhook_inbox_outbox_save_scopes(p_owner, p_operation_ids) x LOOP
        RETURN QUERY
        WITH a AS (
            SELECT u.id, u.result, u.error, u.status, u.body, u.retry_after_ms, u.ord
              FROM unnest(p_operation_ids, p_results, p_errors, p_statuses, p_bodies, p_retry_after_ms)
                   WITH ORDINALITY u(id, result, error, status, body, retry_after_ms, ord)
             WHERE s IS NULL OR u.id = ANY (ids)
        ), first AS ( -- an operation id twice: its first answer is saved, the other finds no lease
            SELECT DISTINCT ON (a.id) a.* FROM a ORDER BY a.id, a.ord
        ), locked AS ( -- by primary key, in key order
            SELECT o.operation_id, o.source_scope, o.attempts AS seen,
                   o.status = 'pending' AND o.lease_owner = p_owner AS owned,
                   CASE WHEN f.result = 'retry'
                        THEN greatest(webhook_inbox_retry_delay_ms(o.attempts - 1, p_backoff_base_ms, p_backoff_cap_ms),
                                      least(coalesce(f.retry_after_ms, 0), 86400000)) END AS delay_ms
              FROM webhook_inbox_outbox o
              JOIN first f ON f.id = o.operation_id
             WHERE (s IS NULL OR o.source_scope = s) AND o.operation_id = ANY (p_operation_ids)
             ORDER BY o.operation_id, o.source_scope
               FOR UPDATE OF o
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
                   next_attempt_at = CASE WHEN l.delay_ms IS NULL THEN o.next_attempt_at
                                          ELSE to_timestamp(t_s + l.delay_ms / 1000.0) END,
                   processed_at = CASE WHEN f.result <> 'retry' OR l.seen >= p_max_attempts THEN t END
              FROM locked l
              JOIN first f ON f.id = l.operation_id
             WHERE (s IS NULL OR o.source_scope = s) AND o.operation_id = l.operation_id
               AND o.source_scope = l.source_scope AND l.owned
            RETURNING o.operation_id, o.status, o.attempts, l.delay_ms
        )
        SELECT a.id, sv.status, sv.attempts, CASE WHEN sv.status = 'pending' THEN sv.delay_ms END
          FROM a
          LEFT JOIN first f ON f.id = a.id AND f.ord = a.ord
          LEFT JOIN saved sv ON sv.operation_id = f.id
         ORDER BY a.id, a.ord;
        whole := s IS NULL;
        done := done || ids;
    END LOOP;
    IF NOT whole THEN -- scope by scope: the answers left, whose lease was lost
        RETURN QUERY
        SELECT u.id, NULL::text, NULL::integer, NULL::bigint
          FROM unnest(p_operation_ids) WITH ORDINALITY u(id, ord)
         WHERE NOT (u.id = ANY (done))
         ORDER BY u.id, u.ord;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save_batch(text, text[], text[], text[], integer[], text[], bigint[], integer, bigint, bigint) IS
    'Sidecar v7: webhook_inbox_outbox_save() for many deliveries in one statement (same arguments, per-delivery ones as arrays); one row per delivery, NULL statuses where the lease was lost.';

-- The source scopes webhook_inbox_outbox_save_batch saves one at a time, each with the
-- operation ids of its effects that p_owner leases. Where the outbox is a plain table: one
-- row, NULL and every id (all at once). On Citus: one row per scope (read on every shard).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save_scopes(p_owner text, p_operation_ids text[])
RETURNS TABLE (scope text, ids text[])
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT webhook_inbox_outbox_distributed() THEN
        RETURN QUERY SELECT NULL::text, p_operation_ids;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT o.source_scope, array_agg(o.operation_id) FROM webhook_inbox_outbox o
     WHERE o.operation_id = ANY (p_operation_ids) AND o.lease_owner = p_owner AND o.status = 'pending'
     GROUP BY o.source_scope;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save_scopes(text, text[]) IS
    'The scopes webhook_inbox_outbox_save_batch saves one at a time, with the ids p_owner leases in each: one row (NULL, every id) on a plain table.';

-- Whether the outbox is distributed (a Citus layout, db/citus/002): then a statement that
-- locks its rows (FOR UPDATE) must name one source scope, the distribution column.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_distributed() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    distributed boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
           INTO distributed USING 'webhook_inbox_outbox'::regclass;
    END IF;
    RETURN distributed;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_distributed() IS
    'Whether webhook_inbox_outbox is distributed (Citus): its row-locking statements then name one source scope.';

-- The source scopes the outbox's claims (the deliverer's and the Ruby worker's steps 1) take
-- one at a time. Where the outbox is a plain table: one NULL, every scope at once (the claims
-- read `s IS NULL OR source_scope = s`: one statement, as before). On Citus, where it is
-- distributed by source_scope and FOR UPDATE works within one shard only: the scopes of the
-- 256 oldest due pending effects of the destination (the claims' own filters: due, lease
-- expired or none; a charged Ruby run is leased past now()), in random order, so concurrent
-- claimers start on different scopes. Every effect there is one a claim may take, bar those
-- another has locked at that moment (effects have no ordering key, and a Ruby run waits for
-- its event's key in the lock step, never in the claim): no held effect fills the window.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_claim_scopes(p_destination text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT webhook_inbox_outbox_distributed() THEN
        RETURN NEXT NULL;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT d.scope FROM (SELECT DISTINCT o.scope FROM (
             SELECT c.source_scope AS scope FROM webhook_inbox_outbox c
              WHERE c.destination = p_destination AND c.status = 'pending' AND c.next_attempt_at <= now()
                AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
              ORDER BY c.next_attempt_at LIMIT 256) o) d
     ORDER BY random();
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_claim_scopes(text) IS
    'The scopes the outbox''s claims take one at a time: one NULL (all at once) on a plain table; on Citus those of the 256 oldest due pending effects of the destination, in random order.';

-- As in 006, plus: a paused destination's effects are never claimed (they stay pending,
-- uncharged); a rate-limited one is leased one effect per free slot (burst 1), its GCRA row
-- advanced in this transaction, whichever sidecar claims. Scope by scope
-- (webhook_inbox_outbox_claim_scopes: all at once on one node; on Citus one shard each, a
-- router query) until p_limit effects are leased or the scopes run out. Committed at once by
-- the sidecar (autocommit); on Citus over several nodes with two-phase commit, and with
-- custom plans (citus/002: a generic plan of a scoped statement cannot be distributed). The
-- effects are updated by their ids (an index probe each, whatever the generic plan guesses of
-- the claim's size: joined with it, the plan read the whole outbox), then matched to their
-- scope (an operation id has no newline).
-- v30: the result gains trace_context (the effect's inherited receipt context): the older
-- form, whose result lacks it, is dropped first (a result type cannot be replaced in place).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p
                WHERE p.oid = to_regprocedure('webhook_inbox_outbox_claim(text, integer, text, bigint, integer)')
                  AND NOT 'trace_context' = ANY (coalesce(p.proargnames, '{}'))) THEN
        DROP FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_claim(
        p_destination text, p_limit integer, p_owner text, p_lease_ms bigint, p_max_attempts integer)
RETURNS TABLE (operation_id text, payload text, attempts integer, trace_context text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    s    text;
    got  integer := 0;
    k    integer;
    lim  integer := p_limit;
    rule webhook_inbox_flow;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_owner IS NULL OR p_lease_ms IS NULL OR p_lease_ms < 1
       OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'webhook_inbox: limit, lease and max attempts must be >= 1, owner non-NULL' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO rule FROM webhook_inbox_flow f WHERE f.kind = 'destination' AND f.target = p_destination FOR UPDATE;
    IF rule.paused THEN
        RETURN;
    ELSIF rule.rate IS NOT NULL THEN
        IF rule.tat > now() THEN
            RETURN;
        END IF;
        lim := 1;
    END IF;
    FOR s IN SELECT x FROM webhook_inbox_outbox_claim_scopes(p_destination) x LOOP
        RETURN QUERY
        WITH due AS (
            SELECT c.operation_id, c.source_scope, c.attempts >= p_max_attempts AS spent
              FROM webhook_inbox_outbox c
             WHERE (s IS NULL OR c.source_scope = s) AND c.destination = p_destination AND c.status = 'pending'
               AND c.next_attempt_at <= now() AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
             ORDER BY c.next_attempt_at, c.created_at
             LIMIT lim - got
               FOR UPDATE SKIP LOCKED
        ), quarantined AS (
            UPDATE webhook_inbox_outbox o
               SET status = 'quarantined', processed_at = clock_timestamp(), lease_owner = NULL, lease_until = NULL,
                   last_error = left(CASE WHEN o.lease_until IS NULL THEN 'max attempts reached'
                                          ELSE 'max attempts reached; the last delivery was never saved (sidecar stopped): outcome unknown'
                                     END || coalesce(' (before: ' || o.last_error || ')', ''), 1000)
             WHERE (s IS NULL OR o.source_scope = s)
               AND o.operation_id = ANY (ARRAY(SELECT d.operation_id FROM due d WHERE d.spent))
               AND o.operation_id || E'\n' || o.source_scope
                   = ANY (ARRAY(SELECT d.operation_id || E'\n' || d.source_scope FROM due d WHERE d.spent))
            RETURNING o.operation_id
        )
        UPDATE webhook_inbox_outbox o
           SET attempts = o.attempts + 1, lease_owner = p_owner,
               lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
               last_attempt_at = clock_timestamp()
         WHERE (s IS NULL OR o.source_scope = s)
           AND o.operation_id = ANY (ARRAY(SELECT d.operation_id FROM due d WHERE NOT d.spent))
           AND o.operation_id || E'\n' || o.source_scope
               = ANY (ARRAY(SELECT d.operation_id || E'\n' || d.source_scope FROM due d WHERE NOT d.spent))
        RETURNING o.operation_id, o.payload::text, o.attempts, o.trace_context;
        GET DIAGNOSTICS k = ROW_COUNT;
        got := got + k;
        EXIT WHEN got >= lim;
    END LOOP;
    IF rule.rate IS NOT NULL AND got > 0 THEN
        PERFORM webhook_inbox_flow_take('destination', p_destination);
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer) IS
    'Sidecar v6: lease up to p_limit due pending effects of one destination to p_owner for p_lease_ms (attempts + 1 each); due effects already at p_max_attempts (last delivery never saved) are quarantined instead, and not returned. v15: nothing while the destination is paused, one per rate slot when it is rate limited. v30: each with its trace context (trace_context). Args: destination, limit, owner, lease ms, max attempts.';

-- As in 006, plus: a paused destination has nothing due (its deliverer sleeps until resume
-- wakes it), a rate-limited one nothing before its next free slot. PL/pgSQL, as the other
-- reads of the outbox or the inbox with a parameter or a set of rows (stats): Citus cannot plan
-- a SQL function's query over a distributed table (its plan is also kept per session here).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_next_due(p_destinations text[]) RETURNS double precision
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN (SELECT extract(epoch FROM min(CASE WHEN f.rate IS NULL THEN x.due ELSE greatest(x.due, f.tat) END)
                                      - clock_timestamp())::float8
              FROM (SELECT o.destination, min(greatest(o.next_attempt_at, coalesce(o.lease_until, o.next_attempt_at))) AS due
                      FROM webhook_inbox_outbox o
                     WHERE o.status = 'pending' AND o.destination = ANY (p_destinations)
                     GROUP BY o.destination) x
              LEFT JOIN webhook_inbox_flow f ON f.kind = 'destination' AND f.target = x.destination
             WHERE f.paused IS NOT TRUE);
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_next_due(text[]) IS
    'Seconds until the next pending effect of these destinations may be claimed (NULL: none pending, or every such destination paused; a rate-limited one not before its next slot).';
