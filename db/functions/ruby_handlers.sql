-- functions/ruby_handlers.sql - Ruby handlers: registration, the worker's claim, lock and finish (single and batched).
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- The Ruby handlers for an event type, by name: every registered pattern that matches
-- (exact, 'prefix*', '*'), each handler once. Empty when the app has none.
-- PL/pgSQL, so its query is planned once per session (a SQL function's was planned again at
-- every statement calling it: once per dispatched batch).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_handlers_for(p_event_type text) RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT array_agg(DISTINCT r.handler ORDER BY r.handler)
              FROM webhook_inbox_ruby_handlers r
             WHERE r.event_type = p_event_type
                OR (right(r.event_type, 1) = '*' AND starts_with(p_event_type, left(r.event_type, -1))));
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_handlers_for(text) IS
    'Names of the Ruby handlers whose patterns match an event type (sorted, each once); NULL when none.';

-- The same read from p_ruby_handlers, a table of webhook_inbox_ruby_handlers' columns (Citus:
-- this node's copy of the reference table, its local shard), prepared once per session; NULL:
-- the table above. The query is the one above with the table named (keep the two alike).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_handlers_from(p_event_type text, p_ruby_handlers regclass) RETURNS text[]
LANGUAGE plpgsql VOLATILE AS $$ -- VOLATILE: PREPARE is refused in a STABLE function
DECLARE
    names text[];
    stmt  text := 'webhook_inbox_ruby_handlers_for_' || p_ruby_handlers::oid;
BEGIN
    IF p_ruby_handlers IS NULL THEN
        RETURN webhook_inbox_ruby_handlers_for(p_event_type);
    END IF;
    IF NOT webhook_inbox_prepared(stmt) THEN
        PERFORM webhook_inbox_prepare_once(stmt, 'text', format($q$
            SELECT array_agg(DISTINCT r.handler ORDER BY r.handler)
              FROM %s r
             WHERE r.event_type = $1
                OR (right(r.event_type, 1) = '*' AND starts_with($1, left(r.event_type, -1)))
            $q$, p_ruby_handlers)); -- webhook_inbox_prepare_once: claim_dispatch.sql
    END IF;
    EXECUTE format('EXECUTE %I(%L)', stmt, p_event_type) INTO names; -- EXECUTE takes no $n
    RETURN names;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_handlers_from(text, regclass) IS
    'webhook_inbox_ruby_handlers_for(text) read from p_ruby_handlers (Citus: the local shard of the Ruby handlers), prepared once per session; NULL reads webhook_inbox_ruby_handlers.';

-- The operation id of one (event, handler): stable across duplicates, replays, crashes and
-- redeliveries; the run's primary key and the idempotency key a handler passes to APIs.
CREATE OR REPLACE FUNCTION webhook_inbox_handler_operation_id(p_scope text, p_event_id text, p_handler text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'handler_' || encode(sha256(convert_to(p_scope || E'\n' || p_event_id || E'\n' || p_handler, 'UTF8')), 'hex')
$$;
COMMENT ON FUNCTION webhook_inbox_handler_operation_id(text, text, text) IS
    'handler_<sha256(scope, event id, handler)>: the operation id of one handler''s run for one event.';

-- After one run's handler, in the claiming transaction (009's one-step save, for workers of
-- v9-v12). p_result: 'done' (the handler's writes commit with this), 'retry' (its writes were
-- rolled back; backoff as the events', quarantined at p_max_attempts) or 'quarantine'
-- (WebhookInbox::Permanent). Then settles the event: done when every run of it is delivered,
-- quarantined with the run's error when the run is. Returns the run's new status. The run is
-- found by its key: its scope is the one the claim kept in this transaction
-- (webhook_inbox.ruby_scope: the Citus claim takes one scope), else read by its operation id.
-- It is the v13 steps' charge and finish in one call: the attempt charged here (none for
-- 'done'), then webhook_inbox_ruby_finish() at that attempt records and settles.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_save(
        p_operation_id text, p_result text, p_error text, p_duration_ms double precision,
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    run   webhook_inbox_outbox;
    scope text := nullif(current_setting('webhook_inbox.ruby_scope', true), '');
    t     timestamptz := clock_timestamp();
BEGIN
    PERFORM webhook_inbox_check_choice('webhook_inbox_ruby_save', 'p_result', p_result, 'done', 'retry', 'quarantine');
    IF scope IS NULL THEN
        SELECT o.source_scope INTO scope FROM webhook_inbox_outbox o WHERE o.operation_id = p_operation_id; -- see ruby_lock
    END IF;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id
       FOR UPDATE; -- by the key alone, then checked (see ruby_finish)
    IF NOT FOUND OR run.destination <> 'ruby' OR run.status <> 'pending' THEN
        RETURN NULL;
    END IF;
    UPDATE webhook_inbox_outbox o
       SET attempts = o.attempts + CASE WHEN p_result = 'done' THEN 0 ELSE 1 END,
           last_attempt_at = t
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id
    RETURNING o.* INTO run;
    RETURN webhook_inbox_ruby_finish(p_operation_id, run.attempts, p_result, p_error, p_duration_ms,
                                     p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms);
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_save(text, text, text, double precision, integer, bigint, bigint) IS
    'Ruby worker: record one run''s result (done/retry/quarantine) in its claiming transaction and settle its event; returns the run''s new status (NULL: not a pending Ruby run).';

-- Retires a Ruby handler: its registrations (all, or the one pattern p_event_type) are
-- removed, so new events of those types no longer wait for it, and its pending runs are
-- quarantined ('retired') and no longer waited for: the events waiting on them are made due,
-- and dispatch settles them against the handlers registered now (done when those are).
-- Its delivered and quarantined runs stay in the outbox, shown, never waited for again.
-- Audited in webhook_inbox_actions (action retire_handler, filter {handler, event_type,
-- runs_retired}, count = registrations removed). A name that is not registered is refused.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_retire(p_handler text, p_event_type text, p_actor text,
        OUT removed integer, OUT runs_retired integer, OUT action_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    run webhook_inbox_outbox;
    typ text;
BEGIN
    DELETE FROM webhook_inbox_ruby_handlers r
     WHERE r.handler = p_handler AND (p_event_type IS NULL OR r.event_type = p_event_type);
    GET DIAGNOSTICS removed = ROW_COUNT;
    IF removed = 0 THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_retire: no Ruby handler % is registered%', coalesce(p_handler, 'NULL'),
              CASE WHEN p_event_type IS NULL THEN '' ELSE ' for ' || p_event_type END USING ERRCODE = '22023';
    END IF;
    -- Run by run, each statement on one table (no join of the outbox with the inbox: on
    -- Citus the inbox is distributed and the outbox is not).
    runs_retired := 0;
    FOR run IN SELECT o.* FROM webhook_inbox_outbox o
                WHERE o.destination = 'ruby' AND o.status = 'pending' AND o.payload->>'handler' = p_handler
    LOOP
        SELECT w.event_type INTO typ FROM webhook_inbox w
         WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id;
        CONTINUE WHEN p_handler = ANY (coalesce(webhook_inbox_ruby_handlers_for(typ), '{}')); -- still registered for it
        UPDATE webhook_inbox_outbox o
           SET status = 'quarantined', processed_at = clock_timestamp(), last_error = 'handler retired'
         WHERE o.source_scope = run.source_scope AND o.operation_id = run.operation_id AND o.status = 'pending';
        CONTINUE WHEN NOT FOUND;
        runs_retired := runs_retired + 1;
        UPDATE webhook_inbox w SET next_attempt_at = now()
         WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id AND w.status = 'pending';
    END LOOP;
    INSERT INTO webhook_inbox_actions (actor, action, filter, count)
    VALUES (coalesce(nullif(p_actor, ''), 'unknown'), 'retire_handler',
            jsonb_build_object('handler', p_handler, 'event_type', p_event_type, 'runs_retired', runs_retired), removed)
    RETURNING id INTO action_id;
    PERFORM pg_notify('webhook_inbox', '');
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_retire(text, text, text) IS
    'Operator: retire a Ruby handler (all its patterns, or one): registrations removed, its pending runs quarantined as retired and their events made due; audited (retire_handler); refuses a name not registered.';

-- Step 3, after the handler, in the same transaction: as 009's webhook_inbox_ruby_save, but
-- the attempt was charged at the start: 'retry' waits the backoff of attempt - 1 earlier
-- failures and quarantines at p_max_attempts; 'quarantine' (WebhookInbox::Permanent, or an
-- exhausted run) quarantines. Settles the event (its row is already locked: step 2).
-- Returns the run's new status, NULL when it is not the run locked at p_attempt. The run is
-- found by its key: the scope webhook_inbox_ruby_lock kept in this transaction
-- (webhook_inbox.ruby_scope, for the run webhook_inbox.ruby_op), else read by its operation
-- id; on Citus every statement is then one router query to the run's shard. The times are
-- in variables (Citus: no VOLATILE function, nor a non-IMMUTABLE one in a CASE, in an UPDATE).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_finish(
        p_operation_id text, p_attempt integer, p_result text, p_error text, p_duration_ms double precision,
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    run   webhook_inbox_outbox;
    st    text;
    scope text;
    t     timestamptz := clock_timestamp();
    nxt   timestamptz;
BEGIN
    PERFORM webhook_inbox_check_choice('webhook_inbox_ruby_finish', 'p_result', p_result, 'done', 'retry', 'quarantine');
    IF current_setting('webhook_inbox.ruby_op', true) IS NOT DISTINCT FROM p_operation_id THEN
        scope := current_setting('webhook_inbox.ruby_scope', true);
    ELSE
        SELECT o.source_scope INTO scope FROM webhook_inbox_outbox o WHERE o.operation_id = p_operation_id; -- see ruby_lock
    END IF;
    -- By the key alone, then checked: with destination and status in the WHERE a plan made
    -- while the outbox was small walked the pending partial index (every pending run, at
    -- every finish).
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id
       FOR UPDATE;
    IF NOT FOUND OR run.destination <> 'ruby' OR run.status <> 'pending' OR run.attempts <> p_attempt THEN
        RETURN NULL;
    END IF;
    st := CASE WHEN p_result = 'done' THEN 'delivered'
               WHEN p_result = 'quarantine' OR run.attempts >= p_max_attempts THEN 'quarantined'
               ELSE 'pending' END;
    nxt := run.next_attempt_at;
    IF st = 'pending' THEN
        nxt := t + webhook_inbox_retry_delay_ms(run.attempts - 1, p_backoff_base_ms, p_backoff_cap_ms) * interval '1 millisecond';
    END IF;
    UPDATE webhook_inbox_outbox o
       SET status = st,
           processed_at = CASE WHEN st <> 'pending' THEN t END,
           last_error = CASE WHEN p_result = 'done' THEN NULL ELSE left(p_error, 1000) END,
           next_attempt_at = nxt
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id
    RETURNING o.* INTO run;
    PERFORM webhook_inbox_ruby_settle(run, p_duration_ms);
    RETURN run.status;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_finish(text, integer, text, text, double precision, integer, bigint, bigint) IS
    'Ruby worker, step 3: record the run''s result (done/retry/quarantine) for the attempt charged at its start and settle its event; returns the run''s new status (NULL: not that pending run).';

-- As 009's, but the SQL route's once-marker carries its event's key (prune deletes it with
-- the event). An event whose type has Ruby handlers, its row locked by the dispatch: run the
-- SQL route once, record one run per Ruby handler (a quarantined run of this event is made
-- due again: requeuing the event requeues its runs), then either all runs are already
-- delivered (a replay: nothing runs twice) -> 'done', or the row waits for the Ruby worker ->
-- 'handed' (pending, due in the year 9999: the worker settles it). The runs are keyed and
-- counted in the event's scope (on Citus, its shard).
CREATE OR REPLACE FUNCTION webhook_inbox_run_ruby(ev webhook_inbox, p_handler regproc, p_ruby text[],
        OUT result text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    sql_op  text;
    sql_out text;
    h       text;
    ops     text[] := '{}';
    open    integer;
    due     timestamptz := now(); -- a variable: Citus allows only IMMUTABLE functions in DO UPDATE
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
        INSERT INTO webhook_inbox_outbox AS o (operation_id, destination, payload, source_scope, source_event_id,
                                               trace_context) -- v30: the run continues the receipt's trace
        VALUES (ops[cardinality(ops)], 'ruby', jsonb_build_object('handler', h), ev.source_scope, ev.event_id,
                ev.trace_context)
        ON CONFLICT (source_scope, operation_id) DO UPDATE
           SET status = 'pending', attempts = 0, next_attempt_at = due, processed_at = NULL
         WHERE o.status = 'quarantined';
    END LOOP;
    SELECT count(*) INTO open FROM webhook_inbox_outbox o
     WHERE o.source_scope = ev.source_scope AND o.operation_id = ANY (ops) AND o.status <> 'delivered';
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
    handlers text[];
BEGIN
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id
       AND w.status IN ('pending', 'quarantined')
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- In a variable: inside the shard's query it would read the reference table from the
    -- worker, a distributed query Citus refuses there.
    handlers := coalesce(webhook_inbox_ruby_handlers_for(ev.event_type), '{}');
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
                         AND o.payload->>'handler' = ANY (handlers)) THEN
        UPDATE webhook_inbox w
           SET status = 'done', processed_at = clock_timestamp(), last_error = NULL,
               outcome = coalesce(w.outcome || '; ', '') || 'Ruby handlers done', -- concat_ws is STABLE: refused over a column
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

-- As in 009, plus: nothing while the destination 'ruby' is paused. One source scope per claim
-- (webhook_inbox_outbox_claim_scopes: all at once on one node; on Citus one shard, the runs
-- joined with their co-located events there), kept in the transaction for
-- webhook_inbox_ruby_save (webhook_inbox.ruby_scope) when it is one.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_claim(p_limit integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    IF EXISTS (SELECT 1 FROM webhook_inbox_flow f WHERE f.kind = 'destination' AND f.target = 'ruby' AND f.paused) THEN
        RETURN;
    END IF;
    FOR s IN SELECT x FROM webhook_inbox_outbox_claim_scopes('ruby') x LOOP
        RETURN QUERY
        WITH due AS (
            SELECT o.operation_id, o.payload->>'handler' AS handler, o.attempts + 1 AS attempt,
                   o.source_scope, o.source_event_id
              FROM webhook_inbox_outbox o
             WHERE (s IS NULL OR o.source_scope = s) AND o.destination = 'ruby' AND o.status = 'pending'
               AND o.next_attempt_at <= now()
             ORDER BY o.next_attempt_at, o.created_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED
        )
        SELECT d.operation_id, d.handler, d.attempt, d.source_scope, d.source_event_id, w.event_type, w.payload::text,
               CASE WHEN w.payload IS NULL THEN translate(encode(w.raw_body, 'base64'), E'\n', '') END, w.received_at
          FROM due d
          LEFT JOIN webhook_inbox w
            ON (s IS NULL OR w.source_scope = s) AND w.source_scope = d.source_scope AND w.event_id = d.source_event_id;
        IF FOUND THEN
            IF s IS NOT NULL THEN
                PERFORM set_config('webhook_inbox.ruby_scope', s, true);
            END IF;
            RETURN;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_claim(integer) IS
    'Ruby worker: lock up to p_limit due Ruby runs (FOR UPDATE SKIP LOCKED, held until the caller commits) with their events'' columns; attempt is this run''s number (1 = first). v15: none while destination ruby is paused.';

-- 013's step 1 of the Ruby worker, with the pause check: a paused destination 'ruby' starts
-- (charges) no run. The batch step's first run alone (the same claim, charge and lease).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_start(p_max_attempts integer, p_backoff_base_ms bigint,
        p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, attempt integer, exhausted boolean)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT * FROM webhook_inbox_ruby_start_batch(1, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms);
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_start(integer, bigint, bigint) IS
    'Ruby worker, step 1 (committed before the handler runs): take one due run, unless the destination ruby is paused (v15), charge it (attempts + 1) and lease it for its backoff; exhausted when it had its last attempt already.';

-- Step 1 for a batch: oldest due first (SKIP LOCKED), unless the destination 'ruby' is paused
-- (015), each run charged (attempts + 1, none once at p_max_attempts: exhausted) and leased
-- for the backoff a failure would get, as webhook_inbox_ruby_start. First attempts only, up to
-- p_limit; a run with an earlier attempt comes alone: first in line it is the whole batch,
-- after first attempts it is left uncharged (it is first in line next round). No row:
-- nothing due. Run the batch only after this commits. Scope by scope
-- (webhook_inbox_outbox_claim_scopes: all at once on one node; on Citus one shard each, a
-- router query); each run charged by its key, the times in variables (Citus refuses a
-- VOLATILE function in an UPDATE: the backoff's jitter).
-- On one node the claim resumes where the session's last claim ended (issue 33): a cursor
-- (next_attempt_at, created_at of the last run its read met, inclusive) in a session setting,
-- webhook_inbox.ruby_cursor (us since the epoch: 'at created head_end head_cost', nothing
-- written). Under a long-open snapshot every run processed since leaves dead entries at the
-- head of the pending index, which a read from the head walks at every claim. As the sidecar's
-- claim (claim_dispatch.sql), it reads from the head when the session has no cursor, for the
-- rest of a batch the cursor's read left short, and when the time since its last read from the
-- head is at least nine times what that read cost (up to its first row): at most a tenth of the
-- time walks from the head; on a healthy table, where that read costs less than a millisecond,
-- the session keeps no cursor and every claim reads from the head as before. A run that appears before the cursor (its creating
-- transaction committed after a claim passed its due time, a claim another worker rolled back)
-- waits at most nine times that read's cost, or until a claim comes up short. The cursor is a
-- hint, never a filter: every claimable run is claimable from the head. A read from the head
-- after the cursor's read in the same claim never takes those runs again: they are leased (due
-- later) by then.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_start_batch(p_limit integer, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, attempt integer, exhausted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    s      text;
    due    record;
    n      integer := 0;
    t      timestamptz;
    nxt    timestamptz;
    cur    text := current_setting('webhook_inbox.ruby_cursor', true);
    c_at   timestamptz;        -- the cursor (NULL: none, or the head may be read)
    c_cr   timestamptz;
    h_end  timestamptz;        -- when the session's last read from the head ended
    h_cost interval;           -- and what it cost, up to its first row
    h_t0   timestamptz;        -- this claim's read from the head: began (NULL: none)
    h_t1   timestamptz;        -- reached its first row or its end
    pass   integer;
    l_at   timestamptz;        -- the new cursor: the last run the cursor's read met (without a cursor, the head's)
    l_cr   timestamptz;
    b_at   timestamptz;        -- this pass's lower bound: the cursor, or -infinity (the head)
    b_cr   timestamptz;
    from_cursor boolean := false;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_start_batch: p_limit and p_max_attempts must be >= 1' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM webhook_inbox_flow f WHERE f.kind = 'destination' AND f.target = 'ruby' AND f.paused) THEN
        RETURN;
    END IF;
    IF cur ~ '^-?[0-9]{1,17} -?[0-9]{1,17} -?[0-9]{1,17} [0-9]{1,17}$' THEN
        h_end := 'epoch'::timestamptz + split_part(cur, ' ', 3)::bigint * interval '1 microsecond';
        h_cost := split_part(cur, ' ', 4)::bigint * interval '1 microsecond';
        IF clock_timestamp() - h_end < 9 * h_cost THEN
            c_at := 'epoch'::timestamptz + split_part(cur, ' ', 1)::bigint * interval '1 microsecond';
            c_cr := 'epoch'::timestamptz + split_part(cur, ' ', 2)::bigint * interval '1 microsecond';
        END IF;
    END IF;
    <<claim>>
    FOR s IN SELECT x FROM webhook_inbox_outbox_claim_scopes('ruby') x LOOP
        FOR pass IN 1..2 LOOP
            -- pass 1 from the cursor (one node, a cursor), pass 2 from the head for the rest
            CONTINUE WHEN pass = 1 AND (s IS NOT NULL OR c_at IS NULL);
            from_cursor := pass = 1;
            IF from_cursor THEN
                b_at := c_at;
                b_cr := c_cr;
            ELSE
                b_at := '-infinity';
                b_cr := '-infinity';
                h_t0 := clock_timestamp();
                h_t1 := NULL;
            END IF;
            FOR due IN
                SELECT o.operation_id, o.source_scope, o.attempts, o.next_attempt_at, o.created_at
                  FROM webhook_inbox_outbox o
                 WHERE (s IS NULL OR o.source_scope = s) AND o.destination = 'ruby' AND o.status = 'pending'
                   AND o.next_attempt_at <= now()
                   AND (o.next_attempt_at, o.created_at) >= (b_at, b_cr)
                 ORDER BY o.next_attempt_at, o.created_at
                 LIMIT p_limit - n
                   FOR UPDATE SKIP LOCKED
            LOOP
                IF h_t0 IS NOT NULL AND h_t1 IS NULL THEN
                    h_t1 := clock_timestamp();
                END IF;
                IF n > 0 AND due.attempts > 0 THEN
                    EXIT;                  -- left uncharged, first in line next round
                END IF;
                t := clock_timestamp();
                nxt := t + webhook_inbox_retry_delay_ms(due.attempts, p_backoff_base_ms, p_backoff_cap_ms) * interval '1 millisecond';
                UPDATE webhook_inbox_outbox o
                   SET attempts = o.attempts + CASE WHEN due.attempts < p_max_attempts THEN 1 ELSE 0 END,
                       last_attempt_at = t, next_attempt_at = nxt
                 WHERE o.source_scope = due.source_scope AND o.operation_id = due.operation_id
                RETURNING o.operation_id, o.attempts, due.attempts >= p_max_attempts INTO operation_id, attempt, exhausted;
                RETURN NEXT;
                n := n + 1;
                EXIT WHEN due.attempts > 0 OR n >= p_limit;
            END LOOP;
            -- The cursor moves to the last row this read met (charged, or the retry run left
            -- uncharged: the bound is inclusive), when it read from the cursor or there was none.
            IF FOUND AND (from_cursor OR c_at IS NULL) THEN
                l_at := due.next_attempt_at;
                l_cr := due.created_at;
            END IF;
            IF h_t0 IS NOT NULL AND h_t1 IS NULL THEN
                h_t1 := clock_timestamp(); -- the head's read found nothing
            END IF;
            EXIT claim WHEN n >= p_limit OR (FOUND AND due.attempts > 0); -- else short: the head for the rest
        END LOOP;
    END LOOP;
    IF h_t0 IS NOT NULL THEN
        h_end := clock_timestamp();
        h_cost := coalesce(h_t1, h_end) - h_t0;
    END IF;
    l_at := coalesce(l_at, c_at);
    l_cr := coalesce(l_cr, c_cr);
    -- Kept only while the head costs a millisecond or more: on a healthy table every claim reads
    -- from the head, and saves nothing.
    IF s IS NULL AND l_at IS NOT NULL AND h_end IS NOT NULL AND h_cost >= interval '1 millisecond' THEN
        PERFORM set_config('webhook_inbox.ruby_cursor',
                           (extract(epoch FROM l_at) * 1000000)::bigint || ' ' || (extract(epoch FROM l_cr) * 1000000)::bigint
                           || ' ' || (extract(epoch FROM h_end) * 1000000)::bigint
                           || ' ' || (extract(epoch FROM h_cost) * 1000000)::bigint, false);
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_start_batch(integer, integer, bigint, bigint) IS
    'Ruby worker v16, step 1 (committed before the handlers run): up to p_limit due first attempts, or one other run alone, each charged and leased as webhook_inbox_ruby_start; none while destination ruby is paused.';

-- Step 3 for a batch, after its handlers, in the same transaction: webhook_inbox_ruby_finish
-- for each run (same index in every array), in the order given. One row per run: its new
-- status, NULL when it is not the run locked at that attempt (the caller rolls back). The
-- runs' scopes are read once (on Citus every shard once) and given to each finish
-- (webhook_inbox.ruby_scope, _op), which then works on the run's key alone.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_finish_batch(
        p_operation_ids text[], p_attempts integer[], p_results text[], p_errors text[], p_durations_ms double precision[],
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, status text)
LANGUAGE plpgsql AS $$
DECLARE
    scopes jsonb;
BEGIN
    IF p_operation_ids IS NULL OR p_attempts IS NULL OR p_results IS NULL OR p_errors IS NULL OR p_durations_ms IS NULL
       OR cardinality(p_attempts) <> cardinality(p_operation_ids) OR cardinality(p_results) <> cardinality(p_operation_ids)
       OR cardinality(p_errors) <> cardinality(p_operation_ids) OR cardinality(p_durations_ms) <> cardinality(p_operation_ids) THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_finish_batch: one attempt, result, error and duration per operation id'
              USING ERRCODE = '22023';
    END IF;
    -- One statement, not a loop's cursor (planned for its first rows, it walked an index of
    -- every Ruby run); by the key's first column alone, as ruby_lock.
    SELECT coalesce(jsonb_object_agg(o.operation_id, o.source_scope), '{}') INTO scopes FROM webhook_inbox_outbox o
     WHERE o.operation_id = ANY (p_operation_ids);
    FOR i IN 1 .. cardinality(p_operation_ids) LOOP
        PERFORM set_config('webhook_inbox.ruby_scope', coalesce(scopes->>p_operation_ids[i], ''), true),
                set_config('webhook_inbox.ruby_op', p_operation_ids[i], true);
        operation_id := p_operation_ids[i];
        status := webhook_inbox_ruby_finish(p_operation_ids[i], p_attempts[i], p_results[i], p_errors[i], p_durations_ms[i],
                                            p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms);
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_finish_batch(text[], integer[], text[], text[], double precision[], integer, bigint, bigint) IS
    'Ruby worker v16, step 3: webhook_inbox_ruby_finish for each run of the batch in one call; each run''s new status (NULL: not that pending run).';

-- As in 009, then: pending events waiting for a route (last_error 'no route for event type',
-- due later) whose type matches a given pattern become due now. A row locked by a dispatch
-- running now is waited for (lock_timeout applies): its dispatch may have read the handlers
-- before this transaction, and put it off after all.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_register(p_pairs jsonb) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n     integer;
    woken integer;
BEGIN
    IF p_pairs IS NULL OR jsonb_typeof(p_pairs) <> 'array' THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_register: pairs must be a JSON array of [event type, handler]' USING ERRCODE = '22023';
    END IF;
    IF jsonb_array_length(p_pairs) = 0 THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_register: no handlers given (registration only adds; retire a handler with webhook_inbox_ruby_retire)'
              USING ERRCODE = '22023';
    END IF;
    INSERT INTO webhook_inbox_ruby_handlers (event_type, handler)
    SELECT DISTINCT p->>0, p->>1 FROM jsonb_array_elements(p_pairs) p ON CONFLICT DO NOTHING;
    UPDATE webhook_inbox w
       SET next_attempt_at = now()
     WHERE w.status = 'pending' AND w.last_error = 'no route for event type' AND w.next_attempt_at > now()
       AND EXISTS (SELECT 1 FROM jsonb_array_elements(p_pairs) p
                    WHERE w.event_type = p->>0
                       OR (right(p->>0, 1) = '*' AND starts_with(w.event_type, left(p->>0, -1))));
    GET DIAGNOSTICS woken = ROW_COUNT;
    IF woken > 0 THEN
        PERFORM pg_notify('webhook_inbox', '');
    END IF;
    SELECT count(*) INTO n FROM webhook_inbox_ruby_handlers;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_register(jsonb) IS
    'Ruby worker: add the [event type pattern, handler] pairs given (those already there are left as they are; never removes, refuses an empty set), make the events waiting for a route that they match due now (v18); returns how many are registered.';

-- 013's step 2, the event's key first: the run's event's ordering key (read unlocked: it
-- never changes) is locked - waiting for the transaction that holds it - before the event's
-- row, then the run, as before. A batch took its keys already (below): taken again, it does
-- not wait. Each statement names the event's or the run's key (on Citus one router query
-- to their shard, where the key's lock is taken too, as webhook_inbox_citus_lock_key does);
-- the run's scope is kept in the transaction for webhook_inbox_ruby_finish
-- (webhook_inbox.ruby_scope, _op).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock(p_operation_id text, p_attempt integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    run webhook_inbox_outbox;
    ev  webhook_inbox;
BEGIN
    -- By the key's first column alone (the destination is checked below, on the whole key):
    -- with destination = 'ruby' here the plan may walk the Ruby runs' partial index instead
    -- (every run, at every lock: 75 instead of 2 us with 10 000 runs).
    SELECT * INTO run FROM webhook_inbox_outbox o WHERE o.operation_id = p_operation_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key))
       FROM webhook_inbox w
      WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id AND w.ordering_key IS NOT NULL;
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id
       FOR UPDATE;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.source_scope = run.source_scope AND o.operation_id = p_operation_id
       FOR UPDATE; -- by the key alone, then checked (see ruby_finish)
    IF NOT FOUND OR run.destination <> 'ruby' OR run.status <> 'pending' OR run.attempts <> p_attempt THEN
        RETURN;
    END IF;
    PERFORM set_config('webhook_inbox.ruby_scope', run.source_scope, true),
            set_config('webhook_inbox.ruby_op', run.operation_id, true);
    RETURN QUERY SELECT run.operation_id, run.payload->>'handler', p_attempt, run.source_scope, run.source_event_id,
                        ev.event_type, ev.payload::text,
                        CASE WHEN ev.payload IS NULL AND ev.raw_body IS NOT NULL
                             THEN translate(encode(ev.raw_body, 'base64'), E'\n', '') END,
                        ev.received_at;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock(text, integer) IS
    'Ruby worker, step 2: lock the run''s event''s ordering key (v21: waits for the transaction holding it), its event, then the run if still pending at p_attempt; the run with its event''s columns, or no row (skip it).';

-- 016's step 2, every key of the batch's events first, in the order of their lock ids (two
-- workers whose batches share keys take them in one order), then as 016: webhook_inbox_ruby_lock
-- for each run, in the order of their events. The keys are read in one statement (the runs
-- joined with their co-located events), then each is locked by a statement that names its
-- event's key, as webhook_inbox_ruby_lock does (on Citus a router query: the lock is taken on
-- the event's node, where the claims and the pushed-down batches take it too).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock_batch(p_operation_ids text[], p_attempts integer[])
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    scopes text[];
    events text[];
    ops    text[];
BEGIN
    IF p_operation_ids IS NULL OR p_attempts IS NULL OR cardinality(p_operation_ids) <> cardinality(p_attempts) THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_lock_batch: one attempt per operation id' USING ERRCODE = '22023';
    END IF;
    -- Arrays from single statements, not loops' cursors (planned for their first rows).
    SELECT array_agg(k.scope ORDER BY k.id), array_agg(k.event ORDER BY k.id) INTO scopes, events
      FROM (SELECT DISTINCT ON (1) webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key) AS id,
                   w.source_scope AS scope, w.event_id AS event
              FROM webhook_inbox_outbox o
              JOIN webhook_inbox w ON w.source_scope = o.source_scope AND w.event_id = o.source_event_id
             WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby' AND w.ordering_key IS NOT NULL
             ORDER BY 1) k;
    FOR i IN 1 .. coalesce(cardinality(scopes), 0) LOOP
        PERFORM pg_advisory_xact_lock(webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key))
           FROM webhook_inbox w
          WHERE w.source_scope = scopes[i] AND w.event_id = events[i] AND w.ordering_key IS NOT NULL;
    END LOOP;
    SELECT array_agg(o.operation_id ORDER BY o.source_scope, o.source_event_id, o.operation_id) INTO ops
      FROM webhook_inbox_outbox o
     WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby';
    FOR i IN 1 .. coalesce(cardinality(ops), 0) LOOP
        RETURN QUERY SELECT * FROM webhook_inbox_ruby_lock(ops[i], p_attempts[array_position(p_operation_ids, ops[i])]);
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock_batch(text[], integer[]) IS
    'Ruby worker v16, step 2: the ordering keys of the runs'' events (v21, in lock id order), then webhook_inbox_ruby_lock for each run, in the order of their events (event, then run); the runs still pending at their attempt.';
