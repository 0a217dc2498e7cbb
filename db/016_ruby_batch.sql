-- 016_ruby_batch.sql - schema version 16: the Ruby worker's steps for a whole batch, one call
-- each, so a batch costs a fixed number of round trips instead of two per run.
-- Idempotent: safe to re-run. Applied after the files numbered below it.
--
-- From 013 the worker (lib/webhook_inbox/handlers/runner.rb) took a batch's starts with
-- webhook_inbox_ruby_start called once per row of generate_series, a trick, then per run one
-- webhook_inbox_ruby_lock and one webhook_inbox_ruby_finish: on a loaded machine those round
-- trips, not the work, set the pace. From 016 it calls, per batch:
--   1. webhook_inbox_ruby_start_batch, committed alone before any handler runs: up to p_limit
--      due first attempts, each charged and leased as webhook_inbox_ruby_start does; a due run
--      that is not a first attempt (a retry, a batch-mate of a crash, an exhausted run) is
--      taken alone, and one met after first attempts were taken is left uncharged for the
--      next round (013's worker charged it behind a savepoint and gave it back);
--   2. webhook_inbox_ruby_lock_batch, in the batch's transaction: each run's event, then the
--      run, through webhook_inbox_ruby_lock, in the order of their events (then operation
--      ids), so two workers and a dispatch lock events in one order (event before run: 013);
--   3. the handlers, each in a savepoint of that transaction, then
--      webhook_inbox_ruby_finish_batch: webhook_inbox_ruby_finish for each run, in one call,
--      and the commit. The handlers' writes and their runs' results commit together.
-- Every guarantee is 013's, kept by the same single-run bodies; only the calls are fewer.
--
-- Functions defined here (new): webhook_inbox_ruby_start_batch, webhook_inbox_ruby_lock_batch,
-- webhook_inbox_ruby_finish_batch (Citus forms of start_batch and finish_batch in
-- db/citus/002_outbox.sql). Redefined: webhook_inbox_schema_version only.
-- Additive: webhook_inbox_schema_min_worker() stays 4; webhook_inbox_ruby_start, _lock and
-- _finish (013/015) and _claim and _save (009/015) stay for workers of earlier releases.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 16 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- Step 1 for a batch: oldest due first (SKIP LOCKED), unless the destination 'ruby' is paused
-- (015), each run charged (attempts + 1, none once at p_max_attempts: exhausted) and leased
-- for the backoff a failure would get, as webhook_inbox_ruby_start. First attempts only, up to
-- p_limit; a run with an earlier attempt comes alone: first in line it is the whole batch,
-- after first attempts it is left uncharged (it is first in line next round). No row:
-- nothing due. Run the batch only after this commits.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_start_batch(p_limit integer, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, attempt integer, exhausted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    due record;
    n   integer := 0;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_start_batch: p_limit and p_max_attempts must be >= 1' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM webhook_inbox_flow f WHERE f.kind = 'destination' AND f.target = 'ruby' AND f.paused) THEN
        RETURN;
    END IF;
    FOR due IN
        SELECT o.operation_id, o.attempts
          FROM webhook_inbox_outbox o
         WHERE o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
         ORDER BY o.next_attempt_at, o.created_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN n > 0 AND due.attempts > 0;
        UPDATE webhook_inbox_outbox o
           SET attempts = o.attempts + CASE WHEN due.attempts < p_max_attempts THEN 1 ELSE 0 END,
               last_attempt_at = clock_timestamp(),
               next_attempt_at = clock_timestamp()
                                 + webhook_inbox_retry_delay_ms(due.attempts, p_backoff_base_ms, p_backoff_cap_ms) * interval '1 millisecond'
         WHERE o.operation_id = due.operation_id
        RETURNING o.operation_id, o.attempts, due.attempts >= p_max_attempts INTO operation_id, attempt, exhausted;
        RETURN NEXT;
        n := n + 1;
        EXIT WHEN due.attempts > 0;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_start_batch(integer, integer, bigint, bigint) IS
    'Ruby worker v16, step 1 (committed before the handlers run): up to p_limit due first attempts, or one other run alone, each charged and leased as webhook_inbox_ruby_start; none while destination ruby is paused.';

-- Step 2 for a batch, in the transaction that runs the handlers: webhook_inbox_ruby_lock for
-- each (operation id, attempt), in the order of the runs' events (scope, event id, then the
-- operation id): each event, then its run, so batches sharing events never deadlock. The rows
-- of the runs still pending at their attempt, in that order; a run missing from the answer is
-- no longer this attempt's (skip it).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock_batch(p_operation_ids text[], p_attempts integer[])
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    op text;
BEGIN
    IF p_operation_ids IS NULL OR p_attempts IS NULL OR cardinality(p_operation_ids) <> cardinality(p_attempts) THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_lock_batch: one attempt per operation id' USING ERRCODE = '22023';
    END IF;
    FOR op IN
        SELECT o.operation_id FROM webhook_inbox_outbox o
         WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby'
         ORDER BY o.source_scope, o.source_event_id, o.operation_id
    LOOP
        RETURN QUERY SELECT * FROM webhook_inbox_ruby_lock(op, p_attempts[array_position(p_operation_ids, op)]);
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock_batch(text[], integer[]) IS
    'Ruby worker v16, step 2: webhook_inbox_ruby_lock for each run, in the order of their events (event, then run); the runs still pending at their attempt.';

-- Step 3 for a batch, after its handlers, in the same transaction: webhook_inbox_ruby_finish
-- for each run (same index in every array), in the order given. One row per run: its new
-- status, NULL when it is not the run locked at that attempt (the caller rolls back).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_finish_batch(
        p_operation_ids text[], p_attempts integer[], p_results text[], p_errors text[], p_durations_ms double precision[],
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, status text)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_operation_ids IS NULL OR p_attempts IS NULL OR p_results IS NULL OR p_errors IS NULL OR p_durations_ms IS NULL
       OR cardinality(p_attempts) <> cardinality(p_operation_ids) OR cardinality(p_results) <> cardinality(p_operation_ids)
       OR cardinality(p_errors) <> cardinality(p_operation_ids) OR cardinality(p_durations_ms) <> cardinality(p_operation_ids) THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_finish_batch: one attempt, result, error and duration per operation id'
              USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. cardinality(p_operation_ids) LOOP
        operation_id := p_operation_ids[i];
        status := webhook_inbox_ruby_finish(p_operation_ids[i], p_attempts[i], p_results[i], p_errors[i], p_durations_ms[i],
                                            p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms);
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_finish_batch(text[], integer[], text[], text[], double precision[], integer, bigint, bigint) IS
    'Ruby worker v16, step 3: webhook_inbox_ruby_finish for each run of the batch in one call; each run''s new status (NULL: not that pending run).';
