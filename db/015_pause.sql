-- 015_pause.sql - schema version 15: pause, resume and rate limits. An operator pauses a
-- route (an event type pattern: exact, 'prefix*' or '*'), a scope or a destination (an
-- outbox destination, or 'ruby' for the Ruby handlers' runs) from the dashboard, the CLI
-- (`webhook-inbox-sidecar pause|resume`) or rake. A paused route's or scope's events are
-- stored and wait, pending and never charged an attempt; a paused destination's effects stay
-- pending, never claimed. Resume makes them due again, optionally at a rate (events/s per
-- route or destination) enforced across all sidecars: one GCRA row per rule in
-- webhook_inbox_flow, advanced in the claiming transaction; an event over the rate is given
-- the next free slot as its next_attempt_at (and keeps it in rate_slot_at), so it comes back
-- exactly when due and runs then without taking another slot. Every change is an action in
-- webhook_inbox_actions (pause, resume). Idempotent: safe to re-run. Applied after 001..014.
--
-- Redefines: webhook_inbox_run_event (009's body, with the gate first),
-- webhook_inbox_outbox_claim (006), webhook_inbox_outbox_next_due (006),
-- webhook_inbox_ruby_claim (009, the claim of Ruby workers before v13) and
-- webhook_inbox_ruby_start (013's body, with the same pause check). Widens webhook_inbox_actions_action_check (as 008/009/011).
-- Additive: webhook_inbox_schema_min_worker() stays 4. A sidecar of any version >= 4 calls
-- webhook_inbox_run_event(), whose new results 'paused' and 'throttled' leave the row
-- pending, uncharged (older sidecars count them nowhere, as 009's 'handed').

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 15 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

CREATE TABLE IF NOT EXISTS webhook_inbox_flow (
    kind       text             NOT NULL
               CONSTRAINT webhook_inbox_flow_kind_check CHECK (kind IN ('route', 'scope', 'destination')),
    target     text             NOT NULL
               CONSTRAINT webhook_inbox_flow_target_check CHECK (target <> '' AND length(target) <= 255),
    paused     boolean          NOT NULL DEFAULT false,
    rate       double precision
               CONSTRAINT webhook_inbox_flow_rate_check CHECK (rate > 0 AND rate <= 100000),
    tat        timestamptz      NOT NULL DEFAULT now(),
    changed_at timestamptz      NOT NULL DEFAULT now(),
    changed_by text             NOT NULL,
    PRIMARY KEY (kind, target),
    CONSTRAINT webhook_inbox_flow_rate_kind_check CHECK (rate IS NULL OR kind IN ('route', 'destination')),
    CONSTRAINT webhook_inbox_flow_pattern_check CHECK (kind <> 'route' OR strpos(left(target, -1), '*') = 0)
);
COMMENT ON TABLE webhook_inbox_flow IS
    'Pause and rate limit rules, one per route (event type pattern), scope or destination; written by webhook_inbox_pause/webhook_inbox_resume only (each change audited in webhook_inbox_actions). A row that is neither paused nor rate limited is deleted.';
COMMENT ON COLUMN webhook_inbox_flow.target IS 'route: an exact event type, ''prefix*'' or ''*''; scope: a source_scope; destination: an outbox destination name, or ''ruby'' (the Ruby handlers'' runs).';
COMMENT ON COLUMN webhook_inbox_flow.rate IS 'events/s (routes, destinations), over all sidecars; NULL: unlimited.';
COMMENT ON COLUMN webhook_inbox_flow.tat IS 'GCRA theoretical arrival time: the next free slot; each event or effect let through takes one and moves it 1/rate on.';

ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS held_at timestamptz;
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS rate_slot_at timestamptz;
COMMENT ON COLUMN webhook_inbox.held_at IS 'When a paused route or scope took this pending row off the claim (next_attempt_at far away); resume clears it and makes the row due. NULL otherwise.';
COMMENT ON COLUMN webhook_inbox.rate_slot_at IS 'The rate limit slot this pending row holds (its next_attempt_at): it runs then without taking another. NULL otherwise.';

-- Audit: pause and resume. Widened, never narrowed: the actions admitted now are kept and
-- the two added, so a file of another branch that admits more before or after this one keeps its own.
DO $$
DECLARE
    def  text;
    have text[];
BEGIN
    SELECT pg_get_constraintdef(oid) INTO def FROM pg_constraint
     WHERE conrelid = 'webhook_inbox_actions'::regclass AND conname = 'webhook_inbox_actions_action_check';
    IF def IS NOT NULL AND def LIKE '%''pause''%' AND def LIKE '%''resume''%' THEN
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT m[1]) INTO have FROM regexp_matches(coalesce(def, ''), '''([a-z_]+)''', 'g') m;
    have := ARRAY(SELECT DISTINCT a FROM unnest(coalesce(have, '{}') || ARRAY['requeue', 'replay', 'pause', 'resume']) a ORDER BY a);
    ALTER TABLE webhook_inbox_actions DROP CONSTRAINT IF EXISTS webhook_inbox_actions_action_check;
    EXECUTE format('ALTER TABLE webhook_inbox_actions ADD CONSTRAINT webhook_inbox_actions_action_check CHECK (action IN (%s))',
                   (SELECT string_agg(quote_literal(a), ', ') FROM unnest(have) a));
END
$$;

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
CREATE OR REPLACE FUNCTION webhook_inbox_flow_take(p_kind text, p_target text) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    slot timestamptz;
BEGIN
    IF p_kind = 'route' AND current_setting('webhook_inbox.flow_locked', true) IS DISTINCT FROM 'y' THEN
        PERFORM 1 FROM webhook_inbox_flow f WHERE f.kind = 'route' AND f.rate IS NOT NULL ORDER BY f.target FOR UPDATE;
        PERFORM set_config('webhook_inbox.flow_locked', 'y', true);
    END IF;
    UPDATE webhook_inbox_flow f
       SET tat = greatest(f.tat, now()) + interval '1 second' / f.rate
     WHERE f.kind = p_kind AND f.target = p_target AND f.rate IS NOT NULL
    RETURNING f.tat - interval '1 second' / f.rate INTO slot;
    RETURN slot;
END
$$;
COMMENT ON FUNCTION webhook_inbox_flow_take(text, text) IS
    'Rate limit: take the next slot of a rule (row-locked until the caller commits); a slot <= now() means go now, a later one is when.';

-- The gate of the event path, before the handler. A paused scope or route -> 'paused' (the
-- row held: due in the year 9999 until resume, held_at set, uncharged). A rate-limited route
-- (the longest pattern that matches) -> the event runs in a slot: the one it holds once that
-- is due (rate_slot_at, cleared), else a new one; a slot still ahead -> 'throttled', the row
-- due at its slot. NULL result: go on and run it.
CREATE OR REPLACE FUNCTION webhook_inbox_flow_gate(ev webhook_inbox, OUT result text, OUT detail text,
        OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    rule text := webhook_inbox_flow_paused(ev.source_scope, ev.event_type);
    pat  text;
    slot timestamptz;
BEGIN
    IF rule IS NOT NULL THEN
        result := 'paused';
        detail := 'paused (' || rule || ')';
        UPDATE webhook_inbox w
           SET held_at = coalesce(w.held_at, clock_timestamp()), rate_slot_at = NULL,
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

-- As in 009, plus the gate first: 'paused' and 'throttled' leave the row pending, uncharged
-- (charged false, retry_in_ms: when a throttled row is due). With no rule at all the gate
-- costs one scan of an empty table.
CREATE OR REPLACE FUNCTION webhook_inbox_run_event(
        ev webhook_inbox, p_handler regproc, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint,
        OUT result text, OUT detail text, OUT charged boolean, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    st   text;
    t0   timestamptz := clock_timestamp();
    ms   double precision;
    ruby text[];
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
    IF EXISTS (SELECT 1 FROM webhook_inbox_flow) OR ev.held_at IS NOT NULL OR ev.rate_slot_at IS NOT NULL THEN
        SELECT g.result, g.detail, g.retry_in_ms INTO result, detail, retry_in_ms FROM webhook_inbox_flow_gate(ev) g;
        IF result IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    ruby := webhook_inbox_ruby_handlers_for(ev.event_type);
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
    'Sidecar v4: run one claimed (locked) event''s handler, its Ruby hand-over (v9: ''handed'' leaves it pending for the Ruby worker) or unrouted policy and record quarantined/retry/waiting on its row (with an attempt_log entry) in the caller''s transaction; ''done'' is left to the caller. v15: a paused route or scope -> ''paused'', over its rate -> ''throttled'' (pending, uncharged).';

-- As in 006, plus: a paused destination's effects are never claimed (they stay pending,
-- uncharged); a rate-limited one is leased one effect per free slot (burst 1), its GCRA row
-- advanced in this transaction, whichever sidecar claims.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_claim(
        p_destination text, p_limit integer, p_owner text, p_lease_ms bigint, p_max_attempts integer)
RETURNS TABLE (operation_id text, payload text, attempts integer)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    lim  integer := p_limit;
    rule webhook_inbox_flow;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_owner IS NULL OR p_lease_ms IS NULL OR p_lease_ms < 1
       OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'webhook_inbox: limit, lease and max attempts must be >= 1, owner non-NULL' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO rule FROM webhook_inbox_flow f WHERE f.kind = 'destination' AND f.target = p_destination FOR UPDATE;
    IF rule.paused THEN
        RETURN;
    ELSIF rule.rate IS NOT NULL THEN
        IF rule.tat > now() THEN
            RETURN;
        END IF;
        lim := 1;
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT c.operation_id, c.attempts >= p_max_attempts AS spent
          FROM webhook_inbox_outbox c
         WHERE c.destination = p_destination AND c.status = 'pending' AND c.next_attempt_at <= now()
           AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
         ORDER BY c.next_attempt_at, c.created_at
         LIMIT lim
           FOR UPDATE SKIP LOCKED
    ), quarantined AS (
        UPDATE webhook_inbox_outbox o
           SET status = 'quarantined', processed_at = clock_timestamp(), lease_owner = NULL, lease_until = NULL,
               last_error = left(CASE WHEN o.lease_until IS NULL THEN 'max attempts reached'
                                      ELSE 'max attempts reached; the last delivery was never saved (sidecar stopped): outcome unknown'
                                 END || coalesce(' (before: ' || o.last_error || ')', ''), 1000)
         WHERE o.operation_id = ANY (ARRAY(SELECT due.operation_id FROM due WHERE due.spent))
        RETURNING o.operation_id
    )
    UPDATE webhook_inbox_outbox o
       SET attempts = o.attempts + 1, lease_owner = p_owner,
           lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
           last_attempt_at = clock_timestamp()
     WHERE o.operation_id = ANY (ARRAY(SELECT due.operation_id FROM due WHERE NOT due.spent))
    RETURNING o.operation_id, o.payload::text, o.attempts;
    IF rule.rate IS NOT NULL AND FOUND THEN
        PERFORM webhook_inbox_flow_take('destination', p_destination);
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer) IS
    'Sidecar v6: lease up to p_limit due pending effects of one destination to p_owner for p_lease_ms (attempts + 1 each); due effects already at p_max_attempts (last delivery never saved) are quarantined instead, and not returned. v15: nothing while the destination is paused, one per rate slot when it is rate limited. Args: destination, limit, owner, lease ms, max attempts.';

-- As in 006, plus: a paused destination has nothing due (its deliverer sleeps until resume
-- wakes it), a rate-limited one nothing before its next free slot.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_next_due(p_destinations text[]) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT extract(epoch FROM min(CASE WHEN f.rate IS NULL THEN x.due ELSE greatest(x.due, f.tat) END)
                              - clock_timestamp())::float8
      FROM (SELECT o.destination, min(greatest(o.next_attempt_at, coalesce(o.lease_until, o.next_attempt_at))) AS due
              FROM webhook_inbox_outbox o
             WHERE o.status = 'pending' AND o.destination = ANY (p_destinations)
             GROUP BY o.destination) x
      LEFT JOIN webhook_inbox_flow f ON f.kind = 'destination' AND f.target = x.destination
     WHERE f.paused IS NOT TRUE
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_next_due(text[]) IS
    'Seconds until the next pending effect of these destinations may be claimed (NULL: none pending, or every such destination paused; a rate-limited one not before its next slot).';

-- As in 009, plus: nothing while the destination 'ruby' is paused.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_claim(p_limit integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE sql AS $$
    WITH due AS (
        SELECT o.operation_id, o.payload->>'handler' AS handler, o.attempts + 1 AS attempt,
               o.source_scope, o.source_event_id
          FROM webhook_inbox_outbox o
         WHERE o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
           AND NOT EXISTS (SELECT 1 FROM webhook_inbox_flow f
                            WHERE f.kind = 'destination' AND f.target = 'ruby' AND f.paused)
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
    'Ruby worker: lock up to p_limit due Ruby runs (FOR UPDATE SKIP LOCKED, held until the caller commits) with their events'' columns; attempt is this run''s number (1 = first). v15: none while destination ruby is paused.';

-- 013's step 1 of the Ruby worker, with the pause check: a paused destination 'ruby' starts
-- (charges) no run.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_start(p_max_attempts integer, p_backoff_base_ms bigint,
        p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, attempt integer, exhausted boolean)
LANGUAGE sql AS $$
    WITH due AS (
        SELECT o.operation_id, o.attempts
          FROM webhook_inbox_outbox o
         WHERE o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
           AND NOT EXISTS (SELECT 1 FROM webhook_inbox_flow f
                            WHERE f.kind = 'destination' AND f.target = 'ruby' AND f.paused)
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
    'Ruby worker, step 1 (committed before the handler runs): take one due run, unless the destination ruby is paused (v15), charge it (attempts + 1) and lease it for its backoff; exhausted when it had its last attempt already.';

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

-- Whether a paused rule other than (p_kind, p_target) holds events of this scope and type.
CREATE OR REPLACE FUNCTION webhook_inbox_flow_held_by_other(p_kind text, p_target text, p_scope text, p_event_type text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM webhook_inbox_flow f
                    WHERE f.paused AND NOT (f.kind = p_kind AND f.target = p_target)
                      AND ((f.kind = 'scope' AND f.target = p_scope)
                           OR (f.kind = 'route' AND webhook_inbox_flow_matches(f.target, p_event_type))))
$$;

-- Pauses a route, scope or destination: its events (effects) stay pending, uncharged, until
-- resume. A rate set before stays on the rule until a resume sets or removes it. Audited (action pause, filter {kind,
-- target}, count = pending events or effects held now). Pausing what is paused is recorded too.
CREATE OR REPLACE FUNCTION webhook_inbox_pause(p_kind text, p_target text, p_actor text,
        OUT held bigint, OUT action_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    who text := coalesce(nullif(p_actor, ''), 'unknown');
BEGIN
    PERFORM webhook_inbox_flow_check(p_kind, p_target);
    INSERT INTO webhook_inbox_flow AS f (kind, target, paused, changed_by)
    VALUES (p_kind, p_target, true, who)
    ON CONFLICT (kind, target) DO UPDATE SET paused = true, changed_at = now(), changed_by = who;
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
    who text := coalesce(nullif(p_actor, ''), 'unknown');
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
    -- The events first, then the rule: the order a dispatch takes them in (the claimed event,
    -- then the rate rows), so the two never wait for each other in a cycle. Rows another
    -- paused rule holds stay held.
    released := 0;
    IF p_kind = 'route' THEN
        UPDATE webhook_inbox w SET next_attempt_at = now(), held_at = NULL, rate_slot_at = NULL
         WHERE w.status = 'pending' AND (w.held_at IS NOT NULL OR w.rate_slot_at IS NOT NULL)
           AND webhook_inbox_flow_matches(p_target, w.event_type)
           AND NOT webhook_inbox_flow_held_by_other(p_kind, p_target, w.source_scope, w.event_type);
        GET DIAGNOSTICS released = ROW_COUNT;
    ELSIF p_kind = 'scope' THEN
        UPDATE webhook_inbox w SET next_attempt_at = now(), held_at = NULL
         WHERE w.status = 'pending' AND w.held_at IS NOT NULL AND w.source_scope = p_target
           AND NOT webhook_inbox_flow_held_by_other(p_kind, p_target, w.source_scope, w.event_type);
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
        VALUES (p_kind, p_target, false, p_rate, now(), who)
        ON CONFLICT (kind, target) DO UPDATE SET paused = false, rate = p_rate, tat = now(), changed_at = now(),
                                                 changed_by = who;
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
-- Reads the pending rows only (claim indexes).
CREATE OR REPLACE FUNCTION webhook_inbox_flow_stats(
        OUT kind text, OUT target text, OUT paused boolean, OUT rate double precision, OUT pending bigint,
        OUT changed_at timestamptz, OUT changed_by text)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT f.kind, f.target, f.paused, f.rate,
           CASE f.kind
               WHEN 'route' THEN (SELECT count(*) FROM webhook_inbox w
                                   WHERE w.status = 'pending' AND webhook_inbox_flow_matches(f.target, w.event_type))
               WHEN 'scope' THEN (SELECT count(*) FROM webhook_inbox w
                                   WHERE w.status = 'pending' AND w.source_scope = f.target)
               ELSE (SELECT count(*) FROM webhook_inbox_outbox o WHERE o.status = 'pending' AND o.destination = f.target)
           END,
           f.changed_at, f.changed_by
      FROM webhook_inbox_flow f
     ORDER BY f.kind, f.target
$$;
COMMENT ON FUNCTION webhook_inbox_flow_stats() IS
    'Pause and rate rules with their pending events (route, scope) or effects (destination): stats, metrics and the dashboard.';

COMMENT ON COLUMN webhook_inbox_actions.action IS
    'requeue: quarantined -> pending; replay: done -> pending (e.g. after fixing a handler); prune: done events emptied (and delivered effects deleted) by `webhook-inbox-sidecar prune` or rake webhook_inbox:prune; reverify: refused deliveries of an endpoint verified again, the ones that verify stored in the inbox; retire_handler (db/009): a Ruby handler''s registrations removed by an operator (filter handler, event_type, runs_retired; count: registrations removed); pause / resume (db/015): a route, scope or destination paused or resumed (filter kind, target, rate; count: pending held / made due).';
