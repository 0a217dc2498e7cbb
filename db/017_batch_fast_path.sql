-- 017_batch_fast_path.sql - schema version 17: the batched dispatch without a subtransaction
-- per event. Measured (bench/sidecar, pg_stat_statements with nested statements): of ~250 us
-- of backend time per event in a batch of 100, the orders handler's own statements were ~100;
-- the rest was the per-event machinery around it: a savepoint (subtransaction) per handler,
-- the SQL route's once-marker probe (a sha256 and an index probe per event), the Ruby
-- handler and pause rule look-ups, the webhook_inbox_run_event call. 100 subtransactions that
-- write also overflow the 64-entry subxid cache of the backend's PGPROC, so every snapshot
-- taken meanwhile on any backend is suboverflowed.
--
-- Now a batch runs optimistically: the claim (unchanged, db/014) at the top level, then every
-- event in ONE subtransaction, the plain ones (a SQL route, no Ruby handlers, no route marker,
-- no paused scope or route nor rate-limited route that matches, the row neither held nor
-- holding a slot) with the handler called directly, the others through
-- webhook_inbox_run_event as before. If a handler raises (a failure, a quarantine), that
-- subtransaction is rolled back and the batch run again, each event through
-- webhook_inbox_run_event in its own savepoint (db/015's path, exactly), except that the
-- event whose handler raised is not run again: its error is raised in its place, so it is
-- charged (or quarantined) once per run, as before (its attempt_log duration is then the
-- stand-in's). Only that event rolls back; the events claimed before it in the batch ran once
-- more, their first run rolled back (a handler's writes commit once; only what a rollback
-- does not undo, a nextval(), sees two runs). The routes, Ruby handlers, route markers and
-- the pause and rate rules are read once per batch (a pause committed during a batch holds
-- from the next batch, as it would had it committed a moment later). The rows are returned
-- after the batch, so a redo returns each event once. A batch of one event (--batch-size 1)
-- keeps 014's path (one savepoint; the reads once per batch would cost it more than they
-- save). The batch's done events are marked by one static UPDATE at its end (keys, outcomes
-- and durations from the batch's arrays, by primary key; the same attempt_log entry as 014's),
-- whose plan PL/pgSQL caches for the session: 014's EXECUTE planned it at every batch (2-4 us
-- per event of a batch of 100). The loop does per plain event only what must be per event
-- (its start time, the two settings, the handler call, its outcome); results, durations and
-- latencies are filled set-based around it. Idempotent: safe to re-run. Applied
-- after 001..015 (and 016).
--
-- Redefines: webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint)
-- (014's; same arguments, rows and results). New: webhook_inbox_batch_failure(webhook_inbox).
-- Additive: webhook_inbox_schema_min_worker() stays 4. Citus runs
-- webhook_inbox_citus_dispatch_batch (db/citus/001), which calls webhook_inbox_dispatch per
-- event and is not changed.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 17 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- The handler that stands in, in the redo, for the one that raised in the batch's first run:
-- raises that error again (SQLSTATE and message from transaction-local settings), so
-- webhook_inbox_run_event records it (retry with backoff, or quarantined for WIQ01) without
-- running the handler a second time.
CREATE OR REPLACE FUNCTION webhook_inbox_batch_failure(ev webhook_inbox) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = current_setting('webhook_inbox.batch_error_state'),
                          MESSAGE = current_setting('webhook_inbox.batch_error_text');
END
$$;
COMMENT ON FUNCTION webhook_inbox_batch_failure(webhook_inbox) IS
    'webhook_inbox_dispatch_batch only: raises again the error a handler raised in the batch''s first run (its SQLSTATE and message).';

CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_batch(
        p_limit integer, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    evs      webhook_inbox[];
    ev       webhook_inbox;
    n        integer;
    types    text[];           -- the batch's event types, each once
    handlers regproc[];        -- their routes (NULL: none)
    plain    boolean[];        -- per type: SQL route, no Ruby handlers
    calls    text[];           -- per type: the statement that calls its route
    k        integer[];        -- per event: its type's index in types
    fast     boolean[];        -- per event: its handler called directly (the plain path)
    running  integer;          -- the event whose handler runs now in the one subtransaction
    failed   integer;          -- the event whose handler raised there
    err_state text;
    err_text text;
    outcome  text;
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
    evs := ARRAY(
        SELECT w FROM webhook_inbox w
         WHERE w.status = 'pending' AND w.next_attempt_at <= now()
           AND (w.ordering_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM webhook_inbox p
                 WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                   AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
                   AND (p.status = 'pending' OR webhook_inbox_route_strict(w.event_type))))
         ORDER BY w.next_attempt_at, w.received_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED);
    n := cardinality(evs);
    IF n = 0 THEN
        RETURN;
    END IF;
    scopes := ARRAY(SELECT e.source_scope FROM unnest(evs) e);
    ids := ARRAY(SELECT e.event_id FROM unnest(evs) e);
    -- webhook_inbox_run_event's checks, which the plain path does not call.
    IF p_unrouted IS NULL OR p_unrouted NOT IN ('wait', 'ignore', 'quarantine', 'retry') THEN
        RAISE EXCEPTION 'webhook_inbox: p_unrouted must be wait, ignore, quarantine or retry, not %', p_unrouted
              USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 OR p_backoff_base_ms IS NULL OR p_backoff_cap_ms IS NULL
       OR p_unrouted_delay_ms IS NULL OR p_unrouted_delay_ms < 0 THEN
        RAISE EXCEPTION 'webhook_inbox: p_max_attempts must be >= 1, backoff and unrouted delay non-NULL and >= 0'
              USING ERRCODE = '22023';
    END IF;
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
        -- Once per batch: each type's route and Ruby handlers, the route markers, the pause and
        -- rate rules (015's gate): fast[i] when event i's route is SQL, it has no Ruby handlers,
        -- no once-marker (db/009), and no paused scope, paused route or rate-limited route
        -- matches it, nor does it hold a slot or was it held. The others go through
        -- webhook_inbox_run_event.
        types := ARRAY(SELECT DISTINCT e.event_type FROM unnest(evs) e);
        handlers := ARRAY(SELECT webhook_inbox_route(t) FROM unnest(types) t);
        calls := ARRAY(SELECT format('SELECT %s($1)', h) FROM unnest(handlers) h);
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
            FOR i IN 1 .. n LOOP
                ts[i] := clock_timestamp();
                running := i;
                IF fast[i] THEN
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
                failed := running;
                GET STACKED DIAGNOSTICS err_state = RETURNED_SQLSTATE, err_text = MESSAGE_TEXT;
        END;
        IF failed IS NOT NULL THEN
            -- A handler raised: everything above rolled back. Each event again in its own
            -- savepoint (webhook_inbox_run_event); the one that raised is not run again: its error
            -- is raised in its place (webhook_inbox_batch_failure), so it is recorded as it was.
            PERFORM set_config('webhook_inbox.batch_error_state', err_state, true),
                    set_config('webhook_inbox.batch_error_text', err_text, true);
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
    -- The done marks: one static statement for the batch (its plan cached for the session, not
    -- planned per batch as an EXECUTE was; by primary key per row), the attempt_log entry's
    -- duration from ts.
    IF 'done' = ANY (r_result) THEN
        UPDATE webhook_inbox w
           SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL,
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', d.outcome, d.ms))
          FROM (SELECT e.source_scope, e.event_id, e.outcome,
                       (extract(epoch FROM e.t1 - e.t0) * 1000)::float8 AS ms
                  FROM unnest(scopes, ids, r_detail, r_result, ts[1:n], ts[2:n + 1]) AS e(source_scope, event_id, outcome, result, t0, t1)
                 WHERE e.result = 'done') d
         WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id;
    END IF;
    RETURN QUERY
        SELECT x.source_scope, x.event_id, x.event_type, r_result[x.ordinality::int], r_detail[x.ordinality::int],
               x.attempts, (extract(epoch FROM ts[x.ordinality::int] - coalesce(x.requeued_at, x.received_at)) * 1000)::float8,
               r_charge[x.ordinality::int], r_retry[x.ordinality::int]
          FROM unnest(evs) WITH ORDINALITY AS x;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: claim up to p_limit due events (FOR UPDATE SKIP LOCKED; a keyed event only when no earlier event of its key must run first), run each handler, record done/quarantined/retry (charged, with backoff)/waiting and an attempt_log entry in the same transaction; one row per event; latency from requeued_at or received_at. v17: the batch runs in one subtransaction; when a handler raises, it is rolled back and redone with each handler in its own savepoint and the raising one not run again (only the failing event rolls back). Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';
