-- 018_ruby_register_wake.sql - schema version 18: a Ruby worker's registration makes the
-- events it now routes due at once. On a first deploy the sidecar may dispatch events before
-- the Ruby worker (`bin/webhook-inbox-sidecar ruby`) has registered its handlers: those
-- events find no route and wait (--unrouted wait: pending, uncharged, last_error 'no route
-- for event type', due again after --unrouted-delay, 60 s by default). The registration now
-- makes each such event whose type a registered pattern matches due now, in the
-- registration's transaction, and wakes the sidecars (NOTIFY webhook_inbox), so they are
-- handed to the worker at once instead of a minute later. Every pair given counts, also one
-- registered before: a worker's restart picks up an event that a dispatch running during an
-- earlier registration (it read the handlers before that commit) put off again.
-- Idempotent: safe to re-run. Applied after 001..015 (016 and 017 are other changes).
--
-- Redefines: webhook_inbox_ruby_register (009's body, then the wake-up).
-- Additive: webhook_inbox_schema_min_worker() stays 4.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 18 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

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
