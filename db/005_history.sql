-- 005_history.sql - schema version 5: every run's history on the row (attempt_log), latency
-- per processing (requeued_at), the delivery's request headers (request_headers), requeue
-- and replay in SQL with an audit table, stats that
-- cost in proportion to pending and recent rows, and rejected-delivery counts for the
-- dashboard. Idempotent: safe to re-run. Applied after 001..004.
--
-- v4 sidecars keep working (webhook_inbox_schema_min_worker() stays 4): every v4 function
-- keeps its signature and result columns; only bodies change (CREATE OR REPLACE), and what
-- they add (a log entry, the latency base) is invisible to a v4 caller.
--
-- On a large existing inbox, CREATE INDEX below blocks inserts while it builds (receivers
-- answer 503 and providers retry). Build them first without blocking, outside a transaction:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_received_idx ON webhook_inbox (received_at);
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_done_idx ON webhook_inbox (processed_at) WHERE status = 'done';
-- and this file then skips them. (The quarantined index is small; the columns are added
-- without a table rewrite.)

ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS attempt_log jsonb NOT NULL DEFAULT '[]';
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS requeued_at timestamptz;
COMMENT ON COLUMN webhook_inbox.attempt_log IS
    'Every handler run, oldest first, the last 50: {"at": ISO-8601 UTC, "result": retry|quarantined|done|waiting|requeued, "detail": outcome, reason or error (<= 1000 chars), "duration_ms": number, or null when the sidecar charged a failure after losing the run''s connection}. Kept after success; last_error holds only the current problem (cleared when done).';
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS request_headers jsonb;
COMMENT ON COLUMN webhook_inbox.request_headers IS
    'The first accepted delivery''s HTTP request headers, {"lower-case-name": "value"}, as the receiver kept them: credentials (authorization, cookie, names with token, secret, password, api-key) left out, values cut to 1024 bytes, at most 64 headers. NULL for rows inserted without them (SQL, or a receiver connected before this column existed).';
COMMENT ON COLUMN webhook_inbox.requeued_at IS
    'When a requeue or replay last moved the row back to pending (NULL: never). Latency counts from here, else from received_at, so a requeue does not inflate the percentiles.';

-- The dashboard's event list (newest first, keyset on received_at) and prune's "done rows
-- received before" both walk received_at; without it each is a scan of the whole table.
CREATE INDEX IF NOT EXISTS webhook_inbox_received_idx ON webhook_inbox (received_at);
COMMENT ON INDEX webhook_inbox_received_idx IS
    'Newest-first event lists with keyset pagination, and retention by received_at, without scanning the table.';
-- Done rows by completion time: stats' recent window and the dashboard's done-per-hour.
-- Partial: a receipt (pending) never writes to it.
CREATE INDEX IF NOT EXISTS webhook_inbox_done_idx ON webhook_inbox (processed_at) WHERE status = 'done';
COMMENT ON INDEX webhook_inbox_done_idx IS
    'Partial index on done rows by processed_at: recent-window counts and latency percentiles cost in proportion to recent rows.';
-- Quarantined rows are few and wanted often (stats, the dashboard); partial, so cheap.
CREATE INDEX IF NOT EXISTS webhook_inbox_quarantined_idx ON webhook_inbox (received_at) WHERE status = 'quarantined';
COMMENT ON INDEX webhook_inbox_quarantined_idx IS
    'Partial index on quarantined rows: their count and list without scanning done rows.';

-- One attempt_log entry. detail is cut to 1000 characters, like last_error.
CREATE OR REPLACE FUNCTION webhook_inbox_log_entry(p_result text, p_detail text, p_duration_ms double precision)
RETURNS jsonb
LANGUAGE sql VOLATILE AS $$
    SELECT jsonb_build_object('at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                              'result', p_result, 'detail', left(p_detail, 1000),
                              'duration_ms', round(p_duration_ms::numeric, 3))
$$;
COMMENT ON FUNCTION webhook_inbox_log_entry(text, text, double precision) IS
    'One attempt_log entry {at, result, detail (<= 1000 chars), duration_ms} stamped with clock_timestamp() in UTC.';

-- log with entry appended, the oldest dropped beyond 50 entries.
CREATE OR REPLACE FUNCTION webhook_inbox_log_append(p_log jsonb, p_entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_array_length(coalesce(p_log, '[]')) >= 50
                THEN (p_log - 0) || jsonb_build_array(p_entry)
                ELSE coalesce(p_log, '[]') || jsonb_build_array(p_entry) END
$$;
COMMENT ON FUNCTION webhook_inbox_log_append(jsonb, jsonb) IS
    'attempt_log with one entry appended, keeping the last 50.';

-- Back to pending from done or quarantined, by whatever means (webhook_inbox_requeue, the
-- sidecar's `requeue`, a hand-written UPDATE): stamp requeued_at, so latency counts from
-- here, and log it. The WHEN clause keeps every other update free of the trigger.
CREATE OR REPLACE FUNCTION webhook_inbox_on_requeue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.requeued_at := now();
    NEW.attempt_log := webhook_inbox_log_append(NEW.attempt_log,
        webhook_inbox_log_entry('requeued', 'from ' || OLD.status, NULL));
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION webhook_inbox_on_requeue() IS
    'Row trigger: a row moved back to pending from done or quarantined gets requeued_at = now() and a ''requeued'' attempt_log entry.';
DROP TRIGGER IF EXISTS webhook_inbox_requeued ON webhook_inbox;
CREATE TRIGGER webhook_inbox_requeued
    BEFORE UPDATE OF status ON webhook_inbox
    FOR EACH ROW WHEN (OLD.status <> 'pending' AND NEW.status = 'pending')
    EXECUTE FUNCTION webhook_inbox_on_requeue();

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 5 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- webhook_inbox_charge_failure() with the run's duration for the log (NULL when unknown).
-- The v4 signature below calls it with NULL: a sidecar calls that one on its own only when
-- the run's transaction was lost, so the run's duration is not known.
CREATE OR REPLACE FUNCTION webhook_inbox_charge_attempt(
        p_scope text, p_event_id text, p_seen_attempts integer, p_error text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_duration_ms double precision,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    delay_ms bigint := webhook_inbox_retry_delay_ms(p_seen_attempts, p_backoff_base_ms, p_backoff_cap_ms);
    last     boolean;
BEGIN
    UPDATE webhook_inbox w
       SET attempts = w.attempts + 1,
           last_error = left(p_error, 1000),
           next_attempt_at = clock_timestamp() + delay_ms * interval '1 millisecond',
           status = CASE WHEN w.attempts + 1 >= p_max_attempts THEN 'quarantined' ELSE 'pending' END,
           processed_at = CASE WHEN w.attempts + 1 >= p_max_attempts THEN clock_timestamp() END,
           attempt_log = webhook_inbox_log_append(w.attempt_log,
               webhook_inbox_log_entry(CASE WHEN w.attempts + 1 >= p_max_attempts THEN 'quarantined' ELSE 'retry' END,
                                       p_error, p_duration_ms))
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

-- As in 004, plus: the handler's run is timed, and quarantined / retry / waiting runs append
-- an attempt_log entry with that duration. 'done' is still left to the caller, who logs it.
CREATE OR REPLACE FUNCTION webhook_inbox_run_event(
        ev webhook_inbox, p_handler regproc, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        OUT result text, OUT detail text, OUT charged boolean, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    st  text;
    t0  timestamptz := clock_timestamp();
    ms  double precision;
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
    'Sidecar v4: run one claimed (locked) event''s handler or unrouted policy and record quarantined/retry/waiting on its row (with an attempt_log entry) in the caller''s transaction; ''done'' is left to the caller.';

-- As in 004, plus: latency_ms counts from requeued_at when the row was requeued, and done
-- rows get an attempt_log entry with their run's duration (last_error is still cleared:
-- it names the current problem; the log keeps the earlier failures). The done rows' UPDATE
-- is an EXECUTE, planned at each call with the batch's real size and the table's current
-- one: as a static statement PL/pgSQL kept the generic plan made when the sidecar connected,
-- on a young inbox a hash join over a sequential scan of webhook_inbox, so every batch read
-- the whole inbox as it grew (bench/pipeline: 3-10 ms per batch after a few minutes).
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
    'Sidecar v4: claim up to p_limit due events (FOR UPDATE SKIP LOCKED), run each handler in its own subtransaction, record done/quarantined/retry (charged, with backoff)/waiting and an attempt_log entry in the same transaction; one row per event; latency from requeued_at or received_at. Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';

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
      FROM webhook_inbox_run_event(ev, webhook_inbox_route(ev.event_type), p_unrouted, p_max_attempts,
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

-- Stats that scale: the same columns as before, each read through an index whose size
-- follows pending, quarantined or recent rows, never the whole table:
--   pending, oldest age, attempts, retrying  webhook_inbox_claim_idx (pending rows)
--   quarantined                              webhook_inbox_quarantined_idx
--   done, latency percentiles                webhook_inbox_done_idx, over the LAST HOUR
-- done is therefore "done in the last hour", and the latencies are those of the last
-- hour's done events, each from its receipt or its latest requeue to done.
CREATE OR REPLACE FUNCTION webhook_inbox_stats(
        OUT pending bigint, OUT oldest_pending_age_s double precision,
        OUT pending_attempts bigint, OUT retrying bigint, OUT quarantined bigint, OUT done bigint,
        OUT latency_p50_ms double precision, OUT latency_p95_ms double precision,
        OUT latency_p99_ms double precision)
LANGUAGE sql STABLE AS $$
    SELECT p.n, p.oldest, p.attempts, p.retrying, q.n, d.n, d.p50, d.p95, d.p99
      FROM (SELECT count(*) AS n,
                   coalesce(extract(epoch FROM now() - min(received_at)), 0)::float8 AS oldest,
                   coalesce(sum(attempts), 0)::bigint AS attempts,
                   count(*) FILTER (WHERE attempts > 0) AS retrying
              FROM webhook_inbox WHERE status = 'pending') p,
           (SELECT count(*) AS n FROM webhook_inbox WHERE status = 'quarantined') q,
           (SELECT count(*) AS n,
                   percentile_cont(0.50) WITHIN GROUP (ORDER BY l) AS p50,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY l) AS p95,
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY l) AS p99
              FROM (SELECT extract(epoch FROM processed_at - coalesce(requeued_at, received_at)) * 1000 AS l
                      FROM webhook_inbox
                     WHERE status = 'done' AND processed_at >= now() - interval '1 hour') r) d
$$;
COMMENT ON FUNCTION webhook_inbox_stats() IS
    'One row of inbox health: pending backlog, its oldest age, attempts and retrying; quarantined; done IN THE LAST HOUR and the latency percentiles (ms, receipt or latest requeue to done) of those. Reads only pending, quarantined and last-hour rows through partial indexes.';

-- Per-hour activity for charts: done and quarantined counts by the hour they finished,
-- the last p_hours hours (only those rows are read), and the done events' p95 latency.
CREATE OR REPLACE FUNCTION webhook_inbox_hourly(p_hours integer,
        OUT hour timestamptz, OUT done bigint, OUT quarantined bigint, OUT latency_p95_ms double precision)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    -- The window's start is written out in each WHERE (not taken from hours): the planner
    -- then estimates it from its value and walks the partial indexes instead of the table.
    WITH hours AS (
        SELECT generate_series(date_trunc('hour', now()) - (greatest(p_hours, 1) - 1) * interval '1 hour',
                               date_trunc('hour', now()), interval '1 hour') AS h
    ), d AS (
        SELECT date_trunc('hour', processed_at) AS h, count(*) AS n,
               percentile_cont(0.95) WITHIN GROUP (
                   ORDER BY extract(epoch FROM processed_at - coalesce(requeued_at, received_at)) * 1000) AS p95
          FROM webhook_inbox
         WHERE status = 'done'
           AND processed_at >= date_trunc('hour', now()) - (greatest(p_hours, 1) - 1) * interval '1 hour'
         GROUP BY 1
    ), q AS (
        SELECT date_trunc('hour', processed_at) AS h, count(*) AS n
          FROM webhook_inbox
         WHERE status = 'quarantined'
           AND processed_at >= date_trunc('hour', now()) - (greatest(p_hours, 1) - 1) * interval '1 hour'
         GROUP BY 1
    )
    SELECT hours.h, coalesce(d.n, 0), coalesce(q.n, 0), d.p95
      FROM hours LEFT JOIN d USING (h) LEFT JOIN q USING (h)
     ORDER BY hours.h
$$;
COMMENT ON FUNCTION webhook_inbox_hourly(integer) IS
    'Per hour over the last p_hours hours: done and quarantined counts by completion hour and the done events'' p95 latency (ms); reads only those hours'' rows.';

-- Attempts histogram of the rows not done (the sidecar's `stats` shows it), read through
-- the pending and quarantined partial indexes.
CREATE OR REPLACE FUNCTION webhook_inbox_attempts_histogram(OUT attempts integer, OUT events bigint)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT a, count(*) FROM (
        SELECT w.attempts AS a FROM webhook_inbox w WHERE w.status = 'pending'
        UNION ALL
        SELECT w.attempts FROM webhook_inbox w WHERE w.status = 'quarantined') t
     GROUP BY a ORDER BY a
$$;
COMMENT ON FUNCTION webhook_inbox_attempts_histogram() IS
    'Events not done, counted by attempts; reads only pending and quarantined rows (partial indexes).';

-- Requeue and replay, audited.
CREATE TABLE IF NOT EXISTS webhook_inbox_actions (
    id       bigserial   PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text        NOT NULL,
    action   text        NOT NULL CONSTRAINT webhook_inbox_actions_action_check CHECK (action IN ('requeue', 'replay')),
    filter   jsonb       NOT NULL,
    count    bigint      NOT NULL
);
COMMENT ON TABLE webhook_inbox_actions IS
    'Audit trail of operator actions on the inbox (dashboard, webhook_inbox_requeue()): who, when, what, on which filter, how many rows moved.';
COMMENT ON COLUMN webhook_inbox_actions.actor IS 'Who acted, as the caller named them (the dashboard''s dashboard_actor; ''unknown'' when none).';
COMMENT ON COLUMN webhook_inbox_actions.action IS 'requeue: quarantined -> pending; replay: done -> pending (e.g. after fixing a handler).';
COMMENT ON COLUMN webhook_inbox_actions.filter IS 'The filter as given: keys scope, event_id, type, from, to, error (see webhook_inbox_requeue).';
COMMENT ON COLUMN webhook_inbox_actions.count IS 'Rows moved back to pending.';

-- The WHERE clause for a filter (jsonb with any of: scope, event_id, type (exact, or
-- 'prefix*'), from, to (received_at range, [from, to)), error (case-insensitive substring of
-- last_error)) over rows of one status. Only fixed text: values are $1..$7 of the caller's
-- EXECUTE ... USING status, scope, event_id, type, from, to, error.
CREATE OR REPLACE FUNCTION webhook_inbox_filter_sql(p_filter jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    sql text := 'w.status = $1';
    k   text;
BEGIN
    IF p_filter IS NULL OR jsonb_typeof(p_filter) <> 'object' THEN
        RAISE EXCEPTION 'webhook_inbox: the filter must be a JSON object' USING ERRCODE = '22023';
    END IF;
    FOR k IN SELECT jsonb_object_keys(p_filter) LOOP
        IF k NOT IN ('scope', 'event_id', 'type', 'from', 'to', 'error') THEN
            RAISE EXCEPTION 'webhook_inbox: unknown filter key %', k USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF p_filter->>'scope' IS NOT NULL THEN sql := sql || ' AND w.source_scope = $2'; END IF;
    IF p_filter->>'event_id' IS NOT NULL THEN sql := sql || ' AND w.event_id = $3'; END IF;
    IF p_filter->>'type' LIKE '%*' THEN
        sql := sql || ' AND starts_with(w.event_type, left($4, -1))';
    ELSIF p_filter->>'type' IS NOT NULL THEN
        sql := sql || ' AND w.event_type = $4';
    END IF;
    IF p_filter->>'from' IS NOT NULL THEN sql := sql || ' AND w.received_at >= $5'; END IF;
    IF p_filter->>'to' IS NOT NULL THEN sql := sql || ' AND w.received_at < $6'; END IF;
    IF p_filter->>'error' IS NOT NULL THEN
        sql := sql || ' AND strpos(lower(w.last_error), lower($7)) > 0';
    END IF;
    RETURN sql;
END
$$;
COMMENT ON FUNCTION webhook_inbox_filter_sql(jsonb) IS
    'Internal: the WHERE clause (fixed text, values as $1..$7) for a requeue/replay filter.';

-- How many rows a requeue ('quarantined' rows) or replay ('done' rows) with p_filter would
-- move now: what the dashboard shows before the operator confirms.
CREATE OR REPLACE FUNCTION webhook_inbox_requeue_count(p_action text, p_filter jsonb) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    n bigint;
BEGIN
    IF p_action IS NULL OR p_action NOT IN ('requeue', 'replay') THEN
        RAISE EXCEPTION 'webhook_inbox: action must be requeue or replay, not %', p_action USING ERRCODE = '22023';
    END IF;
    EXECUTE 'SELECT count(*) FROM webhook_inbox w WHERE ' || webhook_inbox_filter_sql(p_filter) INTO n
      USING CASE p_action WHEN 'requeue' THEN 'quarantined' ELSE 'done' END,
            p_filter->>'scope', p_filter->>'event_id', p_filter->>'type',
            (p_filter->>'from')::timestamptz, (p_filter->>'to')::timestamptz, p_filter->>'error';
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_requeue_count(text, jsonb) IS
    'Rows that webhook_inbox_requeue(p_action, p_filter, ...) would move now (a preview to confirm).';

-- Moves the matching rows back to pending, due now, attempts 0 (a fresh set of retries):
--   'requeue'  quarantined -> pending      'replay'  done -> pending (runs the handler again)
-- requeued_at and a 'requeued' log entry come from the trigger; last_error and outcome are
-- kept until the next run settles them. Records one webhook_inbox_actions row (also when
-- nothing moved) and wakes the sidecars. An empty filter '{}' means every row of that
-- status: the caller decides whether to allow it. Returns the rows moved and the action id.
--   SELECT * FROM webhook_inbox_requeue('requeue', '{"type": "invoice.*", "error": "timeout"}', 'ops@example.com')
CREATE OR REPLACE FUNCTION webhook_inbox_requeue(p_action text, p_filter jsonb, p_actor text,
        OUT moved bigint, OUT action_id bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_action IS NULL OR p_action NOT IN ('requeue', 'replay') THEN
        RAISE EXCEPTION 'webhook_inbox: action must be requeue or replay, not %', p_action USING ERRCODE = '22023';
    END IF;
    EXECUTE 'WITH m AS (UPDATE webhook_inbox w SET status = ''pending'', attempts = 0, next_attempt_at = now(), '
            || 'processed_at = NULL WHERE ' || webhook_inbox_filter_sql(p_filter)
            || ' RETURNING 1) SELECT count(*) FROM m' INTO moved
      USING CASE p_action WHEN 'requeue' THEN 'quarantined' ELSE 'done' END,
            p_filter->>'scope', p_filter->>'event_id', p_filter->>'type',
            (p_filter->>'from')::timestamptz, (p_filter->>'to')::timestamptz, p_filter->>'error';
    INSERT INTO webhook_inbox_actions (actor, action, filter, count)
    VALUES (coalesce(nullif(p_actor, ''), 'unknown'), p_action, p_filter, moved)
    RETURNING id INTO action_id;
    IF moved > 0 THEN
        PERFORM pg_notify('webhook_inbox', '');
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_requeue(text, jsonb, text) IS
    'requeue (quarantined -> pending) or replay (done -> pending) the rows matching a filter {scope, event_id, type, from, to, error}; attempts reset, due now; audited in webhook_inbox_actions; returns rows moved and the action id.';

-- Signature and other rejections, counted per endpoint scope, reason and minute. The
-- receiver never writes here per request: each process adds its counts up in memory and
-- flushes them at most every few seconds (WebhookInbox::Rejections), so a flood of 401s
-- costs one upsert per scope, reason and flush. Never a body, header or address.
CREATE TABLE IF NOT EXISTS webhook_inbox_rejections (
    source_scope text        NOT NULL,
    reason       text        NOT NULL,
    minute       timestamptz NOT NULL,
    count        bigint      NOT NULL,
    PRIMARY KEY (source_scope, reason, minute)
);
COMMENT ON TABLE webhook_inbox_rejections IS
    'Rejected deliveries (401 signature/timestamp failures, 400, 413, 415) per endpoint scope, reason and minute, flushed from each process''s in-memory counters; never bodies. Rows older than 7 days are deleted by the flush.';
COMMENT ON COLUMN webhook_inbox_rejections.minute IS 'Start of the minute the rejections happened in (the flush''s clock).';

-- One flush: p_counts = [[scope, reason, minute (ISO 8601), count], ...] (jsonb, so a client
-- sends it as one parameter).
CREATE OR REPLACE FUNCTION webhook_inbox_record_rejections(p_counts jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO webhook_inbox_rejections AS r (source_scope, reason, minute, count)
    SELECT e->>0, left(e->>1, 100), date_trunc('minute', (e->>2)::timestamptz), sum((e->>3)::bigint)
      FROM jsonb_array_elements(p_counts) e
     GROUP BY 1, 2, 3
    ON CONFLICT (source_scope, reason, minute) DO UPDATE SET count = r.count + EXCLUDED.count;
    DELETE FROM webhook_inbox_rejections WHERE minute < now() - interval '7 days';
$$;
COMMENT ON FUNCTION webhook_inbox_record_rejections(jsonb) IS
    'Adds one flush of in-process rejection counts ([[scope, reason, minute, count], ...]) and forgets rows older than 7 days.';
