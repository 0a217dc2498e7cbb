-- functions/flow.sql - flow control: pause, resume and rate limits over routes, scopes and destinations.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Whether a route pattern (exact, 'prefix*', '*') matches an event type.
CREATE OR REPLACE FUNCTION webhook_inbox_flow_matches(p_pattern text, p_event_type text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_pattern = p_event_type
        OR (right(p_pattern, 1) = '*' AND starts_with(p_event_type, left(p_pattern, -1)))
$$;
COMMENT ON FUNCTION webhook_inbox_flow_matches(text, text) IS
    'A webhook_inbox_flow route target (exact, ''prefix*'', ''*'') against an event type.';

-- The rule that pauses an event (a paused scope, else the first paused route that matches),
-- as 'scope:S' or 'route:P'; NULL when none.
CREATE OR REPLACE FUNCTION webhook_inbox_flow_paused(p_scope text, p_event_type text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT f.kind || ':' || f.target FROM webhook_inbox_flow f
     WHERE f.paused AND ((f.kind = 'scope' AND f.target = p_scope)
                         OR (f.kind = 'route' AND webhook_inbox_flow_matches(f.target, p_event_type)))
     ORDER BY f.kind DESC, length(f.target) DESC
     LIMIT 1
$$;
COMMENT ON FUNCTION webhook_inbox_flow_paused(text, text) IS
    'The paused rule (scope:S or route:P) that holds events of this scope and type; NULL when none.';

-- Takes one rate slot of a rule: the row locked (FOR UPDATE), slot = greatest(tat, now()),
-- tat moved 1/rate past it. Returns the slot: <= now() means "go now". The event path locks
-- every rate-limited route row at its first need in a transaction, in (kind, target) order,
-- so two dispatch batches that meet several rules never wait for each other in a cycle.
-- The slot is computed in variables, then one UPDATE (Citus refuses a STABLE function or
-- operator over a column in an UPDATE).
CREATE OR REPLACE FUNCTION webhook_inbox_flow_take(p_kind text, p_target text) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    slot timestamptz;
    r    double precision;
    nxt  timestamptz;
BEGIN
    IF p_kind = 'route' AND current_setting('webhook_inbox.flow_locked', true) IS DISTINCT FROM 'y' THEN
        PERFORM 1 FROM webhook_inbox_flow f WHERE f.kind = 'route' AND f.rate IS NOT NULL ORDER BY f.target FOR UPDATE;
        PERFORM set_config('webhook_inbox.flow_locked', 'y', true);
    END IF;
    SELECT greatest(f.tat, now()), f.rate INTO slot, r FROM webhook_inbox_flow f
     WHERE f.kind = p_kind AND f.target = p_target AND f.rate IS NOT NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    nxt := slot + interval '1 second' / r;
    UPDATE webhook_inbox_flow f SET tat = nxt WHERE f.kind = p_kind AND f.target = p_target;
    RETURN slot;
END
$$;
COMMENT ON FUNCTION webhook_inbox_flow_take(text, text) IS
    'Rate limit: take the next slot of a rule (row-locked until the caller commits); a slot <= now() means go now, a later one is when.';

-- The gate of the event path, before the handler. A paused scope or route -> 'paused' (the
-- row held: due in the year 9999 until resume, held_at set, uncharged). A rate-limited route
-- (the longest pattern that matches) -> the event runs in a slot: the one it holds once that
-- is due (rate_slot_at, cleared), else a new one; a slot still ahead -> 'throttled', the row
-- due at its slot. NULL result: go on and run it. The hold time is a variable (Citus refuses
-- a non-IMMUTABLE function in COALESCE in an UPDATE).
CREATE OR REPLACE FUNCTION webhook_inbox_flow_gate(ev webhook_inbox, OUT result text, OUT detail text,
        OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    rule text := webhook_inbox_flow_paused(ev.source_scope, ev.event_type);
    pat  text;
    slot timestamptz;
    held timestamptz := coalesce(ev.held_at, clock_timestamp());
BEGIN
    IF rule IS NOT NULL THEN
        result := 'paused';
        detail := 'paused (' || rule || ')';
        UPDATE webhook_inbox w
           SET held_at = held, rate_slot_at = NULL,
               next_attempt_at = '9999-01-01 00:00:00+00',
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('paused', detail, 0))
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
        RETURN;
    END IF;
    SELECT f.target INTO pat FROM webhook_inbox_flow f
     WHERE f.kind = 'route' AND f.rate IS NOT NULL AND webhook_inbox_flow_matches(f.target, ev.event_type)
     ORDER BY length(f.target) DESC
     LIMIT 1;
    IF ev.rate_slot_at IS NOT NULL OR ev.held_at IS NOT NULL THEN
        UPDATE webhook_inbox w SET rate_slot_at = NULL, held_at = NULL
         WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
    END IF;
    IF pat IS NULL OR (ev.rate_slot_at IS NOT NULL AND ev.rate_slot_at <= now()) THEN
        RETURN;
    END IF;
    slot := webhook_inbox_flow_take('route', pat);
    IF slot IS NULL OR slot <= now() THEN
        RETURN;
    END IF;
    result := 'throttled';
    detail := 'rate limited (route:' || pat || ')';
    retry_in_ms := greatest(ceil(extract(epoch FROM slot - clock_timestamp()) * 1000), 0)::bigint;
    UPDATE webhook_inbox w SET rate_slot_at = slot, next_attempt_at = slot
     WHERE w.source_scope = ev.source_scope AND w.event_id = ev.event_id;
END
$$;
COMMENT ON FUNCTION webhook_inbox_flow_gate(webhook_inbox) IS
    'Event path: paused (held until resume) or throttled (due at its rate slot), uncharged; NULL result when the event may run now.';

-- Checks a rule's kind and target; raises 22023 with a clear message otherwise.
CREATE OR REPLACE FUNCTION webhook_inbox_flow_check(p_kind text, p_target text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('route', 'scope', 'destination') THEN
        RAISE EXCEPTION 'webhook_inbox: pause/resume a route, scope or destination, not %', coalesce(p_kind, 'NULL')
              USING ERRCODE = '22023';
    END IF;
    IF p_target IS NULL OR p_target = '' OR length(p_target) > 255 THEN
        RAISE EXCEPTION 'webhook_inbox: % needs a name (1 to 255 characters)', p_kind USING ERRCODE = '22023';
    END IF;
    IF p_kind = 'route' AND strpos(left(p_target, -1), '*') > 0 THEN
        RAISE EXCEPTION 'webhook_inbox: a route is an event type, ''prefix*'' or ''*'' (one * at the end)' USING ERRCODE = '22023';
    END IF;
    IF p_kind = 'destination' AND p_target !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'webhook_inbox: a destination name must match [a-z][a-z0-9_]{0,62}' USING ERRCODE = '22023';
    END IF;
END
$$;

-- Whether any of the route patterns matches an event type (webhook_inbox_flow_matches over an
-- array): resume reads the other paused rules first, then tests each event against them, so
-- its UPDATE calls only IMMUTABLE functions (as Citus requires of a multi-shard UPDATE).
-- Replaces webhook_inbox_flow_held_by_other() (v15), which read the rules inside the UPDATE.
DROP FUNCTION IF EXISTS webhook_inbox_flow_held_by_other(text, text, text, text);
CREATE OR REPLACE FUNCTION webhook_inbox_flow_matches_any(p_patterns text[], p_event_type text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT EXISTS (SELECT 1 FROM unnest(p_patterns) p WHERE webhook_inbox_flow_matches(p, p_event_type))
$$;
COMMENT ON FUNCTION webhook_inbox_flow_matches_any(text[], text) IS
    'Whether one of these webhook_inbox_flow route patterns matches the event type.';

-- Pauses a route, scope or destination: its events (effects) stay pending, uncharged, until
-- resume. A rate set before stays on the rule until a resume sets or removes it. Audited (action pause, filter {kind,
-- target}, count = pending events or effects held now). Pausing what is paused is recorded too.
-- The time is a variable (Citus allows only IMMUTABLE functions in ON CONFLICT DO UPDATE).
CREATE OR REPLACE FUNCTION webhook_inbox_pause(p_kind text, p_target text, p_actor text,
        OUT held bigint, OUT action_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    who text := coalesce(nullif(p_actor, ''), 'unknown');
    t   timestamptz := now();
BEGIN
    PERFORM webhook_inbox_flow_check(p_kind, p_target);
    INSERT INTO webhook_inbox_flow AS f (kind, target, paused, changed_by)
    VALUES (p_kind, p_target, true, who)
    ON CONFLICT (kind, target) DO UPDATE SET paused = true, changed_at = t, changed_by = who;
    SELECT p.pending INTO held FROM webhook_inbox_flow_stats() p WHERE p.kind = p_kind AND p.target = p_target;
    INSERT INTO webhook_inbox_actions (actor, action, filter, count)
    VALUES (who, 'pause', jsonb_build_object('kind', p_kind, 'target', p_target), coalesce(held, 0))
    RETURNING id INTO action_id;
END
$$;
COMMENT ON FUNCTION webhook_inbox_pause(text, text, text) IS
    'Operator: pause a route (event type pattern), scope or destination; its events/effects wait, pending and uncharged; audited (pause). Returns the pending count held and the action id.';

-- Resumes a route, scope or destination, at p_rate events/s (NULL: unlimited; a scope takes
-- no rate). The rule's held events are made due now (then taken in rate slots as they are
-- claimed); slots held under an earlier rate are given up, so the new rate holds from now.
-- A rule neither paused nor limited is deleted. Audited (action resume, filter {kind, target,
-- rate}, count = events made due). Resuming what is not paused sets its rate.
CREATE OR REPLACE FUNCTION webhook_inbox_resume(p_kind text, p_target text, p_rate double precision, p_actor text,
        OUT released bigint, OUT action_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    who    text := coalesce(nullif(p_actor, ''), 'unknown');
    t      timestamptz := now(); -- a variable: Citus allows only IMMUTABLE functions in DO UPDATE
    scopes text[];
    routes text[];
BEGIN
    PERFORM webhook_inbox_flow_check(p_kind, p_target);
    IF p_rate IS NOT NULL AND (p_rate <= 0 OR p_rate > 100000 OR p_rate = 'NaN') THEN
        RAISE EXCEPTION 'webhook_inbox: a rate is events per second, > 0 and <= 100000' USING ERRCODE = '22023';
    END IF;
    IF p_rate IS NOT NULL AND p_kind = 'scope' THEN
        RAISE EXCEPTION 'webhook_inbox: a rate is per route or destination, not per scope' USING ERRCODE = '22023';
    END IF;
    IF p_rate IS NOT NULL AND p_kind = 'destination' AND p_target = 'ruby' THEN
        RAISE EXCEPTION 'webhook_inbox: the Ruby handlers'' runs take no rate (pause and resume them)' USING ERRCODE = '22023';
    END IF;
    scopes := ARRAY(SELECT f.target FROM webhook_inbox_flow f
                     WHERE f.paused AND f.kind = 'scope' AND NOT (f.kind = p_kind AND f.target = p_target));
    routes := ARRAY(SELECT f.target FROM webhook_inbox_flow f
                     WHERE f.paused AND f.kind = 'route' AND NOT (f.kind = p_kind AND f.target = p_target));
    released := 0;
    IF p_kind = 'route' THEN
        UPDATE webhook_inbox w SET next_attempt_at = now(), held_at = NULL, rate_slot_at = NULL
         WHERE w.status = 'pending' AND (w.held_at IS NOT NULL OR w.rate_slot_at IS NOT NULL)
           AND webhook_inbox_flow_matches(p_target, w.event_type)
           AND w.source_scope <> ALL (scopes) AND NOT webhook_inbox_flow_matches_any(routes, w.event_type);
        GET DIAGNOSTICS released = ROW_COUNT;
    ELSIF p_kind = 'scope' THEN
        UPDATE webhook_inbox w SET next_attempt_at = now(), held_at = NULL
         WHERE w.status = 'pending' AND w.held_at IS NOT NULL AND w.source_scope = p_target
           AND NOT webhook_inbox_flow_matches_any(routes, w.event_type);
        GET DIAGNOSTICS released = ROW_COUNT;
    ELSE
        SELECT count(*) INTO released FROM webhook_inbox_outbox o
         WHERE o.status = 'pending' AND o.destination = p_target AND o.next_attempt_at <= now();
        PERFORM pg_notify('webhook_inbox_outbox', '');
    END IF;
    IF p_rate IS NULL THEN
        DELETE FROM webhook_inbox_flow f WHERE f.kind = p_kind AND f.target = p_target;
    ELSE
        INSERT INTO webhook_inbox_flow AS f (kind, target, paused, rate, tat, changed_by)
        VALUES (p_kind, p_target, false, p_rate, t, who)
        ON CONFLICT (kind, target) DO UPDATE SET paused = false, rate = p_rate, tat = t, changed_at = t, changed_by = who;
    END IF;
    INSERT INTO webhook_inbox_actions (actor, action, filter, count)
    VALUES (who, 'resume', jsonb_build_object('kind', p_kind, 'target', p_target, 'rate', p_rate), released)
    RETURNING id INTO action_id;
    PERFORM pg_notify('webhook_inbox', '');
END
$$;
COMMENT ON FUNCTION webhook_inbox_resume(text, text, double precision, text) IS
    'Operator: resume a route, scope or destination, optionally at a rate (events/s over all sidecars; NULL: unlimited); its held events are due now; audited (resume). Returns the events made due (destination: effects due) and the action id.';

-- Monitoring, one row per rule: paused, rate, and its pending events (a route or scope: the
-- pending events it matches, claimed yet or not; a destination: its pending effects).
-- Reads the pending rows only (claim indexes), one count per rule (on Citus a router or
-- multi-shard count each: no correlated subquery from a reference table into a distributed one).
CREATE OR REPLACE FUNCTION webhook_inbox_flow_stats(
        OUT kind text, OUT target text, OUT paused boolean, OUT rate double precision, OUT pending bigint,
        OUT changed_at timestamptz, OUT changed_by text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $$
BEGIN
    FOR kind, target, paused, rate, changed_at, changed_by IN
        SELECT r.kind, r.target, r.paused, r.rate, r.changed_at, r.changed_by FROM webhook_inbox_flow r ORDER BY r.kind, r.target
    LOOP
        IF kind = 'route' THEN
            SELECT count(*) INTO pending FROM webhook_inbox w
             WHERE w.status = 'pending' AND webhook_inbox_flow_matches(target, w.event_type);
        ELSIF kind = 'scope' THEN
            SELECT count(*) INTO pending FROM webhook_inbox w WHERE w.status = 'pending' AND w.source_scope = target;
        ELSE
            SELECT count(*) INTO pending FROM webhook_inbox_outbox o WHERE o.status = 'pending' AND o.destination = target;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_flow_stats() IS
    'Pause and rate rules with their pending events (route, scope) or effects (destination): stats, metrics and the dashboard.';
