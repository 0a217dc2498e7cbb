-- functions/error_reports.sql - the C sidecar's quarantines, taken once each for the app's
-- Rails.error by a Ruby worker (db/025). Repeatable: every migrate applies it after the
-- numbered files (CREATE OR REPLACE; a signature that changes is dropped here first). The
-- only definition of each function below. Bodies are checked when called, so the files may
-- go in any order (a runner applies each file as one transaction).
SET LOCAL check_function_bodies = off;

-- Up to p_limit quarantines not reported yet, oldest first, each recorded in
-- webhook_inbox_error_reports in the caller's transaction: the caller reports them and then
-- commits. Another worker's call that picks the same quarantine waits on its row until this
-- transaction ends, then skips it (committed) or takes it (rolled back: a worker that died
-- before its commit; so at least once toward the tracker, once when nothing crashes).
-- Only quarantines since webhook_inbox_error_reporter.since (the table's creation; the first
-- call after that row was emptied starts it again from now), and
-- never one a Ruby handler's run caused: the worker reported that one when it ran.
-- The scan reads the events quarantined since then and not requeued, oldest first (an index
-- range, each checked against the reports' key) until p_limit new ones: its cost grows with
-- the quarantines already reported and still quarantined.
--   BEGIN; SELECT * FROM webhook_inbox_error_reports_take(100); -- report each --; COMMIT;
CREATE OR REPLACE FUNCTION webhook_inbox_error_reports_take(p_limit integer)
RETURNS TABLE (source_scope text, event_id text, event_type text, attempts integer, last_error text,
               processed_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_since timestamptz;
    q       record;
    n       integer := 0;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'webhook_inbox: limit must be >= 1' USING ERRCODE = '22023';
    END IF;
    SELECT s.since INTO v_since FROM webhook_inbox_error_reporter s;
    IF v_since IS NULL THEN -- emptied (a test suite's truncation): report from now on
        INSERT INTO webhook_inbox_error_reporter (id) VALUES (true) ON CONFLICT DO NOTHING;
        RETURN;
    END IF;
    -- Event by event, each statement on one table (no join of the inbox with the reports or
    -- the outbox: on Citus the inbox is distributed and they are not).
    FOR q IN SELECT w.source_scope, w.event_id, w.event_type, w.attempts, w.last_error, w.processed_at
               FROM webhook_inbox w
              WHERE w.status = 'quarantined' AND w.processed_at >= v_since
              ORDER BY w.processed_at
    LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM webhook_inbox_error_reports r
                               WHERE r.source_scope = q.source_scope AND r.event_id = q.event_id
                                 AND r.processed_at = q.processed_at);
        CONTINUE WHEN EXISTS (SELECT 1 FROM webhook_inbox_outbox o
                               WHERE o.destination = 'ruby' AND o.source_scope = q.source_scope
                                 AND o.source_event_id = q.event_id AND o.status = 'quarantined');
        -- Waits for another worker's uncommitted row of this quarantine, then skips it.
        INSERT INTO webhook_inbox_error_reports AS r (source_scope, event_id, processed_at)
        VALUES (q.source_scope, q.event_id, q.processed_at)
        ON CONFLICT DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        source_scope := q.source_scope;
        event_id := q.event_id;
        event_type := q.event_type;
        attempts := q.attempts;
        last_error := q.last_error;
        processed_at := q.processed_at;
        RETURN NEXT;
        n := n + 1;
        EXIT WHEN n >= p_limit;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_error_reports_take(integer) IS
    'Ruby worker: up to p_limit quarantines (since webhook_inbox_error_reporter.since, not a Ruby handler''s) not reported to Rails.error yet, recorded as reported in the caller''s transaction; commit after reporting them. Once each across workers.';
