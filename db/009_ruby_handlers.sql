-- 009_ruby_handlers.sql - schema version 9: Ruby handlers (WebhookInbox.subscribe, classes in
-- app/webhooks). The app's Ruby worker (`bin/webhook-inbox-sidecar ruby`) registers which
-- event types it handles; the sidecar's dispatch then runs the type's SQL route (if any) and
-- records one run per Ruby handler in the outbox (destination 'ruby', operation id
-- handler_<sha256(scope, event id, handler)>), and the event stays pending until the Ruby
-- worker has run each of them: it runs one in a savepoint of a transaction that holds the
-- run's row lock, and marks the run delivered in that transaction, so the handler's writes
-- and its once-marker commit together (a crash rolls both back). The last run to succeed
-- marks the event done; a permanent failure, or the last attempt, quarantines the run and
-- the event. Idempotent: safe to re-run. Applied after 001..008.
--
-- Additive: webhook_inbox_schema_min_worker() stays 004's 4. A sidecar of any version >= 4
-- calls webhook_inbox_run_event() through dispatch, whose new body hands such events over
-- (result 'handed', a result older sidecars count nowhere); types without Ruby handlers
-- run exactly as before.
--
-- On a large existing outbox, CREATE INDEX below blocks effect inserts while it builds. Build
-- it first without blocking, outside a transaction:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_outbox_ruby_event_idx
--     ON webhook_inbox_outbox (source_scope, source_event_id) WHERE destination = 'ruby';

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 9 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

CREATE TABLE IF NOT EXISTS webhook_inbox_ruby_handlers (
    event_type    text        NOT NULL
                  CONSTRAINT webhook_inbox_ruby_handlers_event_type_check
                  CHECK (event_type <> '' AND length(event_type) <= 255 AND strpos(left(event_type, -1), '*') = 0),
    handler       text        NOT NULL
                  CONSTRAINT webhook_inbox_ruby_handlers_handler_check CHECK (handler ~ '^[!-~]{1,120}$'),
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, handler)
);
COMMENT ON TABLE webhook_inbox_ruby_handlers IS
    'The Rails app''s Ruby handlers, written by its Ruby worker at start from WebhookInbox.subscribe and app/webhooks (the code is the truth; never edit by hand). Every handler whose pattern matches an event''s type runs once for it.';
COMMENT ON COLUMN webhook_inbox_ruby_handlers.event_type IS 'An exact event type, a prefix pattern ending in ''*'' (''payment_intent.*''), or ''*'' (every type).';
COMMENT ON COLUMN webhook_inbox_ruby_handlers.handler IS 'The handler''s stable name (its class name, or subscribe''s as:): part of each run''s operation id, so renaming a handler makes new runs.';

CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_ruby_event_idx
    ON webhook_inbox_outbox (source_scope, source_event_id) WHERE destination = 'ruby';
COMMENT ON INDEX webhook_inbox_outbox_ruby_event_idx IS
    'The Ruby runs of one event: whether any is still pending when one finishes (webhook_inbox_ruby_settle).';

-- The Ruby handlers for an event type, by name: every registered pattern that matches
-- (exact, 'prefix*', '*'), each handler once. Empty when the app has none.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_handlers_for(p_event_type text) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT array_agg(DISTINCT r.handler ORDER BY r.handler)
      FROM webhook_inbox_ruby_handlers r
     WHERE r.event_type = p_event_type
        OR (right(r.event_type, 1) = '*' AND starts_with(p_event_type, left(r.event_type, -1)))
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_handlers_for(text) IS
    'Names of the Ruby handlers whose patterns match an event type (sorted, each once); NULL when none.';

-- The operation id of one (event, handler): stable across duplicates, replays, crashes and
-- redeliveries; the run's primary key and the idempotency key a handler passes to APIs.
CREATE OR REPLACE FUNCTION webhook_inbox_handler_operation_id(p_scope text, p_event_id text, p_handler text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'handler_' || encode(sha256(convert_to(p_scope || E'\n' || p_event_id || E'\n' || p_handler, 'UTF8')), 'hex')
$$;
COMMENT ON FUNCTION webhook_inbox_handler_operation_id(text, text, text) IS
    'handler_<sha256(scope, event id, handler)>: the operation id of one handler''s run for one event.';

-- An event whose type has Ruby handlers, its row locked by the dispatch: run the SQL route
-- once (a marker in webhook_inbox_effects_received, committed with its writes, so a requeue
-- after a Ruby handler's failure does not run it again), record one run per Ruby handler (a
-- quarantined run of this event is made due again: requeuing the event requeues its runs),
-- then either all runs are already delivered (a replay: nothing runs twice) -> 'done', or
-- the row waits for the Ruby worker -> 'handed' (pending, due in the year 9999: the worker
-- settles it; 'infinity' would break the sidecars' next-due arithmetic).
-- 'quarantined' / 'retry' are the SQL route's, recorded by the caller as for any handler.
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
            INSERT INTO webhook_inbox_effects_received (operation_id, name) VALUES (sql_op, 'sql:' || p_handler::text);
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
    'Dispatch of an event with Ruby handlers: the SQL route once, one outbox run (destination ruby) per handler; ''handed'' leaves the row pending for the Ruby worker, ''done'' when every run was already delivered.';

-- As in 005, plus: an event whose type has Ruby handlers goes through webhook_inbox_run_ruby
-- (so a type with Ruby handlers and no SQL route is routed, not waiting). 'handed' is left
-- pending by it; the other results are recorded here as before. Without Ruby handlers, the
-- SQL route's once-marker is checked too (never written here: a type that never had Ruby
-- handlers keeps 005's behaviour, a replay runs its route again and no marker per event is kept).
CREATE OR REPLACE FUNCTION webhook_inbox_run_event(
        ev webhook_inbox, p_handler regproc, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        OUT result text, OUT detail text, OUT charged boolean, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    st   text;
    t0   timestamptz := clock_timestamp();
    ms   double precision;
    ruby text[] := webhook_inbox_ruby_handlers_for(ev.event_type);
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
    IF ruby IS NOT NULL THEN
        SELECT r.result, r.detail INTO result, detail FROM webhook_inbox_run_ruby(ev, p_handler, ruby) r;
    ELSIF p_handler IS NULL THEN
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
    ELSIF EXISTS (SELECT 1 FROM webhook_inbox_effects_received r
                   WHERE r.operation_id = webhook_inbox_handler_operation_id(ev.source_scope, ev.event_id, 'sql:' || p_handler::text)) THEN
        -- The route already ran for this event while its type had Ruby handlers (the marker
        -- webhook_inbox_run_ruby wrote): a requeue after the last one was retired does not run it again.
        result := 'done';
        detail := 'SQL route ' || p_handler::text || ' already ran for this event';
        RETURN;
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
    'Sidecar v4: run one claimed (locked) event''s handler, its Ruby hand-over (v9: ''handed'' leaves it pending for the Ruby worker) or unrouted policy and record quarantined/retry/waiting on its row (with an attempt_log entry) in the caller''s transaction; ''done'' is left to the caller.';

-- Types with Ruby handlers are routed even without a SQL route.
CREATE OR REPLACE FUNCTION webhook_inbox_unrouted(OUT event_type text, OUT pending bigint)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT t.event_type, t.n
      FROM (SELECT w.event_type, count(*) AS n FROM webhook_inbox w
             WHERE w.status = 'pending' GROUP BY w.event_type) t
     WHERE webhook_inbox_route(t.event_type) IS NULL AND webhook_inbox_ruby_handlers_for(t.event_type) IS NULL
     ORDER BY t.n DESC, t.event_type
$$;
COMMENT ON FUNCTION webhook_inbox_unrouted() IS
    'Pending events whose event type has neither a route nor a Ruby handler, counted by type (what `webhook-inbox-sidecar stats` reports as waiting_for_route).';

-- The Ruby worker's claim, in the transaction that will run the handlers: up to p_limit due
-- runs, oldest due first, row-locked (SKIP LOCKED: workers on any host take different runs;
-- the lock is held until the handlers' commit, so a worker killed mid-handler leaves the run
-- due again at once, with nothing of it applied). attempt counts from 1. The event's columns
-- come along (the payload as text, the raw body as base64 when it is not JSON).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_claim(p_limit integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE sql AS $$
    WITH due AS (
        SELECT o.operation_id, o.payload->>'handler' AS handler, o.attempts + 1 AS attempt,
               o.source_scope, o.source_event_id
          FROM webhook_inbox_outbox o
         WHERE o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
         ORDER BY o.next_attempt_at, o.created_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    SELECT d.operation_id, d.handler, d.attempt, d.source_scope, d.source_event_id, w.event_type, w.payload::text,
           CASE WHEN w.payload IS NULL THEN translate(encode(w.raw_body, 'base64'), E'\n', '') END, w.received_at
      FROM due d
      LEFT JOIN webhook_inbox w ON w.source_scope = d.source_scope AND w.event_id = d.source_event_id
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_claim(integer) IS
    'Ruby worker: lock up to p_limit due Ruby runs (FOR UPDATE SKIP LOCKED, held until the caller commits) with their events'' columns; attempt is this run''s number (1 = first).';

-- After one run's handler, in the claiming transaction. p_result: 'done' (the handler's
-- writes commit with this), 'retry' (its writes were rolled back; backoff as the events',
-- quarantined at p_max_attempts) or 'quarantine' (WebhookInbox::Permanent). Then settles the
-- event: done when every run of it is delivered, quarantined with the run's error when the
-- run is. Returns the run's new status.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_save(
        p_operation_id text, p_result text, p_error text, p_duration_ms double precision,
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    run webhook_inbox_outbox;
    st  text;
BEGIN
    IF p_result IS NULL OR p_result NOT IN ('done', 'retry', 'quarantine') THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_save: p_result must be done, retry or quarantine, not %', p_result
              USING ERRCODE = '22023';
    END IF;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id AND o.destination = 'ruby' AND o.status = 'pending'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    st := CASE WHEN p_result = 'done' THEN 'delivered'
               WHEN p_result = 'quarantine' OR run.attempts + 1 >= p_max_attempts THEN 'quarantined'
               ELSE 'pending' END;
    UPDATE webhook_inbox_outbox o
       SET status = st,
           processed_at = CASE WHEN st <> 'pending' THEN clock_timestamp() END,
           attempts = o.attempts + CASE WHEN p_result = 'done' THEN 0 ELSE 1 END,
           last_error = CASE WHEN p_result = 'done' THEN NULL ELSE left(p_error, 1000) END,
           last_attempt_at = clock_timestamp(),
           next_attempt_at = CASE WHEN p_result = 'retry'
                                  THEN clock_timestamp() + webhook_inbox_retry_delay_ms(o.attempts, p_backoff_base_ms, p_backoff_cap_ms)
                                                           * interval '1 millisecond'
                                  ELSE o.next_attempt_at END
     WHERE o.operation_id = p_operation_id
    RETURNING o.* INTO run;
    PERFORM webhook_inbox_ruby_settle(run, p_duration_ms);
    RETURN run.status;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_save(text, text, text, double precision, integer, bigint, bigint) IS
    'Ruby worker: record one run''s result (done/retry/quarantine) in its claiming transaction and settle its event; returns the run''s new status (NULL: not a pending Ruby run).';

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
               outcome = concat_ws('; ', w.outcome, 'Ruby handlers done'),
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

-- The worker's registration at start: the app's subscriptions are added to the table (the
-- code is the truth; registered_at is when a pair was first added), never removed: workers
-- of two releases run side by side in a rolling deploy, and an older one restarting must not
-- take a newer handler's rows away (its events would then be done by the SQL route alone). An empty set is refused (a worker that
-- loaded no handlers is misconfigured: fail closed). Removing a handler is an operator's
-- audited action: webhook_inbox_ruby_retire (rake webhook_inbox:retire_handler).
-- p_pairs: [[event type pattern, handler], ...].
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_register(p_pairs jsonb) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
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
    SELECT count(*) INTO n FROM webhook_inbox_ruby_handlers;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_register(jsonb) IS
    'Ruby worker: add the [event type pattern, handler] pairs given (those already there are left as they are; never removes, refuses an empty set); returns how many are registered.';

-- The audit trail takes retire_handler (rake webhook_inbox:retire_handler). Widened, never
-- narrowed, as in 008 and 011 (which runs after this file and finds 'reverify' admitted).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'webhook_inbox_actions'::regclass
                      AND conname = 'webhook_inbox_actions_action_check'
                      AND pg_get_constraintdef(oid) LIKE '%''retire_handler''%') THEN
        ALTER TABLE webhook_inbox_actions DROP CONSTRAINT IF EXISTS webhook_inbox_actions_action_check;
        ALTER TABLE webhook_inbox_actions ADD CONSTRAINT webhook_inbox_actions_action_check
            CHECK (action IN ('requeue', 'replay', 'prune', 'reverify', 'retire_handler'));
    END IF;
END
$$;

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
         WHERE o.operation_id = run.operation_id AND o.status = 'pending';
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
