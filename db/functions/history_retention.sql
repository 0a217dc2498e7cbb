-- functions/history_retention.sql - each event's attempt log, requeue, the filters of bulk actions.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- One attempt_log entry stamped p_at. detail is cut to 1000 characters, like last_error.
-- STABLE, a SQL function of no table and no SET: PostgreSQL inlines it into the statement that
-- calls it with clock_timestamp() (webhook_inbox_log_entry below, and the done marks of a
-- Citus worker's batch, webhook_inbox_dispatch_claimed: there webhook_inbox_log_entry is
-- labelled IMMUTABLE over a volatile body, db/citus/001, so it is not inlined, and ran as a SQL
-- function per row - about 4 us a row, issue 30).
CREATE OR REPLACE FUNCTION webhook_inbox_log_entry_at(p_at timestamptz, p_result text, p_detail text,
                                                      p_duration_ms double precision)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('at', to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                              'result', p_result, 'detail', left(p_detail, 1000),
                              'duration_ms', round(p_duration_ms::numeric, 3))
$$;
COMMENT ON FUNCTION webhook_inbox_log_entry_at(timestamptz, text, text, double precision) IS
    'One attempt_log entry {at, result, detail (<= 1000 chars), duration_ms} stamped p_at in UTC (webhook_inbox_log_entry: now, by the clock).';

-- One attempt_log entry stamped with the clock (clock_timestamp(), per row of a statement).
CREATE OR REPLACE FUNCTION webhook_inbox_log_entry(p_result text, p_detail text, p_duration_ms double precision)
RETURNS jsonb
LANGUAGE sql VOLATILE AS $$
    SELECT webhook_inbox_log_entry_at(clock_timestamp(), p_result, p_detail, p_duration_ms)
$$;
COMMENT ON FUNCTION webhook_inbox_log_entry(text, text, double precision) IS
    'One attempt_log entry {at, result, detail (<= 1000 chars), duration_ms} stamped with clock_timestamp() in UTC.';

-- log with entry appended, the oldest dropped beyond 50 entries; p_entry is never NULL
-- (webhook_inbox_log_entry's; a NULL makes the result NULL). Only immutable calls (jsonb_insert,
-- not jsonb_build_array, which is STABLE), so PostgreSQL inlines it: run as a SQL function it
-- cost about 3.5 us a row in the batch's done UPDATE. p_entry, often a volatile call, stays
-- outside the CASE and COALESCE: Citus refuses a non-IMMUTABLE call inside one in an UPDATE.
CREATE OR REPLACE FUNCTION webhook_inbox_log_append(p_log jsonb, p_entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_insert(CASE WHEN jsonb_array_length(coalesce(p_log, '[]')) >= 50 THEN p_log - 0
                             ELSE coalesce(p_log, '[]') END,
                        '{-1}', p_entry, true)
$$;
COMMENT ON FUNCTION webhook_inbox_log_append(jsonb, jsonb) IS
    'attempt_log with one entry appended, keeping the last 50.';

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

-- Requeue and replay (and their counts) never move an emptied row: it has no payload left
-- to run. Otherwise as in 005: the WHERE clause for a filter, values as $1..$7.
CREATE OR REPLACE FUNCTION webhook_inbox_filter_sql(p_filter jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    sql text := 'w.status = $1 AND w.pruned_at IS NULL';
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
    'Internal: the WHERE clause (fixed text, values as $1..$7) for a requeue/replay filter; never an emptied (pruned) row.';

-- Deletes up to p_limit rows of webhook_inbox_error_reports whose quarantine is over: the
-- event is gone (retention), or no longer quarantined at that processed_at (requeued, then
-- done or quarantined again: a new quarantine, with a new key). So reports live as long as
-- their quarantine. The Ruby worker calls it about once a minute; returns the rows deleted.
CREATE OR REPLACE FUNCTION webhook_inbox_error_reports_prune(p_limit integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    r    record;
    gone bigint := 0;
BEGIN
    -- Report by report, each statement on one table (on Citus the inbox is distributed, the
    -- reports are not). Another pruner's rows are skipped, not waited for.
    FOR r IN SELECT e.source_scope, e.event_id, e.processed_at FROM webhook_inbox_error_reports e
              ORDER BY e.reported_at FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN gone >= p_limit;
        CONTINUE WHEN EXISTS (SELECT 1 FROM webhook_inbox w
                               WHERE w.source_scope = r.source_scope AND w.event_id = r.event_id
                                 AND w.status = 'quarantined' AND w.processed_at = r.processed_at);
        DELETE FROM webhook_inbox_error_reports e
         WHERE e.source_scope = r.source_scope AND e.event_id = r.event_id AND e.processed_at = r.processed_at;
        gone := gone + 1;
    END LOOP;
    RETURN gone;
END
$$;
COMMENT ON FUNCTION webhook_inbox_error_reports_prune(integer) IS
    'Deletes up to p_limit Rails.error report rows whose quarantine is over (event gone, or no longer quarantined at that processed_at); returns how many.';
