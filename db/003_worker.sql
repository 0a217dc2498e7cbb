-- 003_worker.sql - the sidecar's server-side half: routing, dispatch in a subtransaction, stats.
-- Idempotent: safe to re-run. Applied by `webhook-inbox-sidecar migrate` after 001 and 002.
-- The v3 worker API: sidecars of schema v4 and later call the functions of
-- 004_schema_version.sql instead (failures charged in the claiming transaction, unrouted
-- events waiting); these stay as they were for v3 sidecars during a rolling deploy.

-- Routing: exact type first, then the longest prefix pattern ending in '*', '*' last.
-- starts_with() (not LIKE) so '_' and '%' in event types are plain characters.
CREATE OR REPLACE FUNCTION webhook_inbox_route(p_event_type text) RETURNS regproc
LANGUAGE sql STABLE AS $$
    SELECT r.handler
      FROM webhook_inbox_routes r
     WHERE r.event_type = p_event_type
        OR (right(r.event_type, 1) = '*'
            AND starts_with(p_event_type, left(r.event_type, -1)))
     ORDER BY (r.event_type = p_event_type) DESC, length(r.event_type) DESC
     LIMIT 1
$$;
COMMENT ON FUNCTION webhook_inbox_route(text) IS
    'The handler for an event type: exact match, else the longest matching ''prefix*'' pattern (''*'' matches all); NULL when unrouted.';

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

-- Monitoring: what the documents ask to watch (backlog age, retries, quarantine, receipt-to-done).
CREATE OR REPLACE FUNCTION webhook_inbox_stats(
        OUT pending bigint, OUT oldest_pending_age_s double precision,
        OUT pending_attempts bigint, OUT retrying bigint, OUT quarantined bigint, OUT done bigint,
        OUT latency_p50_ms double precision, OUT latency_p95_ms double precision,
        OUT latency_p99_ms double precision)
LANGUAGE sql STABLE AS $$
    SELECT count(*) FILTER (WHERE status = 'pending'),
           coalesce(extract(epoch FROM now() - min(received_at) FILTER (WHERE status = 'pending')), 0),
           coalesce(sum(attempts) FILTER (WHERE status = 'pending'), 0),
           count(*) FILTER (WHERE status = 'pending' AND attempts > 0),
           count(*) FILTER (WHERE status = 'quarantined'),
           count(*) FILTER (WHERE status = 'done'),
           percentile_cont(0.50) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at) * 1000)
               FILTER (WHERE status = 'done'),
           percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at) * 1000)
               FILTER (WHERE status = 'done'),
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at) * 1000)
               FILTER (WHERE status = 'done')
      FROM webhook_inbox
$$;
COMMENT ON FUNCTION webhook_inbox_stats() IS
    'One row of inbox health: pending backlog and its oldest age, retries, quarantined and done counts, receipt-to-done latency percentiles.';
