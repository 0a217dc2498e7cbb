-- functions/error_reports.sql - the C sidecar's quarantines, taken once each for the app's
-- Rails.error by a Ruby worker (db/025). Repeatable: every migrate applies it after the
-- numbered files (CREATE OR REPLACE; a signature that changes is dropped here first). The
-- only definition of each function below. Bodies are checked when called, so the files may
-- go in any order (a runner applies each file as one transaction).
SET LOCAL check_function_bodies = off;

-- The reporters' scans (this file's take and app_reports.sql's two), each over its own kind
-- of row with its own watermark in webhook_inbox_error_reporter ('quarantines': since,
-- 'recoveries': recovered_since, 'effects': effects_since).
-- webhook_inbox_report_scan: where a take's scan starts: at the watermark for a full scan
-- (p_window_s NULL, or >= p_grace_s); else p_window_s seconds before now, never before the
-- watermark. Both NULL when the reporter's row was emptied (a test suite's truncation): it is
-- made again, and reports start from now on. Raises 22023 on a limit below 1 or a negative
-- grace or window.
DROP FUNCTION IF EXISTS webhook_inbox_report_scan_from(integer, double precision, double precision, timestamptz);
CREATE OR REPLACE FUNCTION webhook_inbox_report_scan(p_kind text, p_limit integer, p_grace_s double precision,
                                                     p_window_s double precision, OUT since timestamptz,
                                                     OUT scan_from timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_grace_s IS NULL OR p_grace_s < 0 OR p_window_s < 0 THEN
        RAISE EXCEPTION 'webhook_inbox: limit must be >= 1, grace and window >= 0' USING ERRCODE = '22023';
    END IF;
    SELECT CASE p_kind WHEN 'quarantines' THEN s.since WHEN 'recoveries' THEN s.recovered_since
                       WHEN 'effects' THEN s.effects_since END
      INTO since FROM webhook_inbox_error_reporter s;
    IF since IS NULL THEN
        INSERT INTO webhook_inbox_error_reporter (id) VALUES (true) ON CONFLICT DO NOTHING;
        RETURN;
    END IF;
    scan_from := CASE WHEN p_window_s IS NULL OR p_window_s >= p_grace_s THEN since
                      ELSE greatest(since, now() - p_window_s * interval '1 second') END;
END
$$;
COMMENT ON FUNCTION webhook_inbox_report_scan(text, integer, double precision, double precision) IS
    'Internal: where a reporter''s take of p_kind (quarantines, recoveries, effects) scans from: its watermark for a full scan, else p_window_s seconds before now (not before the watermark); NULLs after the reporter''s row was emptied; checks the take''s arguments.';

-- After a take of p_kind whose scan started at p_from (the watermark p_since for a full scan)
-- and returned p_taken rows: a full scan that saw every row (fewer than p_limit taken) moves the
-- watermark to p_grace_s before now; a short scan never moves it.
CREATE OR REPLACE FUNCTION webhook_inbox_report_scanned(p_kind text, p_since timestamptz, p_from timestamptz,
                                                        p_taken integer, p_limit integer, p_grace_s double precision)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    mark timestamptz := now() - p_grace_s * interval '1 second';
BEGIN
    IF p_from IS DISTINCT FROM p_since OR p_taken >= p_limit THEN
        RETURN;
    END IF;
    UPDATE webhook_inbox_error_reporter s
       SET since = CASE WHEN p_kind = 'quarantines' THEN mark ELSE s.since END,
           recovered_since = CASE WHEN p_kind = 'recoveries' THEN mark ELSE s.recovered_since END,
           effects_since = CASE WHEN p_kind = 'effects' THEN mark ELSE s.effects_since END
     WHERE CASE p_kind WHEN 'quarantines' THEN s.since WHEN 'recoveries' THEN s.recovered_since
                       WHEN 'effects' THEN s.effects_since END < mark;
END
$$;
COMMENT ON FUNCTION webhook_inbox_report_scanned(text, timestamptz, timestamptz, integer, integer, double precision) IS
    'Internal: after a reporter''s take of p_kind, a full scan that saw every row moves that kind''s watermark to p_grace_s before now.';

-- Up to p_limit quarantines not reported yet, oldest first, each recorded in
-- webhook_inbox_error_reports in the caller's transaction: the caller reports them and then
-- commits. Another worker's call that picks the same quarantine waits on its row until this
-- transaction ends, then skips it (committed) or takes it (rolled back: a worker that died
-- before its commit; so at least once toward the tracker, once when nothing crashes).
-- A Ruby handler's quarantine is recorded too but not returned: the worker reported it when
-- its run committed. handler: the handler of the route the event type takes now
-- (webhook_inbox_route_match; NULL when unrouted).
-- The scan starts at webhook_inbox_error_reporter.since, a watermark: the table's creation
-- (no history is reported; the first call after that row was emptied starts it again from
-- now), moved on by each full scan that saw every quarantine to p_grace_s seconds before now.
-- A full scan (p_window_s NULL, or >= p_grace_s) rereads the last p_grace_s seconds of
-- quarantines, one index probe each; a short one reads only the last p_window_s seconds
-- (from the watermark at most) and never moves it: the Ruby worker's polls are short, with a
-- full scan about once a minute. So a quarantine whose transaction commits more than
-- p_window_s after it set processed_at is reported by the next full scan, and one that
-- commits more than p_grace_s after (a sidecar batch stuck that long) is never reported.
--   BEGIN; SELECT * FROM webhook_inbox_error_reports_take(100, 3600, 10); -- report each --; COMMIT;
DROP FUNCTION IF EXISTS webhook_inbox_error_reports_take(integer);
DROP FUNCTION IF EXISTS webhook_inbox_error_reports_take(integer, double precision);
CREATE OR REPLACE FUNCTION webhook_inbox_error_reports_take(p_limit integer, p_grace_s double precision,
                                                            p_window_s double precision DEFAULT NULL)
RETURNS TABLE (source_scope text, event_id text, event_type text, attempts integer, last_error text,
               processed_at timestamptz, handler text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_since timestamptz;
    v_from  timestamptz;
    q       record;
    n       integer := 0;
BEGIN
    SELECT r.since, r.scan_from INTO v_since, v_from FROM webhook_inbox_report_scan('quarantines', p_limit, p_grace_s, p_window_s) r;
    IF v_since IS NULL THEN -- emptied (a test suite's truncation): report from now on
        RETURN;
    END IF;
    -- Event by event, each statement on one table (no join of the inbox with the reports or
    -- the outbox: on Citus the inbox is distributed and they are not).
    FOR q IN SELECT w.source_scope, w.event_id, w.event_type, w.attempts, w.last_error, w.processed_at
               FROM webhook_inbox w
              WHERE w.status = 'quarantined' AND w.processed_at >= v_from
              ORDER BY w.processed_at
    LOOP
        -- Skips one already recorded; waits for another worker's uncommitted row of it.
        INSERT INTO webhook_inbox_error_reports AS r (source_scope, event_id, processed_at)
        VALUES (q.source_scope, q.event_id, q.processed_at)
        ON CONFLICT DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN EXISTS (SELECT 1 FROM webhook_inbox_outbox o
                               WHERE o.destination = 'ruby' AND o.source_scope = q.source_scope
                                 AND o.source_event_id = q.event_id AND o.status = 'quarantined');
        source_scope := q.source_scope;
        event_id := q.event_id;
        event_type := q.event_type;
        attempts := q.attempts;
        last_error := q.last_error;
        processed_at := q.processed_at;
        handler := (webhook_inbox_route_match(q.event_type)).handler::text;
        RETURN NEXT;
        n := n + 1;
        EXIT WHEN n >= p_limit;
    END LOOP;
    PERFORM webhook_inbox_report_scanned('quarantines', v_since, v_from, n, p_limit, p_grace_s);
END
$$;
COMMENT ON FUNCTION webhook_inbox_error_reports_take(integer, double precision, double precision) IS
    'Ruby worker: up to p_limit quarantines (since the watermark webhook_inbox_error_reporter.since, moved to p_grace_s before now by a complete full scan; of the last p_window_s seconds only when given; not a Ruby handler''s) not reported to Rails.error yet, with their route''s handler, recorded as reported in the caller''s transaction; commit after reporting them. Once each across workers.';
