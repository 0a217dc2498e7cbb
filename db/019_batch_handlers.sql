-- 019_batch_handlers.sql - schema version 19: a route may name a batch handler, one call
-- for a run of events of its type, set-based. Measured (bench/sidecar, pg_stat_statements):
-- with a row handler, a batched event costs the handler's own statements once per event
-- (~30 us for the orders handler), its PL/pgSQL (~15 us) and the dispatch around it, about
-- 1.7 times the same work done by one statement per 100 events. A batch handler does the
-- work of many events in a few statements, as an app's bulk job would.
--
-- The contract. webhook_inbox_routes.batch_handler names a function
--     (events webhook_inbox[]) RETURNS text[]
-- that does, for all the events it is given, what the route's row handler (handler, still
-- required) would do for each of them in that order, and returns one outcome per event in
-- the order given (NULL: 'done', as a row handler's NULL). It is an optimisation of the
-- common case, never a second meaning: for anything out of the ordinary (a missing row, a
-- mismatch, a duplicate, a quarantine) it raises, webhook_inbox_batch_defer() or any error,
-- and every event of the batch is then run again by the row handler, each in its own
-- savepoint, which decides for each (done, retried with backoff, quarantined). Its writes
-- are rolled back first, so nothing it did commits: an event is handled once, by one of the
-- two. An error other than a deliberate one (webhook_inbox_batch_defer's WIB01, a quarantine's
-- WIQ01, a "not yet" WIR01) also raises a WARNING (SQLSTATE WIB03) naming the function, the event type and the error's SQLSTATE
-- (never its message, which may hold payload data): the sidecar logs it (server_warning,
-- once a minute per text), so a batch handler that always fails is seen, not silently
-- slow. A result of another length than its input is such an error (WIB02). A deliberate
-- one raises a NOTICE (WIB04) instead. The sidecar counts both
-- (webhook_inbox_batch_handler_fallbacks_total, batch_fallbacks= in its summary line).
--
-- When it is called. In webhook_inbox_dispatch_batch's optimistic subtransaction (db/017),
-- for each run of two or more consecutive claimed events of one type whose route has a
-- batch handler and that take the plain path (no Ruby handlers, no once-marker, no pause or
-- rate rule matching, the row neither held nor holding a slot). Consecutive, so the claim's
-- order between types is kept as with row handlers. One event alone, and every event of a
-- batch of one (--batch-size 1), goes to the row handler. On Citus the batch is dispatched
-- per event (webhook_inbox_citus_dispatch_shard), so batch handlers are not called there.
-- During the call webhook_inbox.source_scope and webhook_inbox.source_event_id are '' (it
-- handles many events): an effect it emits (webhook_inbox_emit) records no source event.
-- Its events' attempt_log durations share its time evenly.
--
-- Also: the batch's arguments are checked before the claim (017 claimed first).
-- Idempotent: safe to re-run. Applied after 001..018.
--
-- Redefines: webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint)
-- (017's; same arguments, rows and results). New: webhook_inbox_routes.batch_handler,
-- webhook_inbox_route_batch_handler(text), webhook_inbox_batch_defer(text).
-- Additive: webhook_inbox_schema_min_worker() stays 4; a route without a batch handler runs
-- as in 017.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 19 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

ALTER TABLE webhook_inbox_routes ADD COLUMN IF NOT EXISTS batch_handler regproc;
COMMENT ON COLUMN webhook_inbox_routes.batch_handler IS
    'Optional function (webhook_inbox[]) RETURNS text[]: does the row handler''s work for a run of events set-based, one outcome per event in order; raises to hand them all to the row handler (db/019).';
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'webhook_inbox_routes_batch_handler_check'
                                                 AND conrelid = 'webhook_inbox_routes'::regclass) THEN
        ALTER TABLE webhook_inbox_routes ADD CONSTRAINT webhook_inbox_routes_batch_handler_check
            CHECK (batch_handler IS NULL OR destination IS NULL);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION webhook_inbox_route_batch_handler(p_event_type text) RETURNS regproc
LANGUAGE sql STABLE AS $$ SELECT (webhook_inbox_route_match(p_event_type)).batch_handler $$;
COMMENT ON FUNCTION webhook_inbox_route_batch_handler(text) IS
    'The batch handler named by the route an event type takes (webhook_inbox_route_match''s), or NULL.';

-- Called by a batch handler: "not these, not all at once". Its events go to the row handler.
CREATE OR REPLACE FUNCTION webhook_inbox_batch_defer(reason text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'WIB01', MESSAGE = coalesce(reason, 'deferred to the row handler');
END
$$;
COMMENT ON FUNCTION webhook_inbox_batch_defer(text) IS
    'Raise SQLSTATE WIB01 in a batch handler: its events are run again by the route''s row handler, one by one (no warning).';

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
    SELECT array_agg(c.w ORDER BY c.next_attempt_at, c.received_at), array_agg(c.tid ORDER BY c.next_attempt_at, c.received_at)
      INTO evs, tids
      FROM (SELECT w, w.ctid AS tid, w.next_attempt_at, w.received_at FROM webhook_inbox w
             WHERE w.status = 'pending' AND w.next_attempt_at <= now()
               AND (w.ordering_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM webhook_inbox p
                     WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                       AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
                       AND (p.status = 'pending' OR webhook_inbox_route_strict(w.event_type))))
             ORDER BY w.next_attempt_at, w.received_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) c;
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
    'Sidecar v4: claim up to p_limit due events (FOR UPDATE SKIP LOCKED; a keyed event only when no earlier event of its key must run first), run each handler, record done/quarantined/retry (charged, with backoff)/waiting and an attempt_log entry in the same transaction; one row per event; latency from requeued_at or received_at. v17: the batch runs in one subtransaction; when a handler raises, it is rolled back and redone with each handler in its own savepoint and the raising one not run again (only the failing event rolls back). v19: a run of consecutive events whose route names a batch handler is one call of it; when it raises, the batch is redone with the row handlers. Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';
