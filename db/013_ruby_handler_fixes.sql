-- 013_ruby_handler_fixes.sql - schema version 13: Ruby handler runs are charged before they
-- run, each in a transaction of its own, locking its event before its run (as dispatch does).
-- Idempotent: safe to re-run. Applied after the files numbered below it.
--
-- 009's worker ran a batch of runs in one transaction and charged a run only when it saved
-- it: a handler that killed its process (exit!, kill -9, a segfault, the OOM killer) was
-- never charged and its batch-mates ran again with it, forever. It also held each run's lock
-- from the claim and took the event's at the save, the reverse of dispatch (event, then the
-- run: webhook_inbox_run_ruby on a requeue), so the two could deadlock. From 013 the worker
-- (lib/webhook_inbox/handlers/runner.rb) does, per run:
--   1. webhook_inbox_ruby_start, committed before the handler runs (with the previous run's
--      result, else alone): one due run, charged (attempts + 1) and leased for its backoff,
--      so a run whose process died is due again after it, charged, and quarantined when it
--      had its last attempt (exhausted);
--   2. webhook_inbox_ruby_lock: its event's row, then the run's, fenced by the attempt number;
--   3. the handler in a savepoint, then webhook_inbox_ruby_finish (no second charge) in the
--      same transaction, which settles the event as 009 does.
-- 009's webhook_inbox_ruby_claim and webhook_inbox_ruby_save stay as they were, for workers of
-- the previous release during a rolling deploy.
--
-- The SQL route's once-markers (webhook_inbox_effects_received rows named 'sql:<route>',
-- which webhook_inbox_run_ruby writes) were never deleted. They now carry their event's key
-- (source_scope, source_event_id: the markers 009 wrote get theirs below, or go when their
-- event is gone), and prune and retention (sidecar/src/prune.c) delete them with the events
-- they empty or delete, in the same bounded statements.
--
-- Functions defined here (new): webhook_inbox_ruby_start, webhook_inbox_ruby_lock,
-- webhook_inbox_ruby_finish. Redefined: webhook_inbox_schema_version, webhook_inbox_run_ruby
-- (009's, writing the marker's event key; nothing else changes), webhook_inbox_ruby_settle
-- (009's, without concat_ws over a column, which Citus refuses in an UPDATE).
--
-- Additive: webhook_inbox_schema_min_worker() stays 4.
--
-- The dashboard's effect queries get indexes (app/models/webhook_inbox/effect_list.rb): the
-- list, newest first by (created_at, operation_id), and an event's effects other than its
-- Ruby runs (which 009's index serves).
--
-- On a large outbox or webhook_inbox_effects_received, CREATE INDEX below blocks effect
-- inserts while it builds. Build them first without blocking, outside a transaction:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_effects_received_event_idx
--     ON webhook_inbox_effects_received (source_scope, source_event_id) WHERE source_event_id IS NOT NULL;
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_outbox_created_idx
--     ON webhook_inbox_outbox (created_at, operation_id);
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_outbox_event_idx
--     ON webhook_inbox_outbox (source_scope, source_event_id, created_at, operation_id) WHERE destination <> 'ruby';

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 13 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- Step 1. One due run (oldest due first, SKIP LOCKED: a run another worker is running is
-- locked by it), charged and leased: attempts + 1, due again after the backoff a failure
-- would get. Run it only after this commits. A run already at p_max_attempts is not charged
-- again: exhausted (its last attempt started and never finished), the caller quarantines it.
-- No row: nothing due. Touches the outbox only (no event lock: it can run in the previous
-- run's transaction without a second lock order).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_start(p_max_attempts integer, p_backoff_base_ms bigint,
        p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, attempt integer, exhausted boolean)
LANGUAGE sql AS $$
    WITH due AS (
        SELECT o.operation_id, o.attempts
          FROM webhook_inbox_outbox o
         WHERE o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
         ORDER BY o.next_attempt_at, o.created_at
         LIMIT 1
           FOR UPDATE SKIP LOCKED
    )
    UPDATE webhook_inbox_outbox o
       SET attempts = o.attempts + CASE WHEN d.attempts < p_max_attempts THEN 1 ELSE 0 END,
           last_attempt_at = clock_timestamp(),
           next_attempt_at = clock_timestamp()
                             + webhook_inbox_retry_delay_ms(d.attempts, p_backoff_base_ms, p_backoff_cap_ms) * interval '1 millisecond'
      FROM due d
     WHERE o.operation_id = d.operation_id
    RETURNING o.operation_id, o.attempts, d.attempts >= p_max_attempts
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_start(integer, bigint, bigint) IS
    'Ruby worker, step 1 (committed before the handler runs): take one due run, charge it (attempts + 1) and lease it for its backoff; exhausted when it had its last attempt already.';

-- Step 2, in the transaction that runs the handler: locks the run's event (first, as
-- dispatch does), then the run, if it is still pending at p_attempt (nobody else started it
-- since: a lease that ran out). Returns the run with its event's columns (event columns NULL
-- when the event is gone), or no row: skip it. Two statements, no join of the outbox with
-- the inbox (on Citus the inbox is distributed and the outbox is not).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock(p_operation_id text, p_attempt integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    run webhook_inbox_outbox;
    ev  webhook_inbox;
BEGIN
    SELECT * INTO run FROM webhook_inbox_outbox o WHERE o.operation_id = p_operation_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id
       FOR UPDATE;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id AND o.destination = 'ruby' AND o.status = 'pending'
       AND o.attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT run.operation_id, run.payload->>'handler', p_attempt, run.source_scope, run.source_event_id,
                        ev.event_type, ev.payload::text,
                        CASE WHEN ev.payload IS NULL AND ev.raw_body IS NOT NULL
                             THEN translate(encode(ev.raw_body, 'base64'), E'\n', '') END,
                        ev.received_at;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock(text, integer) IS
    'Ruby worker, step 2: lock the run''s event, then the run if still pending at p_attempt; the run with its event''s columns, or no row (skip it).';

-- Step 3, after the handler, in the same transaction: as 009's webhook_inbox_ruby_save, but
-- the attempt was charged at the start: 'retry' waits the backoff of attempt - 1 earlier
-- failures and quarantines at p_max_attempts; 'quarantine' (WebhookInbox::Permanent, or an
-- exhausted run) quarantines. Settles the event (its row is already locked: step 2).
-- Returns the run's new status, NULL when it is not the run locked at p_attempt.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_finish(
        p_operation_id text, p_attempt integer, p_result text, p_error text, p_duration_ms double precision,
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    run webhook_inbox_outbox;
    st  text;
BEGIN
    IF p_result IS NULL OR p_result NOT IN ('done', 'retry', 'quarantine') THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_finish: p_result must be done, retry or quarantine, not %', p_result
              USING ERRCODE = '22023';
    END IF;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id AND o.destination = 'ruby' AND o.status = 'pending' AND o.attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    st := CASE WHEN p_result = 'done' THEN 'delivered'
               WHEN p_result = 'quarantine' OR run.attempts >= p_max_attempts THEN 'quarantined'
               ELSE 'pending' END;
    UPDATE webhook_inbox_outbox o
       SET status = st,
           processed_at = CASE WHEN st <> 'pending' THEN clock_timestamp() END,
           last_error = CASE WHEN p_result = 'done' THEN NULL ELSE left(p_error, 1000) END,
           next_attempt_at = CASE WHEN st = 'pending'
                                  THEN clock_timestamp() + webhook_inbox_retry_delay_ms(o.attempts - 1, p_backoff_base_ms, p_backoff_cap_ms)
                                                           * interval '1 millisecond'
                                  ELSE o.next_attempt_at END
     WHERE o.operation_id = p_operation_id
    RETURNING o.* INTO run;
    PERFORM webhook_inbox_ruby_settle(run, p_duration_ms);
    RETURN run.status;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_finish(text, integer, text, text, double precision, integer, bigint, bigint) IS
    'Ruby worker, step 3: record the run''s result (done/retry/quarantine) for the attempt charged at its start and settle its event; returns the run''s new status (NULL: not that pending run).';

ALTER TABLE webhook_inbox_effects_received ADD COLUMN IF NOT EXISTS source_scope text;
ALTER TABLE webhook_inbox_effects_received ADD COLUMN IF NOT EXISTS source_event_id text;
COMMENT ON COLUMN webhook_inbox_effects_received.source_scope IS
    'For a SQL route''s once-marker (name sql:<route>, v13 on): its event''s scope, so prune deletes it with the event; NULL for receive_effect''s rows.';
COMMENT ON COLUMN webhook_inbox_effects_received.source_event_id IS
    'For a SQL route''s once-marker: its event''s id (see source_scope).';
CREATE INDEX IF NOT EXISTS webhook_inbox_effects_received_event_idx
    ON webhook_inbox_effects_received (source_scope, source_event_id) WHERE source_event_id IS NOT NULL;
COMMENT ON INDEX webhook_inbox_effects_received_event_idx IS
    'The once-markers of one event: deleted with it by prune and retention (sidecar/src/prune.c).';

CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_created_idx ON webhook_inbox_outbox (created_at, operation_id);
COMMENT ON INDEX webhook_inbox_outbox_created_idx IS
    'The dashboard''s effects list: keyset pages newest first by (created_at, operation_id), and its time range.';
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_event_idx
    ON webhook_inbox_outbox (source_scope, source_event_id, created_at, operation_id) WHERE destination <> 'ruby';
COMMENT ON INDEX webhook_inbox_outbox_event_idx IS
    'The effects an event emitted (other than its Ruby runs: webhook_inbox_outbox_ruby_event_idx), in order: the dashboard''s event page and its scope / event filters.';

-- The markers 009 wrote have no key: find their events (the operation id is the hash of
-- scope, event id and the marker's name), then delete the keyless markers left, whose event
-- is gone. The hashes go through a temporary table, so no statement joins the inbox with
-- this table (on Citus the inbox is distributed and this table is not). Touches only keyless
-- 'sql:' markers: a re-run finds none and does nothing.
DO $$
DECLARE
    names text[] := ARRAY(SELECT DISTINCT r.name FROM webhook_inbox_effects_received r
                           WHERE r.source_event_id IS NULL AND starts_with(r.name, 'sql:'));
BEGIN
    IF cardinality(names) = 0 THEN
        RETURN;
    END IF;
    CREATE TEMPORARY TABLE webhook_inbox_013_marker_keys AS
        SELECT w.source_scope, w.event_id, webhook_inbox_handler_operation_id(w.source_scope, w.event_id, n.name) AS operation_id
          FROM webhook_inbox w, unnest(names) n(name);
    UPDATE webhook_inbox_effects_received r
       SET source_scope = k.source_scope, source_event_id = k.event_id
      FROM webhook_inbox_013_marker_keys k
     WHERE r.operation_id = k.operation_id AND r.source_event_id IS NULL AND starts_with(r.name, 'sql:');
    DROP TABLE webhook_inbox_013_marker_keys;
    DELETE FROM webhook_inbox_effects_received r
     WHERE r.source_event_id IS NULL AND starts_with(r.name, 'sql:') AND starts_with(r.operation_id, 'handler_');
END
$$;

-- As 009's, but the SQL route's once-marker carries its event's key (prune deletes it with
-- the event). An event whose type has Ruby handlers, its row locked by the dispatch: run the
-- SQL route once, record one run per Ruby handler (a quarantined run of this event is made
-- due again: requeuing the event requeues its runs), then either all runs are already
-- delivered (a replay: nothing runs twice) -> 'done', or the row waits for the Ruby worker ->
-- 'handed' (pending, due in the year 9999: the worker settles it).
CREATE OR REPLACE FUNCTION webhook_inbox_run_ruby(ev webhook_inbox, p_handler regproc, p_ruby text[],
        OUT result text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    sql_op  text;
    sql_out text;
    h       text;
    ops     text[] := '{}';
    open    integer;
BEGIN
    IF p_handler IS NOT NULL THEN
        sql_op := webhook_inbox_handler_operation_id(ev.source_scope, ev.event_id, 'sql:' || p_handler::text);
        IF NOT EXISTS (SELECT 1 FROM webhook_inbox_effects_received r WHERE r.operation_id = sql_op) THEN
            SELECT r.result, r.detail INTO result, detail FROM webhook_inbox_run_handler(ev, p_handler) r;
            IF result <> 'done' THEN
                RETURN;
            END IF;
            sql_out := detail;
            INSERT INTO webhook_inbox_effects_received (operation_id, name, source_scope, source_event_id)
            VALUES (sql_op, 'sql:' || p_handler::text, ev.source_scope, ev.event_id);
        END IF;
    END IF;
    FOREACH h IN ARRAY p_ruby LOOP
        ops := ops || webhook_inbox_handler_operation_id(ev.source_scope, ev.event_id, h);
        INSERT INTO webhook_inbox_outbox AS o (operation_id, destination, payload, source_scope, source_event_id)
        VALUES (ops[cardinality(ops)], 'ruby', jsonb_build_object('handler', h), ev.source_scope, ev.event_id)
        ON CONFLICT (operation_id) DO UPDATE
           SET status = 'pending', attempts = 0, next_attempt_at = now(), processed_at = NULL
         WHERE o.status = 'quarantined';
    END LOOP;
    SELECT count(*) INTO open FROM webhook_inbox_outbox o WHERE o.operation_id = ANY (ops) AND o.status <> 'delivered';
    IF open = 0 THEN
        result := 'done';
        detail := concat_ws('; ', sql_out, cardinality(ops) || ' Ruby handler(s) done');
        RETURN;
    END IF;
    result := 'handed';
    detail := 'waiting for Ruby handlers: ' || array_to_string(p_ruby, ', ');
    UPDATE webhook_inbox w
       SET next_attempt_at = '9999-01-01 00:00:00+00', last_error = NULL, outcome = sql_out,
           attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('handed', detail, NULL))
     WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
END
$$;
COMMENT ON FUNCTION webhook_inbox_run_ruby(webhook_inbox, regproc, text[]) IS
    'Dispatch of an event with Ruby handlers: the SQL route once (its marker keyed by the event, v13), one outbox run (destination ruby) per handler; ''handed'' leaves the row pending for the Ruby worker, ''done'' when every run was already delivered.';

-- As 009's, but the done event's outcome is built with || instead of concat_ws: concat_ws is
-- STABLE, and Citus refuses a STABLE function over a column of a distributed table in an
-- UPDATE ("STABLE functions used in UPDATE queries cannot be called with column
-- references"), so no Ruby run could finish there.
-- The event of a run that just changed, its row locked first (two workers finishing the last
-- two runs of one event wait for each other, and the second sees the first's delivery):
-- a delivered run that was the last open one -> done; a quarantined run -> quarantined; a
-- retry -> the error noted. An event that is no longer waiting (done, or removed) is left.
-- "Open" counts the runs webhook_inbox_run_ruby waits for: those of the handlers registered
-- for the event's type now. A run of a handler no longer registered (renamed, retired) stays
-- in the outbox as it was, shown with the event, never waited for.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_settle(run webhook_inbox_outbox, p_duration_ms double precision)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ev   webhook_inbox;
    what text := (run.payload->>'handler') || ': ' || coalesce(run.last_error, '');
BEGIN
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id
       AND w.status IN ('pending', 'quarantined')
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF run.status = 'quarantined' THEN
        UPDATE webhook_inbox w
           SET status = 'quarantined', last_error = left('Ruby handler ' || what, 1000), processed_at = clock_timestamp(),
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('quarantined', 'Ruby handler ' || what, p_duration_ms))
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
    ELSIF run.status = 'pending' THEN
        UPDATE webhook_inbox w
           SET last_error = left('Ruby handler ' || what, 1000),
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('retry', 'Ruby handler ' || what, p_duration_ms))
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
    ELSIF NOT EXISTS (SELECT 1 FROM webhook_inbox_outbox o
                       WHERE o.source_scope = ev.source_scope AND o.source_event_id = ev.event_id
                         AND o.destination = 'ruby' AND o.status <> 'delivered'
                         AND o.payload->>'handler' = ANY (coalesce(webhook_inbox_ruby_handlers_for(ev.event_type), '{}'))) THEN
        UPDATE webhook_inbox w
           SET status = 'done', processed_at = clock_timestamp(), last_error = NULL,
               outcome = CASE WHEN w.outcome IS NULL THEN 'Ruby handlers done' ELSE w.outcome || '; Ruby handlers done' END,
               attempt_log = webhook_inbox_log_append(w.attempt_log,
                   webhook_inbox_log_entry('done', 'Ruby handler ' || (run.payload->>'handler') || ' done; all done', p_duration_ms))
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
    ELSE
        UPDATE webhook_inbox w
           SET attempt_log = webhook_inbox_log_append(w.attempt_log,
                   webhook_inbox_log_entry('handler_done', 'Ruby handler ' || (run.payload->>'handler') || ' done', p_duration_ms))
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_settle(webhook_inbox_outbox, double precision) IS
    'Ruby worker: after a run changed, lock its event and mark it done (every run delivered), quarantined (the run quarantined) or note the run''s error.';
