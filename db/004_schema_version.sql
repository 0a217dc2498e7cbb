-- 004_schema_version.sql - schema version 4: the version functions the sidecar checks, and the
-- v4 worker API: a failed run charged in the transaction that ran it, unrouted events that
-- wait for a route instead of being marked done, an explicit ignore route.
-- Idempotent: safe to re-run. Applied after 001..003 by `webhook-inbox-sidecar migrate` and
-- the Rails generator.
--
-- Nothing here replaces a function of 001..003: their signatures (the v3 API) keep their v3
-- bodies for v3 sidecars still running during a rolling deploy, and re-running an older
-- 003_worker.sql cannot change what a v4 sidecar calls. A later version adds its own file
-- and raises webhook_inbox_schema_version(); it raises webhook_inbox_schema_min_worker()
-- only when it breaks what older sidecars call.

-- The version of the inbox schema in this database: every db/NNN file up to this number has
-- been applied. The sidecar (WI_SCHEMA_VERSION in sidecar/src/schema.h) refuses to work
-- on a database without it or with an older one.
CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 4 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- The oldest sidecar schema version that still works against this database. A sidecar whose
-- own version is below this refuses to run ("upgrade it"); one whose version is at least this,
-- even if older than webhook_inbox_schema_version(), works.
CREATE OR REPLACE FUNCTION webhook_inbox_schema_min_worker() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 4 $$;
COMMENT ON FUNCTION webhook_inbox_schema_min_worker() IS
    'Oldest sidecar schema version (WI_SCHEMA_VERSION) that works against this database; an older sidecar refuses to run.';

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

-- Charges one transient failure: attempts + 1, last_error, next_attempt_at = now + backoff;
-- quarantined when attempts reaches p_max_attempts. Applies only to a row still pending
-- with p_seen_attempts (nobody handled or charged it meanwhile); all OUT values are NULL
-- otherwise. The v4 dispatch functions call it inside the claiming transaction, on the row
-- they hold locked; the sidecar calls it in a transaction of its own only when the run's
-- transaction could not record it: the connection died under the handler (careful mode),
-- or the COMMIT of a one-event transaction failed.
--   SELECT new_status, new_attempts, retry_in_ms
--     FROM webhook_inbox_charge_failure(scope, event_id, seen_attempts, error, max_attempts,
--                                       backoff_base_ms, backoff_cap_ms)
CREATE OR REPLACE FUNCTION webhook_inbox_charge_failure(
        p_scope text, p_event_id text, p_seen_attempts integer, p_error text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    delay_ms bigint := webhook_inbox_retry_delay_ms(p_seen_attempts, p_backoff_base_ms, p_backoff_cap_ms);
BEGIN
    UPDATE webhook_inbox w
       SET attempts = w.attempts + 1,
           last_error = left(p_error, 1000),
           next_attempt_at = clock_timestamp() + delay_ms * interval '1 millisecond',
           status = CASE WHEN w.attempts + 1 >= p_max_attempts THEN 'quarantined' ELSE 'pending' END,
           processed_at = CASE WHEN w.attempts + 1 >= p_max_attempts THEN clock_timestamp() END
     WHERE w.source_scope = p_scope AND w.event_id = p_event_id
       AND w.status = 'pending' AND w.attempts = p_seen_attempts
    RETURNING w.status, w.attempts INTO new_status, new_attempts;
    IF new_status = 'pending' THEN
        retry_in_ms := delay_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_charge_failure(text, text, integer, text, integer, bigint, bigint) IS
    'Charge one transient failure (attempts+1, backoff from webhook_inbox_retry_delay_ms, last_error; quarantined at p_max_attempts) if the row is still pending with p_seen_attempts; returns the new status and attempts, and the delay when still pending; NULLs if the row moved.';

-- Runs one handler in a subtransaction (BEGIN ... EXCEPTION is a savepoint: a failing
-- handler's work is rolled back alone). Changes no inbox row. The handler is called through
-- its regproc, which PostgreSQL prints quoted (and schema-qualified when needed), so no
-- value is spliced into SQL text.
--   result 'done'        -> detail = the handler's return value ('done' when NULL)
--   result 'quarantined' -> the handler raised SQLSTATE WIQ01 (webhook_inbox_quarantine), detail = reason
--   result 'retry'       -> any other error, detail = 'SQLSTATE: message'
CREATE OR REPLACE FUNCTION webhook_inbox_run_handler(
        ev webhook_inbox, p_handler regproc, OUT result text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    outcome text;
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
END
$$;
COMMENT ON FUNCTION webhook_inbox_run_handler(webhook_inbox, regproc) IS
    'Sidecar v4: run one handler in a subtransaction (savepoint); returns done/quarantined/retry with the outcome, reason or error. Changes no inbox row.';

-- One claimed event, its row locked by the caller: run its handler (or apply the unrouted
-- policy) and record every result but 'done' on the row, in the caller's transaction:
--   'quarantined' -> status quarantined, last_error = reason
--   'retry'       -> charged one attempt (webhook_inbox_charge_failure); result becomes
--                    'quarantined' when that was the last one (charged = true either way)
--   'waiting'     -> no route and p_unrouted = 'wait': stays pending, attempts unchanged,
--                    last_error 'no route for event type', next attempt in p_unrouted_delay_ms
--   'done'        -> left to the caller, who marks it done (the batch does so in one UPDATE)
-- p_unrouted: 'wait' (the sidecar's default), 'ignore' (done, 'ignored: no route'),
-- 'quarantine', or 'retry' (charged like a transient failure).
CREATE OR REPLACE FUNCTION webhook_inbox_run_event(
        ev webhook_inbox, p_handler regproc, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        OUT result text, OUT detail text, OUT charged boolean, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    IF p_unrouted IS NULL OR p_unrouted NOT IN ('wait', 'ignore', 'quarantine', 'retry') THEN
        RAISE EXCEPTION 'webhook_inbox: p_unrouted must be wait, ignore, quarantine or retry, not %', p_unrouted
              USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 1 OR p_backoff_base_ms IS NULL OR p_backoff_cap_ms IS NULL
       OR p_unrouted_delay_ms IS NULL OR p_unrouted_delay_ms < 0 THEN
        RAISE EXCEPTION 'webhook_inbox: p_max_attempts must be >= 1, backoff and unrouted delay non-NULL and >= 0'
              USING ERRCODE = '22023';
    END IF;
    charged := false;
    IF p_handler IS NULL THEN
        detail := 'no route for event type';
        IF p_unrouted = 'wait' THEN
            result := 'waiting';
            retry_in_ms := p_unrouted_delay_ms;
            UPDATE webhook_inbox w
               SET last_error = detail,
                   next_attempt_at = clock_timestamp() + p_unrouted_delay_ms * interval '1 millisecond'
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
    ELSE
        SELECT h.result, h.detail INTO result, detail FROM webhook_inbox_run_handler(ev, p_handler) h;
    END IF;
    IF result = 'quarantined' THEN
        UPDATE webhook_inbox w
           SET status = 'quarantined', last_error = detail, processed_at = clock_timestamp()
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
    ELSIF result = 'retry' THEN
        SELECT c.new_status, c.retry_in_ms INTO st, retry_in_ms
          FROM webhook_inbox_charge_failure(ev.source_scope, ev.event_id, ev.attempts, detail, p_max_attempts,
                                            p_backoff_base_ms, p_backoff_cap_ms) c;
        charged := st IS NOT NULL;
        IF st = 'quarantined' THEN
            result := 'quarantined';
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_run_event(webhook_inbox, regproc, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: run one claimed (locked) event''s handler or unrouted policy and record quarantined/retry/waiting on its row in the caller''s transaction; ''done'' is left to the caller.';

-- The sidecar's batch (its usual path, also for --batch-size 1): claim up to p_limit due
-- pending rows FOR UPDATE SKIP LOCKED, oldest due first, run each one's handler in its own
-- subtransaction, and record every outcome in the caller's transaction: done rows with one
-- UPDATE at the end; quarantined, retry (charged one attempt, with backoff) and waiting
-- rows as they happen. One row per claimed event:
--   result      'done' | 'quarantined' | 'retry' | 'waiting'
--   detail      outcome, reason, 'SQLSTATE: message', or 'no route for event type'
--   attempts    the row's attempts BEFORE this run (+1 when charged)
--   latency_ms  receipt to this run
--   charged     this run counted as one attempt (a transient failure; 'quarantined' when
--               it was the last one allowed)
--   retry_in_ms when still pending: the delay before the next run, else NULL
-- A test helper runs pending handlers exactly like the sidecar with:
--   BEGIN; SELECT * FROM webhook_inbox_dispatch_batch(20, 'wait', 10, 1000, 3600000, 60000); COMMIT;
-- (repeated until it returns no row). If the statement itself fails (statement_timeout,
-- a lost connection) nothing is recorded: the transaction rolls back as a whole.
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
        SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO result, detail, charged, retry_in_ms
          FROM webhook_inbox_run_event(ev, handler, p_unrouted, p_max_attempts, p_backoff_base_ms,
                                       p_backoff_cap_ms, p_unrouted_delay_ms) r;
        IF result = 'done' THEN
            done_scope := done_scope || ev.source_scope;
            done_id := done_id || ev.event_id;
            done_what := done_what || detail;
        END IF;
        RETURN NEXT;
    END LOOP;
    UPDATE webhook_inbox w
       SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL
      FROM unnest(done_scope, done_id, done_what) AS d(scope, id, outcome)
     WHERE w.source_scope = d.scope AND w.event_id = d.id;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: claim up to p_limit due events (FOR UPDATE SKIP LOCKED), run each handler in its own subtransaction, record done/quarantined/retry (charged, with backoff)/waiting in the same transaction; one row per event. Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';

-- One claimed event by key (the sidecar's one-statement-per-event path, inside its own
-- transaction after claiming the row): lock, route, run, record, like one row of
-- webhook_inbox_dispatch_batch(); 'done' is marked here too. result 'skipped' when the row
-- is no longer pending. attempts is the row's attempts before this run.
--   SELECT result, detail, attempts, latency_ms, charged, retry_in_ms
--     FROM webhook_inbox_dispatch(scope, event_id, 'wait', 10, 1000, 3600000, 60000)
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch(
        p_scope text, p_event_id text, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        OUT result text, OUT detail text, OUT event_type text, OUT attempts integer,
        OUT latency_ms double precision, OUT charged boolean, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    ev webhook_inbox;
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
    latency_ms := extract(epoch FROM clock_timestamp() - ev.received_at) * 1000;
    SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO result, detail, charged, retry_in_ms
      FROM webhook_inbox_run_event(ev, webhook_inbox_route(ev.event_type), p_unrouted, p_max_attempts,
                                   p_backoff_base_ms, p_backoff_cap_ms, p_unrouted_delay_ms) r;
    IF result = 'done' THEN
        UPDATE webhook_inbox w
           SET status = 'done', outcome = detail, processed_at = clock_timestamp(), last_error = NULL
         WHERE w.source_scope = p_scope AND w.event_id = p_event_id;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch(text, text, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: route and run one pending event''s handler in a subtransaction and record the result (done/quarantined/retry charged/waiting) in the caller''s transaction; ''skipped'' if no longer pending.';

-- Monitoring: pending events whose type has no route now (they wait, or are retried, until
-- one exists), by event type, most first. One route lookup per distinct type.
CREATE OR REPLACE FUNCTION webhook_inbox_unrouted(OUT event_type text, OUT pending bigint)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT t.event_type, t.n
      FROM (SELECT w.event_type, count(*) AS n FROM webhook_inbox w
             WHERE w.status = 'pending' GROUP BY w.event_type) t
     WHERE webhook_inbox_route(t.event_type) IS NULL
     ORDER BY t.n DESC, t.event_type
$$;
COMMENT ON FUNCTION webhook_inbox_unrouted() IS
    'Pending events whose event type has no route, counted by type (what `webhook-inbox-sidecar stats` reports as waiting_for_route).';
