-- functions/claim_dispatch.sql - routing, the claim and the dispatch of SQL handlers, failures and their backoff.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Called by a handler to fail the event permanently: the sidecar marks it quarantined with the reason.
CREATE OR REPLACE FUNCTION webhook_inbox_quarantine(reason text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'WIQ01', MESSAGE = coalesce(reason, 'quarantined by handler');
END
$$;
COMMENT ON FUNCTION webhook_inbox_quarantine(text) IS
    'Raise SQLSTATE WIQ01: the sidecar quarantines the event with this reason instead of retrying it.';

-- Runs one handler on one claimed event and says what should happen to the event; changes
-- nothing in webhook_inbox itself. The handler runs inside BEGIN ... EXCEPTION, which is a
-- savepoint: a failing handler's business work is rolled back alone, the caller's
-- transaction (and the other events of its batch) stays usable. The handler is called
-- through its regproc, which PostgreSQL prints as a quoted (and, if needed,
-- schema-qualified) identifier, so no value is ever spliced into SQL text.
--   result 'done'        -> detail = the handler's outcome ('ignored: no route' when unrouted + ignore)
--   result 'quarantined' -> handler raised WIQ01 (or unrouted + quarantine), detail = reason
--   result 'retry'       -> transient failure, detail = 'SQLSTATE: message' (or unrouted + retry)
-- p_handler NULL means unrouted; p_unrouted is 'ignore', 'quarantine' or 'retry'.
CREATE OR REPLACE FUNCTION webhook_inbox_run_handler(
        ev webhook_inbox, p_handler regproc, p_unrouted text, OUT result text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    outcome text;
BEGIN
    IF p_handler IS NULL THEN
        IF p_unrouted = 'quarantine' THEN
            result := 'quarantined';
            detail := 'no route for event type';
        ELSIF p_unrouted = 'retry' THEN
            result := 'retry';
            detail := 'no route for event type';
        ELSE
            result := 'done';
            detail := 'ignored: no route';
        END IF;
        RETURN;
    END IF;
    BEGIN
        EXECUTE format('SELECT %s($1)', p_handler) INTO outcome USING ev;
        result := 'done';
        detail := coalesce(outcome, 'done');
    EXCEPTION
        WHEN SQLSTATE 'WIQ01' THEN
            result := 'quarantined';
            detail := SQLERRM;
        WHEN OTHERS THEN
            result := 'retry';
            detail := SQLSTATE || ': ' || SQLERRM;
    END;
END
$$;
COMMENT ON FUNCTION webhook_inbox_run_handler(webhook_inbox, regproc, text) IS
    'Sidecar: run one handler in a subtransaction (savepoint); returns done/quarantined/retry and the outcome, reason or error. Changes no inbox row.';

-- One claimed event, by key (the sidecar's one-statement-per-event path): lock, route, run,
-- mark done or quarantined. 'retry' leaves the row untouched for the caller to record;
-- 'skipped' when the row is no longer pending.
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch(
        p_scope text, p_event_id text, p_unrouted text DEFAULT 'ignore',
        OUT result text, OUT detail text, OUT event_type text, OUT attempts integer,
        OUT latency_ms double precision)
LANGUAGE plpgsql AS $$
DECLARE
    ev webhook_inbox;
BEGIN
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = p_scope AND w.event_id = p_event_id AND w.status = 'pending'
       FOR UPDATE;
    IF NOT FOUND THEN
        result := 'skipped';
        RETURN;
    END IF;
    event_type := ev.event_type;
    attempts := ev.attempts;
    latency_ms := extract(epoch FROM clock_timestamp() - ev.received_at) * 1000;
    SELECT h.result, h.detail INTO result, detail
      FROM webhook_inbox_run_handler(ev, webhook_inbox_route(ev.event_type), p_unrouted) h;
    IF result = 'done' THEN
        UPDATE webhook_inbox w
           SET status = 'done', outcome = detail, processed_at = clock_timestamp(), last_error = NULL
         WHERE w.source_scope = p_scope AND w.event_id = p_event_id;
    ELSIF result = 'quarantined' THEN
        UPDATE webhook_inbox w
           SET status = 'quarantined', last_error = detail, processed_at = clock_timestamp()
         WHERE w.source_scope = p_scope AND w.event_id = p_event_id;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch(text, text, text) IS
    'Sidecar: route and run the handler of one claimed pending event in a subtransaction, mark it done or quarantined; ''retry'' leaves the row untouched for the caller to record.';

-- processed_at is clock_timestamp(), not now(): now() is when the batch's transaction began,
-- which would hide the handlers' run time from the receipt-to-done latency in stats.

-- The sidecar's batch (its usual path, also for --batch-size 1): claim up to p_limit due
-- pending rows with FOR UPDATE SKIP LOCKED, oldest due first, run each one's handler in
-- its own subtransaction, and mark them done / quarantined in the caller's transaction
-- (done rows with one UPDATE at the end). Returns one row per claimed event; 'retry'
-- rows are left untouched for the caller to record after COMMIT.
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_batch(p_limit integer, p_unrouted text DEFAULT 'ignore')
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision)
LANGUAGE plpgsql AS $$
DECLARE
    ev         webhook_inbox;
    handler    regproc;
    routed     text;           -- event type whose route is in handler (batches are often one type)
    done_scope text[] := '{}';
    done_id    text[] := '{}';
    done_what  text[] := '{}';
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
        latency_ms := extract(epoch FROM clock_timestamp() - ev.received_at) * 1000;
        IF routed IS DISTINCT FROM ev.event_type THEN
            handler := webhook_inbox_route(ev.event_type);
            routed := ev.event_type;
        END IF;
        SELECT h.result, h.detail INTO result, detail FROM webhook_inbox_run_handler(ev, handler, p_unrouted) h;
        IF result = 'done' THEN
            done_scope := done_scope || ev.source_scope;
            done_id := done_id || ev.event_id;
            done_what := done_what || detail;
        ELSIF result = 'quarantined' THEN
            UPDATE webhook_inbox w
               SET status = 'quarantined', last_error = detail, processed_at = clock_timestamp()
             WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
        END IF;
        RETURN NEXT;
    END LOOP;
    UPDATE webhook_inbox w
       SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL
      FROM unnest(done_scope, done_id, done_what) AS d(scope, id, outcome)
     WHERE w.source_scope = d.scope AND w.event_id = d.id;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_batch(integer, text) IS
    'Sidecar: claim up to p_limit due events (FOR UPDATE SKIP LOCKED), run each handler in its own subtransaction, mark done/quarantined; one row per event, ''retry'' rows left for the caller.';

-- Transient failure bookkeeping, run by the sidecar in its own transaction after the
-- business work was rolled back. Applies only if nobody moved the row meanwhile
-- (still pending with the attempts the worker saw). Quarantines at p_max_attempts.
CREATE OR REPLACE FUNCTION webhook_inbox_record_failure(
        p_scope text, p_event_id text, p_seen_attempts integer, p_delay_ms bigint,
        p_error text, p_max_attempts integer) RETURNS text
LANGUAGE sql AS $$
    UPDATE webhook_inbox w
       SET attempts = w.attempts + 1,
           last_error = left(p_error, 1000),
           next_attempt_at = now() + p_delay_ms * interval '1 millisecond',
           status = CASE WHEN w.attempts + 1 >= p_max_attempts THEN 'quarantined' ELSE 'pending' END,
           processed_at = CASE WHEN w.attempts + 1 >= p_max_attempts THEN now() END
     WHERE w.source_scope = p_scope AND w.event_id = p_event_id
       AND w.status = 'pending' AND w.attempts = p_seen_attempts
    RETURNING w.status
$$;
COMMENT ON FUNCTION webhook_inbox_record_failure(text, text, integer, bigint, text, integer) IS
    'Sidecar: attempts+1, backoff and last_error after a transient failure; quarantined at the maximum. Returns the new status, NULL if the row moved meanwhile.';

-- The ignore route: route event types to it on purpose, and they become done with outcome
-- 'ignored'. With no route at all an event waits (pending) instead.
--   INSERT INTO webhook_inbox_routes VALUES ('customer.*', 'webhook_inbox_ignore');
CREATE OR REPLACE FUNCTION webhook_inbox_ignore(ev webhook_inbox) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT 'ignored'::text $$;
COMMENT ON FUNCTION webhook_inbox_ignore(webhook_inbox) IS
    'A handler that does nothing and returns ''ignored'': route event types to it to ignore them explicitly (unrouted types wait for a route by default).';

-- Backoff after p_failures earlier transient failures (0 for the first): d = min(cap,
-- base * 2^p_failures), then "equal jitter", uniform in [d/2, d]. Milliseconds.
CREATE OR REPLACE FUNCTION webhook_inbox_retry_delay_ms(p_failures integer, p_base_ms bigint, p_cap_ms bigint)
RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT (s.d / 2 + random() * s.d / 2)::bigint
      FROM (SELECT least(greatest(p_cap_ms, 0)::float8,
                         greatest(p_base_ms, 0) * power(2::float8, least(greatest(p_failures, 0), 62))) AS d) s
$$;
COMMENT ON FUNCTION webhook_inbox_retry_delay_ms(integer, bigint, bigint) IS
    'Retry delay in ms after p_failures earlier failures: d = min(cap, base * 2^p_failures), uniform in [d/2, d] (equal jitter).';

-- webhook_inbox_charge_failure() with the run's duration for the log (NULL when unknown).
-- The v4 signature below calls it with NULL: a sidecar calls that one on its own only when
-- the run's transaction was lost, so the run's duration is not known.
-- The outcome and its time are variables: Citus refuses a non-IMMUTABLE function (its
-- STABLE clock, db/citus/001) inside a CASE of an UPDATE; the row's attempts are known
-- (p_seen_attempts, in the WHERE), so the new status is known before the UPDATE.
CREATE OR REPLACE FUNCTION webhook_inbox_charge_attempt(
        p_scope text, p_event_id text, p_seen_attempts integer, p_error text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_duration_ms double precision,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    delay_ms bigint := webhook_inbox_retry_delay_ms(p_seen_attempts, p_backoff_base_ms, p_backoff_cap_ms);
    v_last    boolean := p_seen_attempts + 1 >= p_max_attempts;
    v_at      timestamptz := clock_timestamp();
    v_outcome text := CASE WHEN v_last THEN 'quarantined' ELSE 'retry' END;
BEGIN
    UPDATE webhook_inbox w
       SET attempts = w.attempts + 1,
           last_error = left(p_error, 1000),
           next_attempt_at = v_at + delay_ms * interval '1 millisecond',
           status = CASE WHEN v_last THEN 'quarantined' ELSE 'pending' END,
           processed_at = CASE WHEN v_last THEN v_at END,
           attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry(v_outcome, p_error, p_duration_ms))
     WHERE w.source_scope = p_scope AND w.event_id = p_event_id
       AND w.status = 'pending' AND w.attempts = p_seen_attempts
    RETURNING w.status, w.attempts INTO new_status, new_attempts;
    IF new_status = 'pending' THEN
        retry_in_ms := delay_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_charge_attempt(text, text, integer, text, integer, bigint, bigint, double precision) IS
    'webhook_inbox_charge_failure plus an attempt_log entry (retry, or quarantined at the last attempt) with the run''s duration in ms (NULL: unknown).';

CREATE OR REPLACE FUNCTION webhook_inbox_charge_failure(
        p_scope text, p_event_id text, p_seen_attempts integer, p_error text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE sql AS $$
    SELECT c.new_status, c.new_attempts, c.retry_in_ms
      FROM webhook_inbox_charge_attempt(p_scope, p_event_id, p_seen_attempts, p_error, p_max_attempts,
                                        p_backoff_base_ms, p_backoff_cap_ms, NULL) c
$$;
COMMENT ON FUNCTION webhook_inbox_charge_failure(text, text, integer, text, integer, bigint, bigint) IS
    'Charge one transient failure (attempts+1, backoff from webhook_inbox_retry_delay_ms, last_error, an attempt_log entry without duration; quarantined at p_max_attempts) if the row is still pending with p_seen_attempts; returns the new status and attempts, and the delay when still pending; NULLs if the row moved.';

CREATE OR REPLACE FUNCTION webhook_inbox_dispatch(
        p_scope text, p_event_id text, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        OUT result text, OUT detail text, OUT event_type text, OUT attempts integer,
        OUT latency_ms double precision, OUT charged boolean, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    ev webhook_inbox;
    t0 timestamptz;
BEGIN
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = p_scope AND w.event_id = p_event_id AND w.status = 'pending'
       FOR UPDATE;
    IF NOT FOUND THEN
        result := 'skipped';
        charged := false;
        RETURN;
    END IF;
    event_type := ev.event_type;
    attempts := ev.attempts;
    t0 := clock_timestamp();
    latency_ms := extract(epoch FROM t0 - coalesce(ev.requeued_at, ev.received_at)) * 1000;
    SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO result, detail, charged, retry_in_ms
      FROM webhook_inbox_run_event(ev, webhook_inbox_route_here(ev.event_type), p_unrouted, p_max_attempts,
                                   p_backoff_base_ms, p_backoff_cap_ms, p_unrouted_delay_ms) r;
    IF result = 'done' THEN
        UPDATE webhook_inbox w
           SET status = 'done', outcome = detail, processed_at = clock_timestamp(), last_error = NULL,
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', detail,
                   extract(epoch FROM clock_timestamp() - t0) * 1000))
         WHERE w.source_scope = p_scope AND w.event_id = p_event_id;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch(text, text, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: route and run one pending event''s handler in a subtransaction and record the result (done/quarantined/retry charged/waiting, with an attempt_log entry) in the caller''s transaction; ''skipped'' if no longer pending.';

-- Same signature and results as 004's body; also tells webhook_inbox_emit() which event is
-- being handled (transaction-local settings, cleared after the handler; a failing handler's
-- savepoint rollback restores them).
CREATE OR REPLACE FUNCTION webhook_inbox_run_handler(
        ev webhook_inbox, p_handler regproc, OUT result text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    outcome text;
BEGIN
    PERFORM set_config('webhook_inbox.source_scope', ev.source_scope, true),
            set_config('webhook_inbox.source_event_id', ev.event_id, true),
            set_config('webhook_inbox.trace_context', coalesce(webhook_inbox_handle_trace_context(
                ev.trace_context, ev.source_scope, ev.event_id, ev.attempts), ''), true); -- v30
    EXECUTE format('SELECT %s($1)', p_handler) INTO outcome USING ev;
    PERFORM set_config('webhook_inbox.source_scope', '', true),
            set_config('webhook_inbox.source_event_id', '', true),
            set_config('webhook_inbox.trace_context', '', true);
    result := 'done';
    detail := coalesce(outcome, 'done');
EXCEPTION
    WHEN SQLSTATE 'WIQ01' THEN
        result := 'quarantined';
        detail := SQLERRM;
    WHEN OTHERS THEN
        result := 'retry';
        detail := SQLSTATE || ': ' || SQLERRM;
END
$$;
COMMENT ON FUNCTION webhook_inbox_run_handler(webhook_inbox, regproc) IS
    'Sidecar v4: run one handler in a subtransaction (savepoint); returns done/quarantined/retry with the outcome, reason or error. Changes no inbox row. (v6: webhook_inbox_emit() inside the handler records this event as the effect''s source.)';

-- The route an event type takes, whole: exact match first, else the longest 'prefix*'
-- pattern, '*' last. The one definition of matching: webhook_inbox_route() (003's, with the
-- same result) and webhook_inbox_route_destination() read its columns.
-- PL/pgSQL, so its query is planned once per session: as a SQL function (not inlinable: it
-- returns a row from a query) it was planned again at every statement that called it, about
-- 70 us per dispatched batch (bench/pipeline --statements). No route: every column NULL.
CREATE OR REPLACE FUNCTION webhook_inbox_route_match(p_event_type text) RETURNS webhook_inbox_routes
LANGUAGE plpgsql STABLE AS $$
DECLARE
    m webhook_inbox_routes;
BEGIN
    SELECT r.* INTO m
      FROM webhook_inbox_routes r
     WHERE r.event_type = p_event_type
        OR (right(r.event_type, 1) = '*'
            AND starts_with(p_event_type, left(r.event_type, -1)))
     ORDER BY (r.event_type = p_event_type) DESC, length(r.event_type) DESC
     LIMIT 1;
    RETURN m;
END
$$;
COMMENT ON FUNCTION webhook_inbox_route_match(text) IS
    'The routes row an event type takes: exact match, else the longest matching ''prefix*'' pattern (''*'' matches all); NULL when unrouted.';

-- Whether this session has prepared p_name through webhook_inbox_prepare_once below, as a
-- setting of the session remembers it (webhook_inbox_prepared.<name>, 'on'): read in about a
-- microsecond, where pg_prepared_statements materializes every prepared statement of the
-- session at each read (6-20 us, more as they accumulate; a Citus worker's batch asked it six
-- times, issue 30). A SQL function of no table, inlined: the callers test it before calling
-- webhook_inbox_prepare_once, whose call Citus would plan again each time (a distributed
-- function's call with parameters, db/citus/001's webhook_inbox_citus_dispatch_shard). Not under
-- webhook_inbox.*: citus/005 would take the word for a read of the distributed table.
CREATE OR REPLACE FUNCTION webhook_inbox_prepared(p_name text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('webhook_inbox_prepared.' || p_name, true) = 'on', false)
$$;
COMMENT ON FUNCTION webhook_inbox_prepared(text) IS
    'Whether webhook_inbox_prepare_once prepared p_name in this session (the setting webhook_inbox_prepared.<p_name>).';

-- PREPARE p_name(p_types) AS p_query in this session unless a statement of that name is
-- prepared already (prepared statements live until the session ends; the callers name each
-- after the OIDs it reads; p_types NULL: no parameters), and remember it
-- (webhook_inbox_prepared). VOLATILE: PREPARE is refused in a STABLE function. A setting is
-- undone by a rollback, a PREPARE is not: a name the setting does not hold is looked up in
-- pg_prepared_statements, once. DISCARD ALL drops both; a DEALLOCATE of one (no gem code runs
-- one) leaves the setting, and that statement's EXECUTE fails until the session ends.
CREATE OR REPLACE FUNCTION webhook_inbox_prepare_once(p_name text, p_types text, p_query text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT webhook_inbox_prepared(p_name) THEN
        IF NOT EXISTS (SELECT 1 FROM pg_prepared_statements p WHERE p.name = p_name) THEN
            EXECUTE format('PREPARE %I%s AS %s', p_name, '(' || p_types || ')', p_query);
        END IF;
        PERFORM set_config('webhook_inbox_prepared.' || p_name, 'on', false);
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_prepare_once(text, text, text) IS
    'PREPAREs p_name(p_types) AS p_query in this session unless p_name is prepared already, and remembers it (webhook_inbox_prepared); p_types NULL: no parameters.';

-- The same match read from p_routes, a table of the routes' columns (Citus: this node's copy of
-- the reference table, its local shard, read as a plain table: through Citus the read was
-- planned again at every call), prepared once per session; NULL: webhook_inbox_routes above.
-- The query is the one above with the table named (keep the two alike).
CREATE OR REPLACE FUNCTION webhook_inbox_route_match_from(p_event_type text, p_routes regclass) RETURNS webhook_inbox_routes
LANGUAGE plpgsql VOLATILE AS $$ -- VOLATILE: PREPARE is refused in a STABLE function
DECLARE
    m    webhook_inbox_routes;
    stmt text := 'webhook_inbox_route_match_' || p_routes::oid;
BEGIN
    IF p_routes IS NULL THEN
        RETURN webhook_inbox_route_match(p_event_type);
    END IF;
    IF NOT webhook_inbox_prepared(stmt) THEN
        PERFORM webhook_inbox_prepare_once(stmt, 'text', format($q$
            SELECT r.* FROM %s r
             WHERE r.event_type = $1
                OR (right(r.event_type, 1) = '*'
                    AND starts_with($1, left(r.event_type, -1)))
             ORDER BY (r.event_type = $1) DESC, length(r.event_type) DESC
             LIMIT 1
            $q$, p_routes));
    END IF;
    EXECUTE format('EXECUTE %I(%L)', stmt, p_event_type) INTO m; -- EXECUTE takes no $n
    RETURN m;
END
$$;
COMMENT ON FUNCTION webhook_inbox_route_match_from(text, regclass) IS
    'webhook_inbox_route_match(text) read from p_routes (Citus: the local shard of the routes), prepared once per session; NULL reads webhook_inbox_routes.';

-- A route's handler by its name (db/029), on the node that asks: never by the stored regproc,
-- an OID that a node whose functions Citus created again, or a node added, does not share.
-- When the name resolves to nothing here (not propagated to this node yet, dropped, or
-- overloaded: a route names one function), raises WIH01: for webhook_inbox_route() and
-- webhook_inbox_route_batch_handler(), the lookups and the older (pre-v4) dispatch entry points.
-- The sidecar's dispatch does not raise: webhook_inbox_route_here and webhook_inbox_run_event
-- make the missing handler's events wait, uncharged (sidecar/src/claim/worker.c logs it).
CREATE OR REPLACE FUNCTION webhook_inbox_route_missing(p_name text, p_event_type text) RETURNS regproc
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'WIH01',
          MESSAGE = format('webhook_inbox: the handler %s of the route for %s does not exist on this node (%s), or names several functions',
                           p_name, p_event_type, coalesce(host(inet_server_addr()) || ':' || inet_server_port(), 'local socket')),
          HINT = 'Create it on this node (Citus: SELECT create_distributed_function(''name(args)'') on the coordinator, or migrate --citus); its events wait, uncharged.';
END
$$;
COMMENT ON FUNCTION webhook_inbox_route_missing(text, text) IS
    'Raises WIH01: a route''s handler (or batch handler) p_name, taken by p_event_type, resolves to no single function on this node (webhook_inbox_route_proc).';

-- SQL, inlined where it is called: the PL/pgSQL raise above only when the name resolves to nothing.
CREATE OR REPLACE FUNCTION webhook_inbox_route_proc(p_name text, p_event_type text) RETURNS regproc
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_name IS NOT NULL THEN coalesce(to_regproc(p_name), webhook_inbox_route_missing(p_name, p_event_type)) END
$$;
COMMENT ON FUNCTION webhook_inbox_route_proc(text, text) IS
    'A route''s handler (or batch handler) by its name on this node, NULL for NULL; raises WIH01 when the name resolves to no single function here (webhook_inbox_route(), webhook_inbox_route_batch_handler(); the v4 dispatch resolves with webhook_inbox_route_here instead).';

CREATE OR REPLACE FUNCTION webhook_inbox_route(p_event_type text) RETURNS regproc
LANGUAGE sql STABLE AS $$ SELECT webhook_inbox_route_proc((webhook_inbox_route_match(p_event_type)).handler_name, p_event_type) $$;
COMMENT ON FUNCTION webhook_inbox_route(text) IS
    'The handler for an event type (webhook_inbox_route_match''s), resolved by name on this node (v29; WIH01 when missing here); NULL when unrouted.';

-- The dispatch's resolution (v29): the route's handler by name on this node, NULL when the
-- type is unrouted or the function is missing here; webhook_inbox_run_event tells the two apart
-- (a missing one waits, uncharged). Never raises: one missing function holds only its own events.
CREATE OR REPLACE FUNCTION webhook_inbox_route_here(p_event_type text) RETURNS regproc
LANGUAGE sql STABLE AS $$ SELECT to_regproc((webhook_inbox_route_match(p_event_type)).handler_name) $$;
COMMENT ON FUNCTION webhook_inbox_route_here(text) IS
    'The handler for an event type resolved by name on this node, NULL when unrouted or when the function is missing (or overloaded) here; the v4 dispatch''s resolution (webhook_inbox_run_event makes a missing one''s events wait).';

-- v29's first cut: the Citus dispatch raised WIH01 for a batch holding a type whose handler was
-- missing, which held every other type behind it; the dispatch now resolves with
-- webhook_inbox_route_here (the missing type's events wait, the others run).
DROP FUNCTION IF EXISTS webhook_inbox_route_check(text[]);

CREATE OR REPLACE FUNCTION webhook_inbox_route_destination(p_event_type text) RETURNS text
LANGUAGE sql STABLE AS $$ SELECT (webhook_inbox_route_match(p_event_type)).destination $$;
COMMENT ON FUNCTION webhook_inbox_route_destination(text) IS
    'The destination named by the route an event type takes (webhook_inbox_route_match''s), or NULL.';

-- Types with Ruby handlers are routed even without a SQL route. PL/pgSQL: Citus cannot plan
-- a SQL function's query over a distributed table.
CREATE OR REPLACE FUNCTION webhook_inbox_unrouted(OUT event_type text, OUT pending bigint)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT t.event_type, t.n
      FROM (SELECT w.event_type, count(*) AS n FROM webhook_inbox w
             WHERE w.status = 'pending' GROUP BY w.event_type) t
     WHERE (webhook_inbox_route_match(t.event_type)).event_type IS NULL AND webhook_inbox_ruby_handlers_for(t.event_type) IS NULL
     ORDER BY t.n DESC, t.event_type;
END
$$;
COMMENT ON FUNCTION webhook_inbox_unrouted() IS
    'Pending events whose event type has neither a route nor a Ruby handler, counted by type (what `webhook-inbox-sidecar stats` reports as waiting_for_route).';

-- The dispatch's arguments (webhook_inbox_run_event's, webhook_inbox_dispatch_batch's): fails
-- with SQLSTATE 22023 naming the bad one, returns nothing otherwise. One PL/pgSQL call per
-- run_event call and per batch; the claim and the plain path's events call nothing here.
-- webhook_inbox_check_choice only for a bad policy, to raise its message: a call of it per
-- batch was planned again at each call on a Citus worker (a distributed function's call with
-- parameters, db/citus/001's webhook_inbox_citus_dispatch_shard).
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_check(
        p_unrouted text, p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        p_unrouted_delay_ms bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_unrouted IS NULL OR p_unrouted NOT IN ('wait', 'ignore', 'quarantine', 'retry') THEN
        PERFORM webhook_inbox_check_choice('webhook_inbox', 'p_unrouted', p_unrouted, 'wait', 'ignore', 'quarantine', 'retry');
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 OR p_backoff_base_ms IS NULL OR p_backoff_cap_ms IS NULL
       OR p_unrouted_delay_ms IS NULL OR p_unrouted_delay_ms < 0 THEN
        RAISE EXCEPTION 'webhook_inbox: p_max_attempts must be >= 1, backoff and unrouted delay non-NULL and >= 0'
              USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_check(text, integer, bigint, bigint, bigint) IS
    'Sidecar: the checks of webhook_inbox_run_event''s and webhook_inbox_dispatch_batch''s arguments (unrouted policy, max attempts, backoff, unrouted delay); raises 22023.';

-- As in 009, plus the gate first: 'paused' and 'throttled' leave the row pending, uncharged
-- (charged false, retry_in_ms: when a throttled row is due). With no rule at all the gate
-- costs one scan of an empty table.
CREATE OR REPLACE FUNCTION webhook_inbox_run_event(
        ev webhook_inbox, p_handler regproc, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        OUT result text, OUT detail text, OUT charged boolean, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    st   text;
    t0   timestamptz := clock_timestamp();
    ms   double precision;
    ruby text[];
    missing text;              -- the name of the event's route's handler when it is missing on this node
BEGIN
    PERFORM webhook_inbox_dispatch_check(p_unrouted, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms,
                                         p_unrouted_delay_ms);
    charged := false;
    IF EXISTS (SELECT 1 FROM webhook_inbox_flow) OR ev.held_at IS NOT NULL OR ev.rate_slot_at IS NOT NULL THEN
        SELECT g.result, g.detail, g.retry_in_ms INTO result, detail, retry_in_ms FROM webhook_inbox_flow_gate(ev) g;
        IF result IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    -- v29: the callers resolve the handler by name on this node (webhook_inbox_route_here);
    -- NULL with a route that names one: missing here. Its events wait as unrouted ones do
    -- under 'wait' (whatever p_unrouted says), uncharged; the others of the batch run.
    IF p_handler IS NULL THEN
        missing := (webhook_inbox_route_match(ev.event_type)).handler_name;
    END IF;
    ruby := CASE WHEN missing IS NULL THEN webhook_inbox_ruby_handlers_for(ev.event_type) END;
    IF ruby IS NOT NULL THEN
        SELECT r.result, r.detail INTO result, detail FROM webhook_inbox_run_ruby(ev, p_handler, ruby) r;
    ELSIF p_handler IS NULL THEN
        detail := CASE WHEN missing IS NOT NULL
                       THEN format('handler missing on this node: %s (%s)', missing,
                                   coalesce(host(inet_server_addr()) || ':' || inet_server_port(), 'local socket'))
                       ELSE 'no route for event type' END;
        IF p_unrouted = 'wait' OR missing IS NOT NULL THEN
            result := 'waiting';
            retry_in_ms := p_unrouted_delay_ms;
            UPDATE webhook_inbox w
               SET last_error = detail,
                   next_attempt_at = clock_timestamp() + p_unrouted_delay_ms * interval '1 millisecond',
                   attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('waiting', detail, 0))
             WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
            RETURN;
        ELSIF p_unrouted = 'ignore' THEN
            result := 'done';
            detail := 'ignored: no route';
            RETURN;
        ELSIF p_unrouted = 'quarantine' THEN
            result := 'quarantined';
        ELSE
            result := 'retry';
        END IF;
    ELSIF EXISTS (SELECT 1 FROM webhook_inbox_effects_received r
                   WHERE r.operation_id = webhook_inbox_handler_operation_id(ev.source_scope, ev.event_id, 'sql:' || p_handler::text)) THEN
        -- The route already ran for this event while its type had Ruby handlers (the marker
        -- webhook_inbox_run_ruby wrote): a requeue after the last one was retired does not run it again.
        result := 'done';
        detail := 'SQL route ' || p_handler::text || ' already ran for this event';
        RETURN;
    ELSE
        SELECT h.result, h.detail INTO result, detail FROM webhook_inbox_run_handler(ev, p_handler) h;
    END IF;
    ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
    IF result = 'quarantined' THEN
        UPDATE webhook_inbox w
           SET status = 'quarantined', last_error = detail, processed_at = clock_timestamp(),
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('quarantined', detail, ms))
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
    ELSIF result = 'retry' THEN
        SELECT c.new_status, c.retry_in_ms INTO st, retry_in_ms
          FROM webhook_inbox_charge_attempt(ev.source_scope, ev.event_id, ev.attempts, detail, p_max_attempts,
                                            p_backoff_base_ms, p_backoff_cap_ms, ms) c;
        charged := st IS NOT NULL;
        IF st = 'quarantined' THEN
            result := 'quarantined';
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_run_event(webhook_inbox, regproc, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: run one claimed (locked) event''s handler, its Ruby hand-over (v9: ''handed'' leaves it pending for the Ruby worker) or unrouted policy and record quarantined/retry/waiting on its row (with an attempt_log entry) in the caller''s transaction; ''done'' is left to the caller. v15: a paused route or scope -> ''paused'', over its rate -> ''throttled'' (pending, uncharged). v29: p_handler NULL while the route names a handler (missing on this node) -> ''waiting'' as unrouted under ''wait'', detail ''handler missing on this node: <name> (<node>)'', uncharged.';

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

CREATE OR REPLACE FUNCTION webhook_inbox_route_batch_handler(p_event_type text) RETURNS regproc
LANGUAGE sql STABLE AS $$ SELECT webhook_inbox_route_proc((webhook_inbox_route_match(p_event_type)).batch_handler_name, p_event_type) $$;
COMMENT ON FUNCTION webhook_inbox_route_batch_handler(text) IS
    'The batch handler named by the route an event type takes (webhook_inbox_route_match''s), resolved by name on this node (v29; WIH01 when missing here), or NULL.';

-- Called by a batch handler: "not these, not all at once". Its events go to the row handler.
CREATE OR REPLACE FUNCTION webhook_inbox_batch_defer(reason text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'WIB01', MESSAGE = coalesce(reason, 'deferred to the row handler');
END
$$;
COMMENT ON FUNCTION webhook_inbox_batch_defer(text) IS
    'Raise SQLSTATE WIB01 in a batch handler: its events are run again by the route''s row handler, one by one (no warning).';

-- A backlog under a long-open snapshot (issue 33; bench/backlog, docs/capacity.md).
-- Every processed event leaves its pending row version behind, with its entry in
-- webhook_inbox_claim_idx (the partial index of pending rows: the done UPDATE changes status,
-- so it is never HOT). VACUUM removes them, and an index scan marks their entries dead as it
-- passes, only once no snapshot can see them. While one can (a report, pg_dump, a console left
-- idle in transaction, a replica with hot_standby_feedback, a long writing transaction), the
-- claim, which reads the pending index from its head, walks over every event processed since
-- that snapshot at every batch: bench/backlog measured 200,050 entries walked per claim in a
-- 400,000-event backlog (half of it on average) and 0.22x the drain rate without a snapshot.
--
-- The batch claim (webhook_inbox_claim_due) resumes where this session's last claim ended: a cursor (next_attempt_at,
-- received_at), kept in the session (a custom setting, webhook_inbox.claim_cursor: nothing
-- written, no row versions of its own), and reads from the head of the index only
--   - when the session has no cursor (its first claim, a new connection),
--   - when the claim from the cursor comes up short: then for the rest of the batch, the rows
--     before the cursor (so a batch smaller than its limit still means "nothing else is due",
--     which the sidecar's idle wait relies on) - unless that read costs a millisecond or more
--     and the last one ended less than 9 times its cost ago (webhook_inbox.claim_before): a
--     steady flow's batches all come up short, and under a long-open snapshot each such read
--     walks everything processed since. A claim that puts it off says so in the setting; the
--     idle probe then wakes the worker when it may be read (at most 9 times its cost away),
--     and `run --once` has its last claim read it before it exits. And
--   - when the time since its last read from the head is at least 9 times what that read cost
--     (webhook_inbox.claim_head): at most a tenth of the time goes to walking from the head,
--     and on a healthy table (a read from the head costs what a read from the cursor costs)
--     every claim still reads from the head, as before.
-- The cursor is a hint, never a filter on what may be claimed: every pending row is claimable
-- by a read from the head, which happens at the latest when the cursor's claims come up short
-- or the time above has passed. So rows that appear before the cursor - a receipt with an
-- earlier due time (a keyed event starts at its event time: functions/ordering.sql), one whose transaction
-- committed late, a requeue, a resume, a rolled-back batch - wait at most that long, and only
-- while the cursor is in use (a backlog under a long-open snapshot). A garbage or foreign
-- setting (a pooler sharing sessions) is ignored or costs a read from the head.
-- Where the cursor goes: to the first row in the range this claim covered (from the old
-- cursor, or its first row, to its last row) that is still pending and not claimed here - a
-- keyed row its predecessor or a busy key held back, a row another worker has locked - else
-- to the claim's last row. A row the claim passed over is not left behind the cursor, so
-- per-object ordering's held rows are met again at the next claim, not at the next read from
-- the head. The range walked is that of one or two batches, whatever the backlog's size. A row
-- that has held the cursor for 10 claims in a row (a key behind a quarantined event on a strict
-- route, a key or row some transaction holds for long) no longer does: the cursor moves to the
-- claim's last row and the reads from the head meet that row, so it cannot bring back the walk
-- over everything processed since.
-- Ties in (next_attempt_at, received_at) (one receipt transaction's rows) are read again from
-- the cursor (it is inclusive): a cost of the tie's size, never a skipped row.
-- The idle worker's probe for the next due time (webhook_inbox_next_due) reads from the cursor
-- too: it follows a claim that came up short, which has just read the rows before the cursor
-- or put that read off (then it answers at the latest when that read is allowed).
-- Unchanged: what a claim may take (due, pending, not locked, its key's earlier events done,
-- its key's lock free), the locks, the done marks, exactly once; the Ruby worker's claims, the
-- sidecar's one-event claim (careful mode, sidecar/src/claim/claim.c) and the Citus layout's
-- claims and probe (db/citus, citus.c) read from the head as before.

-- The session's last read of the rows before its cursor for a batch the cursor left short
-- (webhook_inbox.claim_before: 'end_s cost_s skipped'): when it ended, what it cost, and
-- whether a later claim put the next one off (1). Zeros when unset or not ours.
CREATE OR REPLACE FUNCTION webhook_inbox_claim_before(
        OUT before_end double precision, OUT before_cost double precision, OUT skipped boolean)
LANGUAGE plpgsql STABLE AS $$ -- PL/pgSQL: a SQL function of this form is planned at every call
DECLARE
    b text := current_setting('webhook_inbox.claim_before', true);
BEGIN
    IF b ~ '^[0-9]{1,12}(\.[0-9]{1,9})? [0-9]{1,9}(\.[0-9]{1,9})? [01]$' THEN
        before_end := split_part(b, ' ', 1)::double precision;
        before_cost := split_part(b, ' ', 2)::double precision;
        skipped := split_part(b, ' ', 3) = '1';
    ELSE
        before_end := 0;
        before_cost := 0;
        skipped := false;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_claim_before() IS
    'The session''s last read of the rows before its claim cursor (webhook_inbox.claim_before): when it ended, what it cost, and whether a claim since put one off.';

-- Claims up to p_limit due events for the caller's transaction (021's claim: FOR UPDATE SKIP
-- LOCKED, a keyed event only when no earlier event of its key must run first and its key's
-- advisory lock is free), reading from this session's cursor or the head of the pending index
-- as the header says. evs: the rows as locked, tids their row versions (the done UPDATE's TID
-- scan); both NULL when none. Updates the session's cursor settings (rolled back with the
-- transaction, which only makes the next claim read from further back).
-- Its statements' plans are generic, made once per session: with the cursor's bounds as
-- parameters PostgreSQL would otherwise plan them anew at every call (~0.3-0.6 ms a claim);
-- the generic plan is the same index scan of webhook_inbox_claim_idx from the lower bound.
CREATE OR REPLACE FUNCTION webhook_inbox_claim_due(p_limit integer, OUT evs webhook_inbox[], OUT tids tid[])
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    cursor_text text := current_setting('webhook_inbox.claim_cursor', true); -- 'us us held': us since the epoch
    held      integer := 0;     -- claims in a row the cursor stayed on the same pending row
    head_text   text := current_setting('webhook_inbox.claim_head', true);   -- 'end_s cost_s' of the last read from the head
    c_at      timestamptz;      -- the cursor (NULL: none)
    c_rcv     timestamptz;
    head_end  double precision := 0;
    head_cost double precision := 0;
    lo_at     timestamptz;      -- this pass reads keys >= lo and < hi
    lo_rcv    timestamptz;
    hi_at     timestamptz := 'infinity';
    hi_rcv    timestamptz := 'infinity';
    more      webhook_inbox[];
    more_tids tid[];
    k_at      timestamptz;      -- a pass's first and last claimed rows' keys
    k_rcv     timestamptz;
    l_at      timestamptz;
    l_rcv     timestamptz;
    first_at  timestamptz;      -- the first pass's first and last claimed rows' keys
    first_rcv timestamptz;
    last_at   timestamptz;
    last_rcv  timestamptz;
    t0        timestamptz := clock_timestamp();
    from_head boolean;
    n         integer;
    before    record := webhook_inbox_claim_before(); -- the last read before the cursor: before_end, before_cost, skipped
    t1        timestamptz;      -- when this claim's read before the cursor began (NULL: none)
    skipped   boolean := false; -- this claim put that read off
BEGIN
    IF cursor_text ~ '^-?[0-9]{1,17} -?[0-9]{1,17} [0-9]{1,6}$' THEN
        c_at := 'epoch'::timestamptz + split_part(cursor_text, ' ', 1)::bigint * interval '1 microsecond';
        c_rcv := 'epoch'::timestamptz + split_part(cursor_text, ' ', 2)::bigint * interval '1 microsecond';
        held := split_part(cursor_text, ' ', 3)::integer;
    END IF;
    IF head_text ~ '^[0-9]{1,12}(\.[0-9]{1,9})? [0-9]{1,9}(\.[0-9]{1,9})?$' THEN
        head_end := split_part(head_text, ' ', 1)::double precision;
        head_cost := split_part(head_text, ' ', 2)::double precision;
    END IF;
    from_head := c_at IS NULL OR extract(epoch FROM t0) - head_end >= 9 * head_cost;
    lo_at := CASE WHEN from_head THEN '-infinity' ELSE c_at END;
    lo_rcv := CASE WHEN from_head THEN '-infinity' ELSE c_rcv END;
    FOR pass IN 1 .. 2 LOOP
        -- 021's claim between lo (inclusive) and hi (exclusive), then each keyed row's key lock
        -- tried only on the rows the claim locked (outside the subquery: its LIMIT keeps the
        -- filter out of the scan). A row whose key another transaction holds is left out of
        -- the batch, still pending (locked until this commits).
        SELECT array_agg(c.w ORDER BY c.next_attempt_at, c.received_at), array_agg(c.tid ORDER BY c.next_attempt_at, c.received_at),
               (array_agg(c.next_attempt_at ORDER BY c.next_attempt_at, c.received_at))[1],
               (array_agg(c.received_at ORDER BY c.next_attempt_at, c.received_at))[1],
               (array_agg(c.next_attempt_at ORDER BY c.next_attempt_at DESC, c.received_at DESC))[1],
               (array_agg(c.received_at ORDER BY c.next_attempt_at DESC, c.received_at DESC))[1]
          INTO more, more_tids, k_at, k_rcv, l_at, l_rcv
          FROM (SELECT w, w.ctid AS tid, w.next_attempt_at, w.received_at, w.source_scope AS scope, w.ordering_key AS okey
                  FROM webhook_inbox w
                 WHERE w.status = 'pending' AND w.next_attempt_at <= now()
                   AND (w.next_attempt_at, w.received_at) >= (lo_at, lo_rcv)
                   AND (w.next_attempt_at, w.received_at) < (hi_at, hi_rcv)
                   AND (w.ordering_key IS NULL OR NOT EXISTS (
                        SELECT 1 FROM webhook_inbox p
                         WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                           AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
                           AND (p.status = 'pending' OR webhook_inbox_route_strict(w.event_type))))
                 ORDER BY w.next_attempt_at, w.received_at
                 LIMIT p_limit - coalesce(cardinality(evs), 0)
                   FOR UPDATE SKIP LOCKED) c
         WHERE c.okey IS NULL OR pg_try_advisory_xact_lock(webhook_inbox_ordering_lock_id(c.scope, c.okey));
        IF pass = 1 THEN
            evs := more;
            tids := more_tids;
            first_at := k_at;
            first_rcv := k_rcv;
            last_at := l_at;
            last_rcv := l_rcv;
        ELSIF more IS NOT NULL THEN
            evs := more || coalesce(evs, '{}');   -- the older rows first, as a read from the head orders them
            tids := more_tids || coalesce(tids, '{}');
        END IF;
        n := coalesce(cardinality(evs), 0);
        -- Short from the cursor: the rest from the rows before it, unless that read costs a
        -- millisecond or more and the last one ended less than 9 times its cost ago.
        EXIT WHEN from_head OR n >= p_limit;
        IF before.before_cost >= 0.001 AND extract(epoch FROM clock_timestamp()) - before.before_end < 9 * before.before_cost THEN
            skipped := true;
            EXIT;
        END IF;
        t1 := clock_timestamp();
        from_head := true;
        lo_at := '-infinity';
        lo_rcv := '-infinity';
        hi_at := c_at;
        hi_rcv := c_rcv;
    END LOOP;
    -- The cursor: the first row between the old cursor (else this claim's first row) and the
    -- last row of the first pass that is still pending and not claimed here; else that last row.
    IF last_at IS NOT NULL THEN
        lo_at := coalesce(c_at, first_at);
        lo_rcv := coalesce(c_rcv, first_rcv);
        IF (last_at, last_rcv) >= (lo_at, lo_rcv) THEN
            SELECT w.next_attempt_at, w.received_at INTO lo_at, lo_rcv
              FROM webhook_inbox w
             WHERE w.status = 'pending' AND (w.next_attempt_at, w.received_at) >= (lo_at, lo_rcv)
               AND (w.next_attempt_at, w.received_at) <= (last_at, last_rcv) AND w.ctid <> ALL (tids)
             ORDER BY w.next_attempt_at, w.received_at
             LIMIT 1;
            IF NOT FOUND THEN
                lo_at := last_at;
                lo_rcv := last_rcv;
                held := 0;
            ELSIF (lo_at, lo_rcv) IS NOT DISTINCT FROM (c_at, c_rcv) THEN
                held := held + 1;
                IF held >= 10 THEN
                    lo_at := last_at;
                    lo_rcv := last_rcv;
                    held := 0;
                END IF;
            ELSE
                held := 0;
            END IF;
            PERFORM set_config('webhook_inbox.claim_cursor',
                               (extract(epoch FROM lo_at) * 1000000)::bigint || ' ' ||
                               (extract(epoch FROM lo_rcv) * 1000000)::bigint || ' ' || held, false);
        END IF;
    END IF;
    IF t1 IS NOT NULL OR skipped <> before.skipped THEN
        PERFORM set_config('webhook_inbox.claim_before',
                           CASE WHEN t1 IS NULL THEN round(before.before_end::numeric, 6) || ' ' || round(before.before_cost::numeric, 6)
                                ELSE round(extract(epoch FROM clock_timestamp()), 6) || ' ' ||
                                     round(extract(epoch FROM clock_timestamp() - t1), 6) END ||
                           CASE WHEN skipped THEN ' 1' ELSE ' 0' END, false);
    END IF;
    IF from_head THEN
        PERFORM set_config('webhook_inbox.claim_head',
                           round(extract(epoch FROM clock_timestamp()), 6) || ' ' ||
                           round(extract(epoch FROM clock_timestamp() - t0), 6), false);
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_claim_due(integer) IS
    'Sidecar batch claim: up to p_limit due events locked FOR UPDATE SKIP LOCKED for the caller''s transaction, a keyed one only when no earlier event of its key must run first and its key''s lock is free; read from this session''s cursor (webhook_inbox.claim_cursor) while reading from the head of the pending index costs more than a tenth of the time, else from the head. evs, tids: the rows and their row versions, oldest due first (NULL when none).';

-- The idle worker's probe (sidecar/src/claim/claim.c): seconds until the first pending event a
-- claim could take is due (0: due now), NULL when none; the claim's filter, due or not. The
-- sidecar calls it only after a claim came up short in this session, which read every row
-- before the session's cursor (or put that read off: then the answer is at the latest when it
-- may be read), so it reads from the cursor when there is one: from the head, under a
-- long-open snapshot, it walked every event processed since after every batch (a steady flow's
-- batches are short). What it does not see: a row before the cursor that another transaction
-- had locked when the claim passed it (due again only if that transaction rolls back: met by
-- the next claim, on a notification or the poll interval).
CREATE OR REPLACE FUNCTION webhook_inbox_next_due() RETURNS double precision
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    c      text := current_setting('webhook_inbox.claim_cursor', true);
    before record := webhook_inbox_claim_before();
    lo_at  timestamptz := '-infinity';
    lo_rcv timestamptz := '-infinity';
    due    timestamptz;
BEGIN
    IF c ~ '^-?[0-9]{1,17} -?[0-9]{1,17} [0-9]{1,6}$' THEN
        lo_at := 'epoch'::timestamptz + split_part(c, ' ', 1)::bigint * interval '1 microsecond';
        lo_rcv := 'epoch'::timestamptz + split_part(c, ' ', 2)::bigint * interval '1 microsecond';
    END IF;
    SELECT w.next_attempt_at INTO due
      FROM webhook_inbox w
     WHERE w.status = 'pending' AND (w.next_attempt_at, w.received_at) >= (lo_at, lo_rcv)
       AND (w.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM webhook_inbox p
             WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
               AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
               AND (p.status = 'pending' OR webhook_inbox_route_strict(w.event_type))))
     ORDER BY w.next_attempt_at, w.received_at
     LIMIT 1;
    IF before.skipped THEN -- the last claim did not read before the cursor: once it may
        due := least(due, to_timestamp(before.before_end + 9 * before.before_cost));
    END IF;
    RETURN CASE WHEN due IS NOT NULL THEN greatest(extract(epoch FROM due - clock_timestamp()), 0) END;
END
$$;
COMMENT ON FUNCTION webhook_inbox_next_due() IS
    'Sidecar idle probe after a short claim: seconds until the first pending event a claim could take is due (0: now; NULL: none), read from this session''s claim cursor (webhook_inbox.claim_cursor) when it has one, else from the head.';

-- Which events of a batch no once-marker and no flow rule holds back (per event, in order),
-- read from p_markers and p_flow, tables of webhook_inbox_effects_received's and
-- webhook_inbox_flow's columns (Citus: this node's copies, the reference tables' local shards
-- read as plain tables, prepared once per session: through Citus the batch's statement over
-- them was planned again at every batch). Event i: p_scopes[i], p_ids[i], its type
-- p_event_types[i], whose route's handler is p_handlers[array_position(p_types, type)]. The
-- conditions of webhook_inbox_dispatch_claimed's statement over the tables (keep the two alike).
CREATE OR REPLACE FUNCTION webhook_inbox_batch_clear_from(
        p_scopes text[], p_ids text[], p_event_types text[], p_types text[], p_handlers text[],
        p_markers regclass, p_flow regclass) RETURNS boolean[]
LANGUAGE plpgsql VOLATILE AS $$ -- VOLATILE: PREPARE is refused in a STABLE function
DECLARE
    clear boolean[];
    stmt  text := 'webhook_inbox_batch_clear_' || p_markers::oid || '_' || p_flow::oid;
BEGIN
    IF NOT webhook_inbox_prepared(stmt) THEN
        PERFORM webhook_inbox_prepare_once(stmt, 'text[], text[], text[], text[], text[]', format($q$
            SELECT array_agg(NOT EXISTS (
                       SELECT 1 FROM %1$s r
                        WHERE r.operation_id = webhook_inbox_handler_operation_id(e.source_scope, e.event_id,
                                                                                  'sql:' || $5[array_position($4, e.event_type)]))
                   AND NOT EXISTS (
                       SELECT 1 FROM %2$s f
                        WHERE (f.kind = 'scope' AND f.paused AND f.target = e.source_scope)
                           OR (f.kind = 'route' AND (f.paused OR f.rate IS NOT NULL)
                               AND webhook_inbox_flow_matches(f.target, e.event_type))) ORDER BY e.i)
              FROM unnest($1, $2, $3) WITH ORDINALITY AS e(source_scope, event_id, event_type, i)
            $q$, p_markers, p_flow));
    END IF;
    EXECUTE format('EXECUTE %I(%L, %L, %L, %L, %L)', stmt, p_scopes, p_ids, p_event_types, p_types, p_handlers)
       INTO clear; -- EXECUTE takes no $n
    RETURN clear;
END
$$;
COMMENT ON FUNCTION webhook_inbox_batch_clear_from(text[], text[], text[], text[], text[], regclass, regclass) IS
    'Per event of a batch: no once-marker in p_markers and no pause or rate rule in p_flow holds it back (webhook_inbox_dispatch_claimed''s conditions; Citus: the reference tables'' local shards), prepared once per session.';

-- The sidecar's batch once claimed: evs, the rows the caller's claim locked in this
-- transaction (oldest due first), tids their row versions; runs each handler (below) and marks
-- the rows. p_table: where the rows are marked done - NULL for webhook_inbox itself (one node:
-- static statements, planned once per session), or the table that holds them, by name (Citus:
-- a worker's local shard of webhook_inbox, db/citus/001's webhook_inbox_citus_dispatch_shard, so
-- PostgreSQL plans the batch's done marks there, not Citus at every call). The callers check the
-- arguments (webhook_inbox_dispatch_check) before their claim. p_routes, p_ruby_handlers: where
-- the batch reads each type's route and Ruby handlers (NULL: webhook_inbox_routes and
-- webhook_inbox_ruby_handlers; Citus: this node's copies, the reference tables' local shards,
-- read as plain tables); p_markers, p_flow: where it reads the once-markers and the pause and
-- rate rules, both or neither (NULL: webhook_inbox_effects_received and webhook_inbox_flow;
-- Citus: their local shards, webhook_inbox_batch_clear_from). Same rows as
-- webhook_inbox_dispatch_batch.
DROP FUNCTION IF EXISTS webhook_inbox_dispatch_claimed(webhook_inbox[], tid[], regclass, text, integer, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS webhook_inbox_dispatch_claimed(webhook_inbox[], tid[], regclass, text, integer, bigint, bigint, bigint,
                                                       regclass, regclass);
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_claimed(
        evs webhook_inbox[], tids tid[], p_table regclass, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        p_routes regclass DEFAULT NULL, p_ruby_handlers regclass DEFAULT NULL,
        p_markers regclass DEFAULT NULL, p_flow regclass DEFAULT NULL)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
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
    done_stmt text;            -- with p_table: this session's prepared done marks in it
    plan_mode text;
BEGIN
    n := coalesce(cardinality(evs), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    -- Few statements per batch: each costs some microseconds whatever it does.
    SELECT array_agg(e.source_scope ORDER BY e.ordinality), array_agg(e.event_id ORDER BY e.ordinality) INTO scopes, ids
      FROM unnest(evs) WITH ORDINALITY AS e;
    IF n = 1 THEN
        -- One event (--batch-size 1, a trickle): 014's path, its handler in a savepoint (one
        -- subxid); the reads once per batch below would cost more than they save.
        ev := evs[1];
        ts[1] := clock_timestamp();
        SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO res, det, chg, rty
          FROM webhook_inbox_run_event(ev, webhook_inbox_route_here(ev.event_type), p_unrouted, p_max_attempts,
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
        -- By name on this node (db/029), never raising: a type whose handler is missing here has
        -- none (its events wait, uncharged, in webhook_inbox_run_event); a missing batch handler
        -- is none (the row handler runs its events, as at n = 1 and on Citus).
        IF p_routes IS NULL THEN
            SELECT array_agg(to_regproc(m.handler_name) ORDER BY t.i),
                   array_agg(to_regproc(m.batch_handler_name) ORDER BY t.i) INTO handlers, batchers
              FROM unnest(types) WITH ORDINALITY AS t(event_type, i)
              LEFT JOIN LATERAL webhook_inbox_route_match(t.event_type) AS m ON true;
        ELSE
            SELECT array_agg(to_regproc(m.handler_name) ORDER BY t.i),
                   array_agg(to_regproc(m.batch_handler_name) ORDER BY t.i) INTO handlers, batchers
              FROM unnest(types) WITH ORDINALITY AS t(event_type, i)
              LEFT JOIN LATERAL webhook_inbox_route_match_from(t.event_type, p_routes) AS m ON true;
        END IF;
        SELECT array_agg(format('SELECT %s($1)', x.h) ORDER BY x.i), array_agg(format('SELECT %s($1)', x.b) ORDER BY x.i),
               array_agg(x.h IS NOT NULL
                         AND CASE WHEN p_ruby_handlers IS NULL THEN webhook_inbox_ruby_handlers_for(x.t)
                                  ELSE webhook_inbox_ruby_handlers_from(x.t, p_ruby_handlers) END IS NULL ORDER BY x.i)
          INTO calls, bcalls, plain
          FROM unnest(types, handlers, batchers) WITH ORDINALITY AS x(t, h, b, i);
        -- k, fast, and the plain events' results, filled before the loop (the loop then writes
        -- only their outcome). With p_markers and p_flow the tables' part is read from them
        -- (webhook_inbox_batch_clear_from: the same conditions), the rest is this statement's.
        IF p_markers IS NOT NULL AND p_flow IS NOT NULL THEN
            SELECT array_agg(y.k ORDER BY y.i), array_agg(y.fast ORDER BY y.i), array_agg(CASE WHEN y.fast THEN 'done' END ORDER BY y.i)
              INTO k, fast, r_result
              FROM (SELECT x.ordinality AS i, x.k,
                           plain[x.k] AND x.held_at IS NULL AND x.rate_slot_at IS NULL AND c.clear[x.ordinality] AS fast
                      FROM (SELECT e.*, array_position(types, e.event_type) AS k
                              FROM unnest(evs) WITH ORDINALITY AS e) x,
                           webhook_inbox_batch_clear_from(scopes, ids, ARRAY(SELECT e.event_type FROM unnest(evs) WITH ORDINALITY AS e
                                                                              ORDER BY e.ordinality),
                                                          types, handlers::text[], p_markers, p_flow) AS c(clear)) y;
        ELSE
            SELECT array_agg(y.k ORDER BY y.i), array_agg(y.fast ORDER BY y.i), array_agg(CASE WHEN y.fast THEN 'done' END ORDER BY y.i)
              INTO k, fast, r_result
              FROM (SELECT x.ordinality AS i, x.k,
                           plain[x.k] AND x.held_at IS NULL AND x.rate_slot_at IS NULL
                           AND NOT EXISTS (
                               SELECT 1 FROM webhook_inbox_effects_received r
                                WHERE r.operation_id = webhook_inbox_handler_operation_id(x.source_scope, x.event_id,
                                                                                          'sql:' || handlers[x.k]::text))
                           AND NOT EXISTS (
                               SELECT 1 FROM webhook_inbox_flow f
                                WHERE (f.kind = 'scope' AND f.paused AND f.target = x.source_scope)
                                   OR (f.kind = 'route' AND (f.paused OR f.rate IS NOT NULL)
                                       AND webhook_inbox_flow_matches(f.target, x.event_type))) AS fast
                      FROM (SELECT e.*, array_position(types, e.event_type) AS k
                              FROM unnest(evs) WITH ORDINALITY AS e) x) y;
        END IF;
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
                            set_config('webhook_inbox.source_event_id', '', true),
                            set_config('webhook_inbox.trace_context', '', true);
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
                    -- r_detail and ts hold exactly i - 1 and i elements here. One statement over
                    -- outcomes: generate_series(1, j - i) made PostgreSQL plan it anew at every run.
                    SELECT r_detail[1:i - 1] || array_agg(coalesce(u.o, 'done') ORDER BY u.m),
                           ts[1:i] || array_agg(t0 + (t1 - t0) * u.m / (j - i + 1) ORDER BY u.m) FILTER (WHERE u.m <= j - i)
                      INTO r_detail, ts
                      FROM unnest(outcomes) WITH ORDINALITY AS u(o, m);
                    run_end := NULL;
                ELSIF fast[i] THEN
                    -- 006's webhook_inbox_run_handler without its savepoint: a raise leaves the loop.
                    PERFORM set_config('webhook_inbox.source_scope', evs[i].source_scope, true),
                            set_config('webhook_inbox.source_event_id', evs[i].event_id, true),
                            set_config('webhook_inbox.trace_context', coalesce(webhook_inbox_handle_trace_context(
                                evs[i].trace_context, evs[i].source_scope, evs[i].event_id, evs[i].attempts), ''), true);
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
                    set_config('webhook_inbox.source_event_id', '', true),
                    set_config('webhook_inbox.trace_context', '', true);
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
    -- In p_table (a shard's name: the same statement, dynamic, planned by PostgreSQL per batch)
    -- the by-version statement is the static one's text but for the clock, pg_catalog's, and
    -- the entry, webhook_inbox_log_entry_at(that clock, ...): on Citus the gem's functions read
    -- clock_timestamp() from webhook_inbox_citus, a SQL function run per row, and
    -- webhook_inbox_log_entry is labelled IMMUTABLE, which keeps it from being inlined
    -- (db/citus/001); this statement runs on the shard table itself, where neither is needed
    -- (two SQL function calls a row, issue 30). The second, rare, is dynamic everywhere.
    -- The attempt_log entry is made in the subquery, so that webhook_inbox_log_append (IMMUTABLE)
    -- is inlined: with the entry's volatile call in its argument it was run as a SQL function
    -- per row (about 3.5 us a row).
    IF 'done' = ANY (r_result) THEN
        IF p_table IS NULL THEN
            UPDATE webhook_inbox w
               SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL,
                   attempt_log = webhook_inbox_log_append(w.attempt_log, d.entry)
              FROM (SELECT e.tid, e.source_scope, e.event_id, e.outcome,
                           webhook_inbox_log_entry('done', e.outcome, (extract(epoch FROM e.t1 - e.t0) * 1000)::float8) AS entry
                      FROM unnest(tids, scopes, ids, r_detail, r_result, ts[1:n], ts[2:n + 1])
                           AS e(tid, source_scope, event_id, outcome, result, t0, t1)
                     WHERE e.result = 'done') d
             WHERE w.ctid = d.tid AND w.source_scope = d.source_scope AND w.event_id = d.event_id AND w.status = 'pending';
            GET DIAGNOSTICS marked = ROW_COUNT;
        ELSE
            -- Prepared once per session and table (its OID in the name), run with its generic
            -- plan: planned at every batch it was a fifth of a worker's batch of 20 on Citus.
            done_stmt := 'webhook_inbox_done_' || p_table::oid;
            IF NOT webhook_inbox_prepared(done_stmt) THEN
                PERFORM webhook_inbox_prepare_once(done_stmt, 'tid[], text[], text[], text[], text[], timestamptz[], timestamptz[]',
                    format($q$
                        WITH u AS (
                        UPDATE %1$s w
                           SET status = 'done', outcome = d.outcome, processed_at = pg_catalog.clock_timestamp(), last_error = NULL,
                               attempt_log = webhook_inbox_log_append(w.attempt_log, d.entry)
                          FROM (SELECT e.tid, e.source_scope, e.event_id, e.outcome,
                                       webhook_inbox_log_entry_at(pg_catalog.clock_timestamp(), 'done', e.outcome,
                                                                  (extract(epoch FROM e.t1 - e.t0) * 1000)::float8) AS entry
                                  FROM unnest($1, $2, $3, $4, $5, $6, $7) AS e(tid, source_scope, event_id, outcome, result, t0, t1)
                                 WHERE e.result = 'done') d
                         WHERE w.ctid = d.tid AND w.source_scope = d.source_scope AND w.event_id = d.event_id AND w.status = 'pending'
                        RETURNING 1)
                        SELECT count(*)::int FROM u -- the rows marked, as a value (not left to ROW_COUNT after an EXECUTE)
                        $q$, p_table));
            END IF;
            plan_mode := current_setting('plan_cache_mode');
            PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
            EXECUTE format('EXECUTE %I(%L, %L, %L, %L, %L, %L, %L)', done_stmt, tids, scopes, ids, r_detail, r_result,
                           ts[1:n], ts[2:n + 1]) INTO marked; -- EXECUTE takes no $n
            PERFORM set_config('plan_cache_mode', plan_mode, true);
        END IF;
        IF marked < cardinality(array_positions(r_result, 'done')) THEN
            EXECUTE format($q$
                UPDATE %s w
                   SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL,
                       attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', d.outcome, d.ms))
                  FROM (SELECT e.source_scope, e.event_id, e.outcome,
                               (extract(epoch FROM e.t1 - e.t0) * 1000)::float8 AS ms
                          FROM unnest($1, $2, $3, $4, $5, $6) AS e(source_scope, event_id, outcome, result, t0, t1)
                         WHERE e.result = 'done') d
                 WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id AND w.status = 'pending'
                $q$, coalesce(p_table, 'webhook_inbox'::regclass)) USING scopes, ids, r_detail, r_result, ts[1:n], ts[2:n + 1];
        END IF;
    END IF;
    RETURN QUERY
        SELECT x.source_scope, x.event_id, x.event_type, r_result[x.ordinality::int], r_detail[x.ordinality::int],
               x.attempts, (extract(epoch FROM ts[x.ordinality::int] - coalesce(x.requeued_at, x.received_at)) * 1000)::float8,
               r_charge[x.ordinality::int], r_retry[x.ordinality::int]
          FROM unnest(evs) WITH ORDINALITY AS x;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_claimed(webhook_inbox[], tid[], regclass, text, integer, bigint, bigint, bigint, regclass, regclass, regclass, regclass) IS
    'Sidecar: webhook_inbox_dispatch_batch() after its claim - run the handlers of the claimed (locked) rows evs (tids: their row versions) and record each result; the done marks in p_table (NULL: webhook_inbox; Citus: the local shard the rows were claimed from), the routes and Ruby handlers read from p_routes and p_ruby_handlers, the once-markers and pause and rate rules from p_markers and p_flow (NULL: the tables; Citus: their local shards). One row per event.';

-- The sidecar's batch (sidecar/src/claim/dispatch.c): the arguments checked, the claim
-- (webhook_inbox_claim_due above, from this session's cursor when walking from the head of the
-- pending index has become expensive), then webhook_inbox_dispatch_claimed on webhook_inbox.
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_batch(
        p_limit integer, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    evs  webhook_inbox[];
    tids tid[];
BEGIN
    -- webhook_inbox_run_event's checks (the plain path does not call it), before the claim.
    PERFORM webhook_inbox_dispatch_check(p_unrouted, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms,
                                         p_unrouted_delay_ms);
    SELECT c.evs, c.tids INTO evs, tids FROM webhook_inbox_claim_due(p_limit) c;
    IF evs IS NOT NULL THEN
        RETURN QUERY SELECT * FROM webhook_inbox_dispatch_claimed(evs, tids, NULL, p_unrouted, p_max_attempts, p_backoff_base_ms,
                                                                   p_backoff_cap_ms, p_unrouted_delay_ms);
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: claim up to p_limit due events (FOR UPDATE SKIP LOCKED; a keyed event only when no earlier event of its key must run first), run each handler, record done/quarantined/retry (charged, with backoff)/waiting and an attempt_log entry in the same transaction; one row per event; latency from requeued_at or received_at. v17: the batch runs in one subtransaction; when a handler raises, it is rolled back and redone with each handler in its own savepoint and the raising one not run again (only the failing event rolls back). v19: a run of consecutive events whose route names a batch handler is one call of it; when it raises, the batch is redone with the row handlers. v21: a keyed event only while no other transaction holds its key (webhook_inbox_ordering_lock_id, a transaction-level advisory lock taken at the claim). v29: routes resolved by name on this node, never raising: a type whose handler is missing here waits, uncharged (webhook_inbox_run_event), a missing batch handler leaves its events to the row handler; the rest of the batch runs. Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';
