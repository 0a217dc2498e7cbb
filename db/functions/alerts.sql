-- functions/alerts.sql - operational notifications (db/028): the conditions an operator must
-- hear about, their state, and the messages, sent through the outbox.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- The settings of the checks: the defaults below, overridden key by key by p_settings
-- (`run --notify-setting KEY=VALUE`). An unknown key or a value that is not a positive number
-- raises 22023 naming the key (never a silent default).
CREATE OR REPLACE FUNCTION webhook_inbox_alert_settings(p_settings jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    d jsonb := '{"quarantine_burst": 10, "quarantine_window_s": 600, "backlog_age_s": 600,
                 "signature_failures": 20, "signature_window_s": 900, "recovered_window_s": 900,
                 "paused_backlog": 100, "min_interval_s": 300}';
    k text;
    v jsonb;
BEGIN
    FOR k, v IN SELECT * FROM jsonb_each(coalesce(p_settings, '{}')) LOOP
        IF NOT d ? k THEN
            RAISE EXCEPTION 'webhook_inbox: unknown notify setting %', k
                  USING ERRCODE = '22023', HINT = 'known: ' || (SELECT string_agg(x, ', ' ORDER BY x) FROM jsonb_object_keys(d) x);
        END IF;
        IF jsonb_typeof(v) <> 'number' OR v::text::numeric < 0 OR v::text::numeric > 1e9 THEN
            RAISE EXCEPTION 'webhook_inbox: notify setting % must be a number from 0 to 1e9', k USING ERRCODE = '22023';
        END IF;
    END LOOP;
    RETURN d || coalesce(p_settings, '{}');
END
$$;

-- The conditions that hold now, each with its measure and one line for a human (counts and
-- names only). Each read is bounded by an index: quarantines by processed_at, the head of the
-- pending index, recovered events by recovered_at, the refused deliveries an endpoint keeps
-- (bounded per endpoint), and held events only while a route or scope is paused (counted up
-- to the threshold). Signature failures are seen only for endpoints that keep refused
-- deliveries (keep_refused); the Prometheus rules see every endpoint's.
CREATE OR REPLACE FUNCTION webhook_inbox_alert_conditions(p_settings jsonb DEFAULT '{}')
RETURNS TABLE (condition text, value bigint, summary text)
LANGUAGE plpgsql AS $$
DECLARE
    s jsonb := webhook_inbox_alert_settings(p_settings);
    window_q interval := make_interval(secs => (s ->> 'quarantine_window_s')::float8);
    window_s interval := make_interval(secs => (s ->> 'signature_window_s')::float8);
    window_r interval := make_interval(secs => (s ->> 'recovered_window_s')::float8);
    cap bigint := greatest((s ->> 'quarantine_burst')::bigint, 1) * 100;
    n bigint;
    oldest timestamptz;
    held_targets text;
BEGIN
    SELECT count(*) INTO n FROM (SELECT 1 FROM webhook_inbox w
                                  WHERE w.status = 'quarantined' AND w.processed_at > now() - window_q LIMIT cap) q;
    IF n >= (s ->> 'quarantine_burst')::bigint THEN
        condition := 'quarantine_burst';
        value := n;
        summary := format('%s%s events quarantined in the last %s s (threshold %s)',
                          CASE WHEN n >= cap THEN 'at least ' ELSE '' END, n, s ->> 'quarantine_window_s', s ->> 'quarantine_burst');
        RETURN NEXT;
    END IF;

    SELECT min(w.next_attempt_at) INTO oldest FROM webhook_inbox w
     WHERE w.status = 'pending' AND w.next_attempt_at <= now();
    IF oldest < now() - make_interval(secs => (s ->> 'backlog_age_s')::float8) THEN
        condition := 'backlog_age';
        value := extract(epoch FROM now() - oldest)::bigint;
        summary := format('the oldest due event has waited %s s to run (threshold %s s)', value, s ->> 'backlog_age_s');
        RETURN NEXT;
    END IF;

    FOR condition, value IN
        SELECT 'signature_failures:' || r.endpoint, count(*) FROM webhook_inbox_refused r
         WHERE r.received_at > now() - window_s
         GROUP BY r.endpoint HAVING count(*) >= (s ->> 'signature_failures')::bigint ORDER BY 1
    LOOP
        summary := format('endpoint %s refused %s deliveries for their signature or secret in the last %s s (threshold %s): '
                          'check its secrets before the provider disables it',
                          substr(condition, length('signature_failures:') + 1), value, s ->> 'signature_window_s',
                          s ->> 'signature_failures');
        RETURN NEXT;
    END LOOP;

    SELECT count(*) INTO n FROM webhook_inbox w WHERE w.recovered_at > now() - window_r;
    IF n > 0 THEN
        condition := 'reconcile_recovered';
        value := n;
        summary := format('reconcile recovered %s events in the last %s s that deliveries had missed', n,
                          s ->> 'recovered_window_s');
        RETURN NEXT;
    END IF;

    SELECT string_agg(f.kind || ' ' || f.target, ', ' ORDER BY f.kind, f.target) INTO held_targets
      FROM webhook_inbox_flow f WHERE f.paused AND f.kind IN ('route', 'scope');
    IF held_targets IS NOT NULL THEN
        -- held rows are due in the year 9999 (webhook_inbox_hold): the far end of the pending index
        SELECT count(*) INTO n FROM (SELECT 1 FROM webhook_inbox w
                                      WHERE w.status = 'pending' AND w.next_attempt_at > now() + interval '100 years'
                                        AND w.held_at IS NOT NULL
                                      LIMIT (s ->> 'paused_backlog')::bigint) h;
        IF n >= (s ->> 'paused_backlog')::bigint AND n > 0 THEN
            condition := 'paused_backlog';
            value := n;
            summary := format('at least %s events wait behind a pause (%s)', n, left(held_targets, 500));
            RETURN NEXT;
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_alert_conditions(jsonb) IS
    'Operational notifications: the conditions that hold now (quarantine_burst, backlog_age, signature_failures:<endpoint>, reconcile_recovered, paused_backlog) with their measure and a summary; thresholds from webhook_inbox_alert_settings.';

-- The message for one destination format: 'json' (a JSON object, signed if the destination
-- signs) or 'slack' (Slack's incoming-webhook {"text": ...}).
CREATE OR REPLACE FUNCTION webhook_inbox_alert_message(p_format text, p_condition text, p_state text, p_value bigint,
                                                       p_summary text, p_since timestamptz) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE p_format
        WHEN 'slack' THEN jsonb_build_object('text', format('[%s] webhook_inbox %s on %s: %s%s', upper(p_state), p_condition,
                                                            current_database(), CASE p_state WHEN 'resolved' THEN 'cleared; was: ' ELSE '' END,
                                                            p_summary))
        ELSE jsonb_build_object('type', 'webhook_inbox.alert', 'condition', p_condition, 'state', p_state,
                                'value', p_value, 'summary', p_summary, 'since', p_since, 'database', current_database(),
                                'sent_at', now())
    END
$$;

-- The destinations and formats `run --notify` names, checked: as many formats as names, each
-- name a destination name, each format json or slack. Raises 22023.
CREATE OR REPLACE FUNCTION webhook_inbox_alert_check_targets(p_destinations text[], p_formats text[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF cardinality(p_destinations) IS DISTINCT FROM cardinality(p_formats) OR cardinality(p_destinations) = 0 THEN
        RAISE EXCEPTION 'webhook_inbox: notify needs one format per destination, and at least one' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_destinations, p_formats) t(d, f)
                WHERE d IS NULL OR d !~ '^[a-z][a-z0-9_]{0,62}$' OR f IS NULL OR f NOT IN ('json', 'slack')) THEN
        RAISE EXCEPTION 'webhook_inbox: notify destinations are destination names, formats json or slack' USING ERRCODE = '22023';
    END IF;
END
$$;

-- The outbox operation id of one message: printable, unique per destination, condition, state
-- and time (a repeat in the same second is the same message).
CREATE OR REPLACE FUNCTION webhook_inbox_alert_operation_id(p_destination text, p_condition text, p_state text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT format('alert-%s-%s-%s', p_state, to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS'),
                  left(md5(p_destination || E'\n' || p_condition), 16))
$$;

-- One check, run by `run --notify` every --notify-interval. Under a transaction-level advisory
-- lock (one sidecar of many checks; the others return nothing) the conditions now update the
-- state table; each change to tell - a condition that holds and was not told firing, or one
-- told firing that cleared - at most once per condition per min_interval_s, becomes one outbox
-- message per destination (webhook_inbox_emit outside a handler), recorded as told in the
-- same transaction: the messages and the record commit together, so a change is told once
-- (delivered at least once, as every effect). A condition that cleared before it was told is
-- forgotten. Returns the changes told.
CREATE OR REPLACE FUNCTION webhook_inbox_alerts_check(p_destinations text[], p_formats text[], p_settings jsonb DEFAULT '{}')
RETURNS TABLE (condition text, state text, summary text)
LANGUAGE plpgsql AS $$
DECLARE
    s jsonb := webhook_inbox_alert_settings(p_settings);
    min_interval interval := make_interval(secs => (s ->> 'min_interval_s')::float8);
    c record;
    a webhook_inbox_alerts;
BEGIN
    PERFORM webhook_inbox_alert_check_targets(p_destinations, p_formats);
    IF NOT pg_try_advisory_xact_lock(hashtextextended('webhook_inbox_alerts', 0)) THEN
        RETURN;
    END IF;
    FOR c IN SELECT * FROM webhook_inbox_alert_conditions(s) LOOP
        INSERT INTO webhook_inbox_alerts AS t (condition, firing, since, value, summary, checked_at)
        VALUES (c.condition, true, now(), c.value, c.summary, clock_timestamp())
        ON CONFLICT ON CONSTRAINT webhook_inbox_alerts_pkey DO UPDATE
           SET firing = true, since = CASE WHEN t.firing THEN t.since ELSE now() END,
               value = EXCLUDED.value, summary = EXCLUDED.summary, checked_at = EXCLUDED.checked_at;
    END LOOP;
    UPDATE webhook_inbox_alerts t SET firing = false, since = now()
     WHERE t.firing AND t.checked_at < now();
    FOR a IN SELECT * FROM webhook_inbox_alerts t
              WHERE ((t.firing AND t.told IS DISTINCT FROM 'firing') OR (NOT t.firing AND t.told = 'firing'))
                AND (t.told_at IS NULL OR t.told_at <= now() - min_interval)
              ORDER BY t.condition
    LOOP
        state := CASE WHEN a.firing THEN 'firing' ELSE 'resolved' END;
        FOR i IN 1 .. cardinality(p_destinations) LOOP
            PERFORM webhook_inbox_emit(webhook_inbox_alert_operation_id(p_destinations[i], a.condition, state), p_destinations[i],
                                       webhook_inbox_alert_message(p_formats[i], a.condition, state, a.value, a.summary, a.since));
        END LOOP;
        UPDATE webhook_inbox_alerts t SET told = state, told_at = now() WHERE t.condition = a.condition;
        condition := a.condition;
        summary := a.summary;
        RETURN NEXT;
    END LOOP;
    -- clear and nothing left to tell: forgotten once the interval since the last message is over
    DELETE FROM webhook_inbox_alerts t
     WHERE NOT t.firing AND t.told IS DISTINCT FROM 'firing' AND (t.told_at IS NULL OR t.told_at <= now() - min_interval);
END
$$;
COMMENT ON FUNCTION webhook_inbox_alerts_check(text[], text[], jsonb) IS
    'Operational notifications (`run --notify`): one check under an advisory lock (one sidecar of many); each condition that started to hold or cleared is told once to every destination through the outbox (one message per condition per min_interval_s at most) and recorded in webhook_inbox_alerts. Returns the changes told.';

-- `notify --test`: one test message to each destination through the outbox; returns the
-- operation ids, whose delivery the command then waits for.
CREATE OR REPLACE FUNCTION webhook_inbox_alerts_test(p_destinations text[], p_formats text[])
RETURNS TABLE (destination text, operation_id text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_inbox_alert_check_targets(p_destinations, p_formats);
    FOR i IN 1 .. cardinality(p_destinations) LOOP
        destination := p_destinations[i];
        operation_id := webhook_inbox_alert_operation_id(destination, 'test', 'test') || '-' || left(md5(random()::text), 8);
        PERFORM webhook_inbox_emit(operation_id, destination,
                                   webhook_inbox_alert_message(p_formats[i], 'test', 'test', 0,
                                                               'a test message from `webhook-inbox-sidecar notify --test`', now()));
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_alerts_test(text[], text[]) IS
    'Operational notifications: `notify --test` records one test message per destination in the outbox; returns the operation ids.';
