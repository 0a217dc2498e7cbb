-- functions/stats.sql - the numbers behind stats, metrics and the dashboard.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Stats that scale: the same columns as before, each read through an index whose size
-- follows pending, quarantined or recent rows, never the whole table:
--   pending, oldest age, attempts, retrying  webhook_inbox_claim_idx (pending rows); retrying also
--                                            counts pending events charged on a Ruby handler run
--                                            (webhook_inbox_outbox_claim_idx: pending Ruby runs)
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
    SELECT p.n, p.oldest, p.attempts, p.retrying + rr.n, q.n, d.n, d.p50, d.p95, d.p99
      FROM (SELECT count(*) AS n,
                   coalesce(extract(epoch FROM now() - min(received_at)), 0)::float8 AS oldest,
                   coalesce(sum(attempts), 0)::bigint AS attempts,
                   count(*) FILTER (WHERE attempts > 0) AS retrying
              FROM webhook_inbox WHERE status = 'pending') p,
           -- pending events charged only on a Ruby handler run (the dashboard's retrying filter)
           (SELECT count(*) AS n
              FROM (SELECT DISTINCT o.source_scope, o.source_event_id FROM webhook_inbox_outbox o
                     WHERE o.destination = 'ruby' AND o.status = 'pending' AND o.attempts > 0
                       AND EXISTS (SELECT 1 FROM webhook_inbox w
                                    WHERE w.source_scope = o.source_scope AND w.event_id = o.source_event_id
                                      AND w.status = 'pending' AND w.attempts = 0)) x) rr,
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
    'One row of inbox health: pending backlog, its oldest age, attempts and retrying (an attempt charged on the event or on one of its Ruby handler runs); quarantined; done IN THE LAST HOUR and the latency percentiles (ms, receipt or latest requeue to done) of those. Reads only pending, quarantined and last-hour rows through partial indexes.';

-- Per-hour activity for charts: done and quarantined counts by the hour they finished,
-- the last p_hours hours (only those rows are read), and the done events' p95 latency.
-- PL/pgSQL (Citus cannot plan a SQL function's query over a distributed table), planned at
-- each call with the window's value (force_custom_plan), as the SQL function was.
CREATE OR REPLACE FUNCTION webhook_inbox_hourly(p_hours integer,
        OUT hour timestamptz, OUT done bigint, OUT quarantined bigint, OUT latency_p95_ms double precision)
RETURNS SETOF record
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_custom_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
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
     ORDER BY hours.h;
END
$$;
COMMENT ON FUNCTION webhook_inbox_hourly(integer) IS
    'Per hour over the last p_hours hours: done and quarantined counts by completion hour and the done events'' p95 latency (ms); reads only those hours'' rows.';

-- Attempts histogram of the rows not done (the sidecar's `stats` shows it), read through
-- the pending and quarantined partial indexes.
-- PL/pgSQL: Citus cannot plan a SQL function's query over a distributed table.
CREATE OR REPLACE FUNCTION webhook_inbox_attempts_histogram(OUT attempts integer, OUT events bigint)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT a, count(*) FROM (
        SELECT w.attempts AS a FROM webhook_inbox w WHERE w.status = 'pending'
        UNION ALL
        SELECT w.attempts FROM webhook_inbox w WHERE w.status = 'quarantined') t
     GROUP BY a ORDER BY a;
END
$$;
COMMENT ON FUNCTION webhook_inbox_attempts_histogram() IS
    'Events not done, counted by attempts; reads only pending and quarantined rows (partial indexes).';
