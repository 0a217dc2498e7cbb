-- 003_worker.sql - the sidecar's server-side half: routing, dispatch in a subtransaction, stats.
-- Idempotent: safe to re-run. Applied by `webhook-inbox-sidecar migrate` after 001 and 002.

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

-- Runs one claimed event. The handler runs inside a BEGIN ... EXCEPTION block, which is a
-- savepoint: a failing handler's business work is rolled back alone, the caller's transaction
-- (and the other events of its batch) stays usable. The handler is called through its regproc
-- text, which PostgreSQL prints as a quoted (and, if needed, schema-qualified) identifier.
--   result 'done'        -> row is done, detail = the handler's outcome
--   result 'quarantined' -> handler raised WIQ01 (or unrouted policy = quarantine), detail = reason
--   result 'retry'       -> transient failure, nothing changed; detail = SQLSTATE: message.
--                           The caller records attempts/backoff in a separate transaction.
--   result 'skipped'     -> the row is no longer pending (nothing to do)
-- p_unrouted: 'ignore' (done, outcome 'ignored: no route'), 'quarantine' or 'retry'.
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch(
        p_scope text, p_event_id text, p_unrouted text DEFAULT 'ignore',
        OUT result text, OUT detail text, OUT event_type text, OUT attempts integer,
        OUT latency_ms double precision)
LANGUAGE plpgsql AS $$
DECLARE
    ev      webhook_inbox;
    handler regproc;
    outcome text;
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
    handler := webhook_inbox_route(ev.event_type);

    IF handler IS NULL THEN
        IF p_unrouted = 'quarantine' THEN
            result := 'quarantined';
            detail := 'no route for event type';
        ELSIF p_unrouted = 'retry' THEN
            result := 'retry';
            detail := 'no route for event type';
            RETURN;
        ELSE
            result := 'done';
            detail := 'ignored: no route';
        END IF;
    ELSE
        BEGIN
            EXECUTE format('SELECT %s($1)', handler) INTO outcome USING ev;
            result := 'done';
            detail := coalesce(outcome, 'done');
        EXCEPTION
            WHEN SQLSTATE 'WIQ01' THEN
                result := 'quarantined';
                detail := SQLERRM;
            WHEN OTHERS THEN
                result := 'retry';
                detail := SQLSTATE || ': ' || SQLERRM;
                RETURN;
        END;
    END IF;

    IF result = 'done' THEN
        UPDATE webhook_inbox w
           SET status = 'done', outcome = detail, processed_at = now(), last_error = NULL
         WHERE w.source_scope = p_scope AND w.event_id = p_event_id;
    ELSE
        UPDATE webhook_inbox w
           SET status = 'quarantined', last_error = detail, processed_at = now()
         WHERE w.source_scope = p_scope AND w.event_id = p_event_id;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch(text, text, text) IS
    'Sidecar: route and run the handler of one claimed pending event in a subtransaction, mark it done or quarantined; ''retry'' leaves the row untouched for the caller to record.';

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
