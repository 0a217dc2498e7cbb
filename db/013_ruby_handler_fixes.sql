-- 013_ruby_handler_fixes.sql - schema version 13: Ruby handler runs are charged before they
-- run, each in a transaction of its own, locking its event before its run (as dispatch does).
-- Idempotent: safe to re-run. Applied after 001..011.
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
-- Prune (sidecar/src/prune.c) now deletes the SQL route's once-markers
-- (webhook_inbox_effects_received, name 'sql:<route>') of the events it deletes or empties;
-- they carry their event's key from here on (markers written by 009 do not: see below).
--
-- Functions defined here (new): webhook_inbox_ruby_start, webhook_inbox_ruby_lock,
-- webhook_inbox_ruby_finish. Redefined: webhook_inbox_schema_version, webhook_inbox_run_ruby
-- (009: writes the marker's event key).
--
-- Additive: webhook_inbox_schema_min_worker() stays 4.

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
