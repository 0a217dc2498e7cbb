-- citus/004_flow.sql - pause, resume and rate limits (db/015) on a Citus cluster (run after
-- citus/003 by `migrate --citus`, and again by every later `migrate`). Idempotent.
--
-- Layout: webhook_inbox_flow (a few rules) is a reference table, a copy on every node: the
-- dispatch and the claims read it next to any shard, and stats joins it with the inbox.
--
-- Redefines, with the same signatures and results (Citus refuses a STABLE function or
-- operator over a column in an UPDATE, a multi-shard UPDATE calling a function that reads a
-- table, and correlated subqueries from a reference table into a distributed one):
--   webhook_inbox_flow_gate    the hold time in a variable
--   webhook_inbox_flow_take    the rule's slot computed in variables, then one UPDATE
--   webhook_inbox_flow_stats   one count per rule (a router or multi-shard count each)
--   webhook_inbox_pause        the time of ON CONFLICT DO UPDATE in a variable
--   webhook_inbox_resume       the other paused rules read first, the held rows released by
--                              one multi-shard UPDATE of IMMUTABLE tests
-- and adds webhook_inbox_citus_flow_matches_any(). The claims' pause checks are in citus/002
-- (webhook_inbox_outbox_claim, _ruby_claim, _ruby_start); run_event runs as it is.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_flow'::regclass) THEN
        PERFORM create_reference_table('webhook_inbox_flow');
    END IF;
END
$$;

-- db/015's, the slot in variables (the row locked first, as there).
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
    'Rate limit: take the next slot of a rule (row-locked until the caller commits); a slot <= now() means go now, a later one is when (Citus form).';

-- db/015's stats, one count per rule.
CREATE OR REPLACE FUNCTION webhook_inbox_flow_stats(
        OUT kind text, OUT target text, OUT paused boolean, OUT rate double precision, OUT pending bigint,
        OUT changed_at timestamptz, OUT changed_by text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE AS $$
DECLARE
    f webhook_inbox_flow;
BEGIN
    FOR f IN SELECT * FROM webhook_inbox_flow r ORDER BY r.kind, r.target LOOP
        kind := f.kind;
        target := f.target;
        paused := f.paused;
        rate := f.rate;
        changed_at := f.changed_at;
        changed_by := f.changed_by;
        IF f.kind = 'route' THEN
            SELECT count(*) INTO pending FROM webhook_inbox w
             WHERE w.status = 'pending' AND webhook_inbox_flow_matches(f.target, w.event_type);
        ELSIF f.kind = 'scope' THEN
            SELECT count(*) INTO pending FROM webhook_inbox w WHERE w.status = 'pending' AND w.source_scope = f.target;
        ELSE
            SELECT count(*) INTO pending FROM webhook_inbox_outbox o WHERE o.status = 'pending' AND o.destination = f.target;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_flow_stats() IS
    'Pause and rate rules with their pending events (route, scope) or effects (destination): stats, metrics and the dashboard (Citus form).';

-- db/015's gate, the hold time in a variable (Citus refuses a non-IMMUTABLE function in
-- COALESCE in an UPDATE).
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
    'Event path: paused (held until resume) or throttled (due at its rate slot), uncharged; NULL result when the event may run now (Citus form).';

-- db/015's pause, the time in a variable (Citus allows only IMMUTABLE functions in DO UPDATE).
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
    'Operator: pause a route (event type pattern), scope or destination; its events/effects wait, pending and uncharged; audited (pause). Returns the pending count held and the action id (Citus form).';

-- Whether any of the route patterns matches an event type (webhook_inbox_flow_matches over an array).
CREATE OR REPLACE FUNCTION webhook_inbox_citus_flow_matches_any(p_patterns text[], p_event_type text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT EXISTS (SELECT 1 FROM unnest(p_patterns) p WHERE webhook_inbox_flow_matches(p, p_event_type))
$$;
COMMENT ON FUNCTION webhook_inbox_citus_flow_matches_any(text[], text) IS
    'Citus: whether one of these webhook_inbox_flow route patterns matches the event type.';

-- db/015's resume. webhook_inbox_flow_held_by_other() reads the rules inside the UPDATE; here
-- the other paused rules are read first and the UPDATE tests the event against them.
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
           AND w.source_scope <> ALL (scopes) AND NOT webhook_inbox_citus_flow_matches_any(routes, w.event_type);
        GET DIAGNOSTICS released = ROW_COUNT;
    ELSIF p_kind = 'scope' THEN
        UPDATE webhook_inbox w SET next_attempt_at = now(), held_at = NULL
         WHERE w.status = 'pending' AND w.held_at IS NOT NULL AND w.source_scope = p_target
           AND NOT webhook_inbox_citus_flow_matches_any(routes, w.event_type);
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
    'Operator: resume a route, scope or destination, optionally at a rate (events/s over all sidecars; NULL: unlimited); its held events are due now; audited (resume). Returns the events made due (destination: effects due) and the action id (Citus form).';

DO $$
BEGIN
    PERFORM webhook_inbox_citus_propagate(); -- the new functions, and those over the flow's row type
END
$$;
