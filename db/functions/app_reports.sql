-- functions/app_reports.sql - more of what the C sidecar did, taken once each for the app by
-- a Ruby worker (db/027): reconcile's recoveries (recover.webhook_inbox) and the HTTP effects
-- its outbox delivery quarantined (Rails.error). Repeatable: every migrate applies it after
-- the numbered files (CREATE OR REPLACE; a signature that changes is dropped here first). The
-- only definition of each function below. Bodies are checked when called, so the files may go
-- in any order (a runner applies each file as one transaction).
SET LOCAL check_function_bodies = off;

-- Up to p_limit recovered events not published yet, oldest recovery first, each recorded in
-- webhook_inbox_recovery_reports in the caller's transaction: the caller publishes them and
-- then commits (the same exactly-once design as webhook_inbox_error_reports_take: a second
-- worker waits on the first's row, then skips it or, after a rollback, takes it). how:
-- 'fetched' (inserted from the provider's event list: Stripe, Paddle, Square) or
-- 'redelivered' (a redelivery reconcile asked for, stored by the receiver and marked by
-- webhook_inbox_reconcile_mark: GitHub). The scan (webhook_inbox_report_scan, _scanned: error_reports.sql) and its watermark,
-- webhook_inbox_error_reporter.recovered_since, work as the quarantines' do: a full scan
-- (p_window_s NULL or >= p_grace_s) rereads the last p_grace_s seconds and moves the
-- watermark; a short one reads the last p_window_s seconds only. A recovery whose transaction
-- commits more than p_grace_s after it set recovered_at is never published.
--   BEGIN; SELECT * FROM webhook_inbox_recovery_reports_take(100, 3600, 10); -- publish each --; COMMIT;
CREATE OR REPLACE FUNCTION webhook_inbox_recovery_reports_take(p_limit integer, p_grace_s double precision,
                                                               p_window_s double precision DEFAULT NULL)
RETURNS TABLE (source_scope text, event_id text, event_type text, how text, recovered_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_since timestamptz;
    v_from  timestamptz;
    q       record;
    n       integer := 0;
BEGIN
    SELECT r.since, r.scan_from INTO v_since, v_from FROM webhook_inbox_report_scan('recoveries', p_limit, p_grace_s, p_window_s) r;
    IF v_since IS NULL THEN -- emptied (a test suite's truncation): publish from now on
        RETURN;
    END IF;
    -- Event by event, each statement on one table (on Citus the inbox is distributed, the
    -- reports are not).
    FOR q IN SELECT w.source_scope, w.event_id, w.event_type, w.recovered_at, w.request_headers IS NOT NULL AS received
               FROM webhook_inbox w
              WHERE w.recovered_at >= v_from
              ORDER BY w.recovered_at
    LOOP
        -- Skips one already recorded; waits for another worker's uncommitted row of it.
        INSERT INTO webhook_inbox_recovery_reports AS r (source_scope, event_id, recovered_at)
        VALUES (q.source_scope, q.event_id, q.recovered_at)
        ON CONFLICT DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        source_scope := q.source_scope;
        event_id := q.event_id;
        event_type := q.event_type;
        how := CASE WHEN q.received THEN 'redelivered' ELSE 'fetched' END;
        recovered_at := q.recovered_at;
        RETURN NEXT;
        n := n + 1;
        EXIT WHEN n >= p_limit;
    END LOOP;
    PERFORM webhook_inbox_report_scanned('recoveries', v_since, v_from, n, p_limit, p_grace_s);
END
$$;
COMMENT ON FUNCTION webhook_inbox_recovery_reports_take(integer, double precision, double precision) IS
    'Ruby worker: up to p_limit events reconcile recovered (since the watermark webhook_inbox_error_reporter.recovered_since, moved to p_grace_s before now by a complete full scan; of the last p_window_s seconds only when given) not published to the app yet, recorded as published in the caller''s transaction; commit after publishing them. Once each across workers.';

-- Up to p_limit quarantined HTTP effects not reported yet, oldest quarantine first, each
-- recorded in webhook_inbox_effect_reports in the caller's transaction: the caller reports
-- them and then commits (the exactly-once design of webhook_inbox_error_reports_take: a
-- second worker waits on the first's row, then skips it or, after a rollback, takes it).
-- Effects of the destinations the Ruby worker performs itself ('ruby': handler runs,
-- 'active_job': jobs and mails) are not these: it reports them when it quarantines them.
-- last_error is the sidecar's own text (an HTTP status, curl's generic error, max attempts:
-- never the URL, the request's body or a credential); the answer's body is not returned.
-- The scan (webhook_inbox_report_scan, _scanned: error_reports.sql) and its watermark,
-- webhook_inbox_error_reporter.effects_since, work as the quarantines' do.
--   BEGIN; SELECT * FROM webhook_inbox_effect_reports_take(100, 3600, 10); -- report each --; COMMIT;
CREATE OR REPLACE FUNCTION webhook_inbox_effect_reports_take(p_limit integer, p_grace_s double precision,
                                                             p_window_s double precision DEFAULT NULL)
RETURNS TABLE (source_scope text, operation_id text, destination text, source_event_id text, attempts integer,
               last_error text, response_status integer, processed_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_since timestamptz;
    v_from  timestamptz;
    q       record;
    n       integer := 0;
BEGIN
    SELECT r.since, r.scan_from INTO v_since, v_from FROM webhook_inbox_report_scan('effects', p_limit, p_grace_s, p_window_s) r;
    IF v_since IS NULL THEN -- emptied (a test suite's truncation): report from now on
        RETURN;
    END IF;
    -- Effect by effect, each statement on one table (on Citus the outbox is distributed, the
    -- reports are not).
    FOR q IN SELECT o.source_scope, o.operation_id, o.destination, o.source_event_id, o.attempts, o.last_error,
                    o.response_status, o.processed_at
               FROM webhook_inbox_outbox o
              WHERE o.status = 'quarantined' AND o.processed_at >= v_from
                AND o.destination <> 'ruby' AND o.destination <> 'active_job'
              ORDER BY o.processed_at
    LOOP
        -- Skips one already recorded; waits for another worker's uncommitted row of it.
        INSERT INTO webhook_inbox_effect_reports AS r (source_scope, operation_id, processed_at)
        VALUES (q.source_scope, q.operation_id, q.processed_at)
        ON CONFLICT DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        source_scope := q.source_scope;
        operation_id := q.operation_id;
        destination := q.destination;
        source_event_id := q.source_event_id;
        attempts := q.attempts;
        last_error := q.last_error;
        response_status := q.response_status;
        processed_at := q.processed_at;
        RETURN NEXT;
        n := n + 1;
        EXIT WHEN n >= p_limit;
    END LOOP;
    PERFORM webhook_inbox_report_scanned('effects', v_since, v_from, n, p_limit, p_grace_s);
END
$$;
COMMENT ON FUNCTION webhook_inbox_effect_reports_take(integer, double precision, double precision) IS
    'Ruby worker: up to p_limit HTTP effects the sidecar quarantined (not the ruby or active_job destinations; since the watermark webhook_inbox_error_reporter.effects_since, moved to p_grace_s before now by a complete full scan; of the last p_window_s seconds only when given) not reported to Rails.error yet, recorded as reported in the caller''s transaction; commit after reporting them. Once each across workers.';

-- Deletes up to p_limit rows of webhook_inbox_recovery_reports and as many of
-- webhook_inbox_effect_reports behind their watermarks (recovered_since, effects_since): no
-- scan reads them again, so they can no longer be taken twice. The Ruby worker calls it about
-- once a minute; returns the rows deleted. Rows another pruner holds are skipped.
CREATE OR REPLACE FUNCTION webhook_inbox_app_reports_prune(p_limit integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    recoveries bigint;
    effects    bigint;
BEGIN
    WITH old AS (
        SELECT r.source_scope, r.event_id, r.recovered_at FROM webhook_inbox_recovery_reports r
         WHERE r.recovered_at < (SELECT s.recovered_since FROM webhook_inbox_error_reporter s)
         ORDER BY r.recovered_at LIMIT greatest(p_limit, 1) FOR UPDATE SKIP LOCKED),
    d AS (
        DELETE FROM webhook_inbox_recovery_reports r USING old
         WHERE r.source_scope = old.source_scope AND r.event_id = old.event_id AND r.recovered_at = old.recovered_at
        RETURNING 1)
    SELECT count(*) INTO recoveries FROM d;
    WITH old AS (
        SELECT r.source_scope, r.operation_id, r.processed_at FROM webhook_inbox_effect_reports r
         WHERE r.processed_at < (SELECT s.effects_since FROM webhook_inbox_error_reporter s)
         ORDER BY r.processed_at LIMIT greatest(p_limit, 1) FOR UPDATE SKIP LOCKED),
    d AS (
        DELETE FROM webhook_inbox_effect_reports r USING old
         WHERE r.source_scope = old.source_scope AND r.operation_id = old.operation_id AND r.processed_at = old.processed_at
        RETURNING 1)
    SELECT count(*) INTO effects FROM d;
    RETURN recoveries + effects;
END
$$;
COMMENT ON FUNCTION webhook_inbox_app_reports_prune(integer) IS
    'Deletes up to p_limit recovery and p_limit effect report rows behind their watermarks in webhook_inbox_error_reporter (never read again); returns how many.';
