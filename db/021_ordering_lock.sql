-- 021_ordering_lock.sql - schema version 21: never two events of one ordering key at once.
-- 014's claim held a keyed event back only while an EARLIER event of its key was pending, so
-- an earlier event that arrived while a later one of its key was being handled was claimed by
-- another worker and ran beside it. Now every transaction that runs a keyed event's handlers
-- holds the key: a transaction-level advisory lock on webhook_inbox_ordering_lock_id(scope,
-- key), taken
--   - by the sidecar's claims (webhook_inbox_dispatch_batch below, sidecar/src/claim.c, and
--     db/citus/001_layout.sql's) with pg_try_advisory_xact_lock on each keyed row they locked:
--     a row whose key another transaction holds is skipped, left pending, and claimed after
--     that transaction ends (never waited for: a busy key holds no worker and no other key);
--   - by the Ruby worker's lock step (webhook_inbox_ruby_lock, _lock_batch below) with
--     pg_advisory_xact_lock before any row lock, a batch's keys in one sorted order (workers
--     never wait for each other in a cycle): a Ruby handler waits for the key's transaction
--     to end, as it waits for its event's row lock.
-- The lock is released when the transaction ends, after its commit is visible, so the next
-- claim sees what that transaction did. An earlier event that arrived late runs after the
-- later one's transaction, and its handler refuses what would move state backwards (the
-- stale rule, docs/ordering.md). Unkeyed events take no lock.
-- Idempotent: safe to re-run. Applied after 001..020.
--
-- Redefines: webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint)
-- (019's, with the key lock after its claim), webhook_inbox_ruby_lock(text, integer) (013's)
-- and webhook_inbox_ruby_lock_batch(text[], integer[]) (016's), same arguments and rows.
-- New: webhook_inbox_ordering_lock_id(text, text). Additive: webhook_inbox_schema_min_worker()
-- stays 4; a sidecar older than v21 claims through this dispatch_batch (its fused batch), but
-- its one-event claim (careful mode, a failed batch) does not try the key.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 21 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- The advisory lock id of one (source_scope, ordering_key): 64 bits of hash (two keys that
-- share one only take turns). Inlined into the claims' statements.
CREATE OR REPLACE FUNCTION webhook_inbox_ordering_lock_id(p_scope text, p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT hashtextextended(p_scope || E'\n' || p_key, 21) $$;
COMMENT ON FUNCTION webhook_inbox_ordering_lock_id(text, text) IS
    'Per-object ordering: the transaction-level advisory lock id a transaction holds while it runs an event of this (source_scope, ordering_key) (db/021).';

CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_batch(
        p_limit integer, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    evs      webhook_inbox[];
    tids     tid[];            -- their row versions as claimed (the done UPDATE's TID scan)
    ev       webhook_inbox;
    marked   integer;          -- rows the done UPDATE by row version marked
    n        integer;
    types    text[];           -- the batch's event types, each once
    handlers regproc[];        -- their routes (NULL: none)
    batchers regproc[];        -- their batch handlers (NULL: none)
    plain    boolean[];        -- per type: SQL route, no Ruby handlers
    calls    text[];           -- per type: the statement that calls its route
    bcalls   text[];           -- per type: the statement that calls its batch handler
    k        integer[];        -- per event: its type's index in types
    fast     boolean[];        -- per event: its handler called directly (the plain path)
    i        integer;
    j        integer;          -- the last event of a batch handler's run i .. j
    running  integer;          -- the event whose handler runs now in the one subtransaction
    run_end  integer;          -- with running: the last event of the batch handler's run
    failed   integer;          -- the event whose handler raised there
    batch_failed boolean := false; -- a batch handler raised there
    err_state text;
    err_text text;
    outcome  text;
    outcomes text[];
    t0       timestamptz;
    t1       timestamptz;
    res      text;             -- one webhook_inbox_run_event row
    det      text;
    chg      boolean;
    rty      bigint;
    scopes   text[];
    ids      text[];
    ts       timestamptz[];    -- ts[i]: event i's run starts; ts[i + 1]: it ends
    r_result text[];
    r_detail text[];
    r_charge boolean[];
    r_retry  bigint[];
BEGIN
    -- webhook_inbox_run_event's checks, which the plain path does not call; before the claim.
    IF p_unrouted IS NULL OR p_unrouted NOT IN ('wait', 'ignore', 'quarantine', 'retry') THEN
        RAISE EXCEPTION 'webhook_inbox: p_unrouted must be wait, ignore, quarantine or retry, not %', p_unrouted
              USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 OR p_backoff_base_ms IS NULL OR p_backoff_cap_ms IS NULL
       OR p_unrouted_delay_ms IS NULL OR p_unrouted_delay_ms < 0 THEN
        RAISE EXCEPTION 'webhook_inbox: p_max_attempts must be >= 1, backoff and unrouted delay non-NULL and >= 0'
              USING ERRCODE = '22023';
    END IF;
    -- The claim (019's), then each keyed row's key lock, tried only on the rows the claim
    -- locked (outside the subquery: its LIMIT keeps the filter out of the scan, which would
    -- otherwise take keys for rows it then skips or sorts away). A row whose key another
    -- transaction holds is left out of the batch, still pending (locked until this commits).
    SELECT array_agg(c.w ORDER BY c.next_attempt_at, c.received_at), array_agg(c.tid ORDER BY c.next_attempt_at, c.received_at)
      INTO evs, tids
      FROM (SELECT w, w.ctid AS tid, w.next_attempt_at, w.received_at, w.source_scope AS scope, w.ordering_key AS okey
              FROM webhook_inbox w
             WHERE w.status = 'pending' AND w.next_attempt_at <= now()
               AND (w.ordering_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM webhook_inbox p
                     WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                       AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
                       AND (p.status = 'pending' OR webhook_inbox_route_strict(w.event_type))))
             ORDER BY w.next_attempt_at, w.received_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) c
     WHERE c.okey IS NULL OR pg_try_advisory_xact_lock(webhook_inbox_ordering_lock_id(c.scope, c.okey));
    n := coalesce(cardinality(evs), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    scopes := ARRAY(SELECT e.source_scope FROM unnest(evs) e);
    ids := ARRAY(SELECT e.event_id FROM unnest(evs) e);
    IF n = 1 THEN
        -- One event (--batch-size 1, a trickle): 014's path, its handler in a savepoint (one
        -- subxid); the reads once per batch below would cost more than they save.
        ev := evs[1];
        ts[1] := clock_timestamp();
        SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO res, det, chg, rty
          FROM webhook_inbox_run_event(ev, webhook_inbox_route(ev.event_type), p_unrouted, p_max_attempts,
                                       p_backoff_base_ms, p_backoff_cap_ms, p_unrouted_delay_ms) r;
        ts[2] := clock_timestamp();
        r_result[1] := res;
        r_detail[1] := det;
        r_charge[1] := chg;
        r_retry[1] := rty;
    ELSE
        -- Once per batch: each type's route, batch handler and Ruby handlers, the route
        -- markers, the pause and rate rules (015's gate): fast[i] when event i's route is SQL,
        -- it has no Ruby handlers, no once-marker (db/009), and no paused scope, paused route
        -- or rate-limited route matches it, nor does it hold a slot or was it held. The others
        -- go through webhook_inbox_run_event.
        types := ARRAY(SELECT DISTINCT e.event_type FROM unnest(evs) e);
        SELECT array_agg(m.handler ORDER BY t.i), array_agg(m.batch_handler ORDER BY t.i) INTO handlers, batchers
          FROM unnest(types) WITH ORDINALITY AS t(event_type, i)
          LEFT JOIN LATERAL webhook_inbox_route_match(t.event_type) AS m ON true;
        calls := ARRAY(SELECT format('SELECT %s($1)', h) FROM unnest(handlers) h);
        bcalls := ARRAY(SELECT format('SELECT %s($1)', b) FROM unnest(batchers) b);
        plain := ARRAY(SELECT h IS NOT NULL AND webhook_inbox_ruby_handlers_for(t) IS NULL
                         FROM unnest(types, handlers) AS x(t, h));
        k := ARRAY(SELECT array_position(types, e.event_type) FROM unnest(evs) e);
        fast := ARRAY(
            SELECT plain[k[x.ordinality::int]] AND x.held_at IS NULL AND x.rate_slot_at IS NULL
                   AND NOT EXISTS (
                       SELECT 1 FROM webhook_inbox_effects_received r
                        WHERE r.operation_id = webhook_inbox_handler_operation_id(x.source_scope, x.event_id,
                                                                                  'sql:' || handlers[k[x.ordinality::int]]::text))
                   AND NOT EXISTS (
                       SELECT 1 FROM webhook_inbox_flow f
                        WHERE (f.kind = 'scope' AND f.paused AND f.target = x.source_scope)
                           OR (f.kind = 'route' AND (f.paused OR f.rate IS NOT NULL)
                               AND webhook_inbox_flow_matches(f.target, x.event_type)))
              FROM unnest(evs) WITH ORDINALITY AS x
             ORDER BY x.ordinality);
        -- The plain events' results, filled before the loop (the loop then writes only their outcome).
        r_result := ARRAY(SELECT CASE WHEN f THEN 'done' END FROM unnest(fast) f);
        r_charge := array_fill(false, ARRAY[n]);
        r_retry := array_fill(NULL::bigint, ARRAY[n]);
        <<optimistic>>
        BEGIN
            i := 1;
            WHILE i <= n LOOP
                ts[i] := clock_timestamp();
                running := i;
                j := i;
                IF fast[i] AND batchers[k[i]] IS NOT NULL THEN
                    WHILE j < n AND fast[j + 1] AND k[j + 1] = k[i] LOOP
                        j := j + 1;
                    END LOOP;
                END IF;
                IF j > i THEN
                    -- A run of events for the type's batch handler: one call, one outcome each.
                    run_end := j;
                    PERFORM set_config('webhook_inbox.source_scope', '', true),
                            set_config('webhook_inbox.source_event_id', '', true);
                    t0 := ts[i];
                    EXECUTE bcalls[k[i]] INTO outcomes USING evs[i:j];
                    IF cardinality(outcomes) IS DISTINCT FROM j - i + 1 THEN
                        RAISE EXCEPTION USING ERRCODE = 'WIB02',
                              MESSAGE = format('batch handler %s returned %s outcomes for %s events', batchers[k[i]],
                                               coalesce(cardinality(outcomes), 0), j - i + 1);
                    END IF;
                    t1 := clock_timestamp();
                    -- Events i .. j: their outcomes, and start times sharing the call's time. Whole
                    -- arrays, not a loop (a PL/pgSQL assignment costs microseconds per event).
                    -- r_detail and ts hold exactly i - 1 and i elements here.
                    r_detail := r_detail[1:i - 1] || ARRAY(SELECT coalesce(o, 'done') FROM unnest(outcomes) o);
                    ts := ts[1:i] || ARRAY(SELECT t0 + (t1 - t0) * m / (j - i + 1) FROM generate_series(1, j - i) m);
                    run_end := NULL;
                ELSIF fast[i] THEN
                    -- 006's webhook_inbox_run_handler without its savepoint: a raise leaves the loop.
                    PERFORM set_config('webhook_inbox.source_scope', evs[i].source_scope, true),
                            set_config('webhook_inbox.source_event_id', evs[i].event_id, true);
                    EXECUTE calls[k[i]] INTO outcome USING evs[i];
                    r_detail[i] := coalesce(outcome, 'done');
                ELSE
                    SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO res, det, chg, rty
                      FROM webhook_inbox_run_event(evs[i], handlers[k[i]], p_unrouted, p_max_attempts, p_backoff_base_ms,
                                                   p_backoff_cap_ms, p_unrouted_delay_ms) r;
                    r_result[i] := res;
                    r_detail[i] := det;
                    r_charge[i] := chg;
                    r_retry[i] := rty;
                END IF;
                i := j + 1;
            END LOOP;
            ts[n + 1] := clock_timestamp();
            running := NULL;
            PERFORM set_config('webhook_inbox.source_scope', '', true),
                    set_config('webhook_inbox.source_event_id', '', true);
        EXCEPTION
            WHEN OTHERS THEN
                IF running IS NULL OR NOT fast[running] THEN
                    RAISE; -- not a handler's error (webhook_inbox_run_event records those): the statement fails, as in 014
                END IF;
                GET STACKED DIAGNOSTICS err_state = RETURNED_SQLSTATE, err_text = MESSAGE_TEXT;
                IF run_end IS NOT NULL THEN
                    batch_failed := true;
                    IF err_state NOT IN ('WIB01', 'WIQ01', 'WIR01') THEN -- a defer, a quarantine, a "not yet": on purpose
                        RAISE WARNING USING ERRCODE = 'WIB03',
                              MESSAGE = format('webhook_inbox: batch handler %s raised SQLSTATE %s for type %s; the row handler %s ran its events',
                                               batchers[k[running]], err_state, types[k[running]], handlers[k[running]]);
                    ELSE
                        RAISE NOTICE USING ERRCODE = 'WIB04',
                              MESSAGE = format('webhook_inbox: batch handler %s deferred its events of type %s to the row handler %s',
                                               batchers[k[running]], types[k[running]], handlers[k[running]]);
                    END IF;
                ELSE
                    failed := running;
                END IF;
        END;
        IF failed IS NOT NULL OR batch_failed THEN
            -- A handler raised: everything above rolled back. Each event again in its own
            -- savepoint (webhook_inbox_run_event) by its row handler; a row handler that raised is
            -- not run again: its error is raised in its place (webhook_inbox_batch_failure), so it
            -- is recorded as it was. After a batch handler's error every event of its run is
            -- given to the row handler.
            IF failed IS NOT NULL THEN
                PERFORM set_config('webhook_inbox.batch_error_state', err_state, true),
                        set_config('webhook_inbox.batch_error_text', err_text, true);
            END IF;
            FOR i IN 1 .. n LOOP
                ts[i] := clock_timestamp();
                SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO res, det, chg, rty
                  FROM webhook_inbox_run_event(evs[i], CASE WHEN i = failed THEN 'webhook_inbox_batch_failure'::regproc
                                                           ELSE handlers[k[i]] END,
                                               p_unrouted, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms,
                                               p_unrouted_delay_ms) r;
                r_result[i] := res;
                r_detail[i] := det;
                r_charge[i] := chg;
                r_retry[i] := rty;
            END LOOP;
            ts[n + 1] := clock_timestamp();
        END IF;
    END IF;
    -- The done marks: one static statement for the batch (its plan cached for the session),
    -- the attempt_log entry's duration from ts. By the row versions the claim locked (a TID
    -- scan: a third of the cost of 017's primary key probes); a row some statement of this
    -- transaction updated since (a handler writing the inbox, a held row) has a new version:
    -- those the first statement did not mark, the second marks by primary key.
    IF 'done' = ANY (r_result) THEN
        UPDATE webhook_inbox w
           SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL,
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', d.outcome, d.ms))
          FROM (SELECT e.tid, e.source_scope, e.event_id, e.outcome,
                       (extract(epoch FROM e.t1 - e.t0) * 1000)::float8 AS ms
                  FROM unnest(tids, scopes, ids, r_detail, r_result, ts[1:n], ts[2:n + 1])
                       AS e(tid, source_scope, event_id, outcome, result, t0, t1)
                 WHERE e.result = 'done') d
         WHERE w.ctid = d.tid AND w.source_scope = d.source_scope AND w.event_id = d.event_id AND w.status = 'pending';
        GET DIAGNOSTICS marked = ROW_COUNT;
        IF marked < (SELECT count(*) FROM unnest(r_result) r WHERE r = 'done') THEN
            UPDATE webhook_inbox w
               SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL,
                   attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', d.outcome, d.ms))
              FROM (SELECT e.source_scope, e.event_id, e.outcome,
                           (extract(epoch FROM e.t1 - e.t0) * 1000)::float8 AS ms
                      FROM unnest(scopes, ids, r_detail, r_result, ts[1:n], ts[2:n + 1])
                           AS e(source_scope, event_id, outcome, result, t0, t1)
                     WHERE e.result = 'done') d
             WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id AND w.status = 'pending';
        END IF;
    END IF;
    RETURN QUERY
        SELECT x.source_scope, x.event_id, x.event_type, r_result[x.ordinality::int], r_detail[x.ordinality::int],
               x.attempts, (extract(epoch FROM ts[x.ordinality::int] - coalesce(x.requeued_at, x.received_at)) * 1000)::float8,
               r_charge[x.ordinality::int], r_retry[x.ordinality::int]
          FROM unnest(evs) WITH ORDINALITY AS x;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: claim up to p_limit due events (FOR UPDATE SKIP LOCKED; a keyed event only when no earlier event of its key must run first), run each handler, record done/quarantined/retry (charged, with backoff)/waiting and an attempt_log entry in the same transaction; one row per event; latency from requeued_at or received_at. v17: the batch runs in one subtransaction; when a handler raises, it is rolled back and redone with each handler in its own savepoint and the raising one not run again (only the failing event rolls back). v19: a run of consecutive events whose route names a batch handler is one call of it; when it raises, the batch is redone with the row handlers. v21: a keyed event only while no other transaction holds its key (webhook_inbox_ordering_lock_id, a transaction-level advisory lock taken at the claim). Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';


-- 013's step 2, the event's key first: the run's event's ordering key (read unlocked: it
-- never changes) is locked - waiting for the transaction that holds it - before the event's
-- row, then the run, as before. A batch took its keys already (below): taken again, it does
-- not wait.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock(p_operation_id text, p_attempt integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    run webhook_inbox_outbox;
    ev  webhook_inbox;
BEGIN
    SELECT * INTO run FROM webhook_inbox_outbox o WHERE o.operation_id = p_operation_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key))
       FROM webhook_inbox w
      WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id AND w.ordering_key IS NOT NULL;
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id
       FOR UPDATE;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id AND o.destination = 'ruby' AND o.status = 'pending'
       AND o.attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT run.operation_id, run.payload->>'handler', p_attempt, run.source_scope, run.source_event_id,
                        ev.event_type, ev.payload::text,
                        CASE WHEN ev.payload IS NULL AND ev.raw_body IS NOT NULL
                             THEN translate(encode(ev.raw_body, 'base64'), E'\n', '') END,
                        ev.received_at;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock(text, integer) IS
    'Ruby worker, step 2: lock the run''s event''s ordering key (v21: waits for the transaction holding it), its event, then the run if still pending at p_attempt; the run with its event''s columns, or no row (skip it).';

-- 016's step 2, every key of the batch's events first, in the order of their lock ids (two
-- workers whose batches share keys take them in one order), then as 016.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock_batch(p_operation_ids text[], p_attempts integer[])
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    op text;
BEGIN
    IF p_operation_ids IS NULL OR p_attempts IS NULL OR cardinality(p_operation_ids) <> cardinality(p_attempts) THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_lock_batch: one attempt per operation id' USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(k.id)
       FROM (SELECT DISTINCT webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key) AS id
               FROM webhook_inbox_outbox o
               JOIN webhook_inbox w ON w.source_scope = o.source_scope AND w.event_id = o.source_event_id
              WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby' AND w.ordering_key IS NOT NULL
              ORDER BY 1) k;
    FOR op IN
        SELECT o.operation_id FROM webhook_inbox_outbox o
         WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby'
         ORDER BY o.source_scope, o.source_event_id, o.operation_id
    LOOP
        RETURN QUERY SELECT * FROM webhook_inbox_ruby_lock(op, p_attempts[array_position(p_operation_ids, op)]);
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock_batch(text[], integer[]) IS
    'Ruby worker v16, step 2: the ordering keys of the runs'' events (v21, in lock id order), then webhook_inbox_ruby_lock for each run, in the order of their events (event, then run); the runs still pending at their attempt.';
