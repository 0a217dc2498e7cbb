-- 006_outbox.sql - schema version 6: the outbox of external side effects. A handler records
-- an effect (send a receipt, capture a payment) with webhook_inbox_emit() in its own
-- transaction, keyed by a business operation id; the sidecar delivers it over HTTP with that
-- id as the Idempotency-Key, under a lease (no row lock during the call), and saves the
-- answer only while it still owns the lease. Also the dedupe table of effects received by
-- the Rails app (WebhookInbox::Controller#receive_effect).
-- Idempotent: safe to re-run. Applied after 001..004 (and any 005/006) by
-- `webhook-inbox-sidecar migrate` and the Rails generator.
--
-- Additive: webhook_inbox_schema_min_worker() stays 004's 4 (not redefined here), so v4
-- sidecars keep processing events against it (they deliver no effects).
-- webhook_inbox_run_handler() gets a new body with the same signature and behaviour, plus
-- the source event (below) for webhook_inbox_emit().

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 6 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

CREATE TABLE IF NOT EXISTS webhook_inbox_outbox (
    operation_id     text        PRIMARY KEY
                     CONSTRAINT webhook_inbox_outbox_operation_id_check CHECK (operation_id ~ '^[!-~]{1,200}$'),
    destination      text        NOT NULL
                     CONSTRAINT webhook_inbox_outbox_destination_check CHECK (destination ~ '^[a-z][a-z0-9_]{0,62}$'),
    payload          jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                     CONSTRAINT webhook_inbox_outbox_status_check
                     CHECK (status IN ('pending', 'delivered', 'quarantined')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_until      timestamptz,
    last_error       text
                     CONSTRAINT webhook_inbox_outbox_last_error_check CHECK (length(last_error) <= 1000),
    response_status  integer,
    response_excerpt text
                     CONSTRAINT webhook_inbox_outbox_excerpt_check CHECK (length(response_excerpt) <= 1000),
    provider_id      text
                     CONSTRAINT webhook_inbox_outbox_provider_id_check CHECK (length(provider_id) <= 200),
    source_scope     text,
    source_event_id  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_attempt_at  timestamptz,
    processed_at     timestamptz
);
COMMENT ON TABLE webhook_inbox_outbox IS
    'External side effects, one row per business operation: recorded by webhook_inbox_emit() in the handler''s transaction, delivered by the sidecar (HTTP POST, Idempotency-Key = operation_id) under a lease.';
COMMENT ON COLUMN webhook_inbox_outbox.operation_id IS
    'The business operation''s own id (''receipt:'' || payment id), not the event id: the primary key and the Idempotency-Key / webhook-id sent on every attempt. Printable ASCII, no spaces, at most 200 characters (it travels in a header).';
COMMENT ON COLUMN webhook_inbox_outbox.destination IS
    'Name of a destination configured in the sidecar (--destination NAME=URL); its URL and credentials live there, never in this table or the payload.';
COMMENT ON COLUMN webhook_inbox_outbox.payload IS 'The JSON body POSTed to the destination (the first emit''s; a repeated emit does not change it).';
COMMENT ON COLUMN webhook_inbox_outbox.status IS
    'pending (to deliver; retried with backoff), delivered (a 2xx was saved, final) or quarantined (4xx, or max attempts: needs a human or `requeue --effects`).';
COMMENT ON COLUMN webhook_inbox_outbox.attempts IS
    'Deliveries started (counted when claimed, so a sidecar killed during a call still counts one); quarantined at the sidecar''s --max-attempts.';
COMMENT ON COLUMN webhook_inbox_outbox.next_attempt_at IS 'Earliest time a sidecar may start the next delivery (backoff, or the destination''s Retry-After).';
COMMENT ON COLUMN webhook_inbox_outbox.lease_owner IS
    'Random id of the sidecar delivering it now; the save applies only while this is still the saver''s id.';
COMMENT ON COLUMN webhook_inbox_outbox.lease_until IS
    'The lease ends then (no row lock is held during the HTTP call); an expired lease lets another sidecar start the delivery again with the same key.';
COMMENT ON COLUMN webhook_inbox_outbox.last_error IS 'Why the last delivery failed or why it was quarantined (status and reason; never credentials).';
COMMENT ON COLUMN webhook_inbox_outbox.response_status IS 'HTTP status of the last answer (NULL: no answer: timeout or connection error).';
COMMENT ON COLUMN webhook_inbox_outbox.response_excerpt IS 'The first 1000 characters of the last answer''s body.';
COMMENT ON COLUMN webhook_inbox_outbox.provider_id IS 'The top-level "id" of a JSON answer (the provider''s id for the receipt, refund, shipment), when it has one.';
COMMENT ON COLUMN webhook_inbox_outbox.source_scope IS 'source_scope of the inbox event whose handler emitted the effect (NULL outside a handler).';
COMMENT ON COLUMN webhook_inbox_outbox.source_event_id IS 'event_id of the inbox event whose handler emitted the effect (NULL outside a handler).';
COMMENT ON COLUMN webhook_inbox_outbox.created_at IS 'When the emitting transaction recorded the effect.';
COMMENT ON COLUMN webhook_inbox_outbox.last_attempt_at IS 'When the last delivery started.';
COMMENT ON COLUMN webhook_inbox_outbox.processed_at IS 'When the effect became delivered or quarantined.';

CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_claim_idx
    ON webhook_inbox_outbox (destination, next_attempt_at, created_at)
    WHERE status = 'pending';
COMMENT ON INDEX webhook_inbox_outbox_claim_idx IS
    'Partial index serving the sidecar''s per-destination claim: only pending effects, ordered by due time.';

-- Wake the sidecars' deliverers: one NOTIFY per inserting statement.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('webhook_inbox_outbox', '');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_notify() IS 'Statement trigger: NOTIFY webhook_inbox_outbox so LISTENing deliverers wake up.';

DROP TRIGGER IF EXISTS webhook_inbox_outbox_notify_insert ON webhook_inbox_outbox;
CREATE TRIGGER webhook_inbox_outbox_notify_insert
    AFTER INSERT ON webhook_inbox_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_inbox_outbox_notify();

-- Effects the Rails app has received (receive_effect): one row per operation id, inserted in
-- the transaction that runs the block, so the block's writes and "done" commit together.
CREATE TABLE IF NOT EXISTS webhook_inbox_effects_received (
    operation_id text        PRIMARY KEY,
    name         text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_inbox_effects_received IS
    'Effects run by the Rails app (WebhookInbox::Controller#receive_effect), one row per operation id (the webhook-id the sidecar signs): committed with the block''s writes, so a redelivery is answered without running the block again.';
COMMENT ON COLUMN webhook_inbox_effects_received.operation_id IS 'The effect''s operation id (webhook_inbox_outbox.operation_id, sent as webhook-id).';
COMMENT ON COLUMN webhook_inbox_effects_received.name IS 'The receive_effect name that ran it (:send_receipt).';
COMMENT ON COLUMN webhook_inbox_effects_received.received_at IS 'When the block''s transaction committed.';

-- Same signature and results as 004's body; also tells webhook_inbox_emit() which event is
-- being handled (transaction-local settings, cleared after the handler; a failing handler's
-- savepoint rollback restores them).
CREATE OR REPLACE FUNCTION webhook_inbox_run_handler(
        ev webhook_inbox, p_handler regproc, OUT result text, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    outcome text;
BEGIN
    PERFORM set_config('webhook_inbox.source_scope', ev.source_scope, true),
            set_config('webhook_inbox.source_event_id', ev.event_id, true);
    EXECUTE format('SELECT %s($1)', p_handler) INTO outcome USING ev;
    PERFORM set_config('webhook_inbox.source_scope', '', true),
            set_config('webhook_inbox.source_event_id', '', true);
    result := 'done';
    detail := coalesce(outcome, 'done');
EXCEPTION
    WHEN SQLSTATE 'WIQ01' THEN
        result := 'quarantined';
        detail := SQLERRM;
    WHEN OTHERS THEN
        result := 'retry';
        detail := SQLSTATE || ': ' || SQLERRM;
END
$$;
COMMENT ON FUNCTION webhook_inbox_run_handler(webhook_inbox, regproc) IS
    'Sidecar v4: run one handler in a subtransaction (savepoint); returns done/quarantined/retry with the outcome, reason or error. Changes no inbox row. (v6: webhook_inbox_emit() inside the handler records this event as the effect''s source.)';

-- Records an external side effect in the caller's transaction (a handler's: it commits or
-- rolls back with the handler's business change). Idempotent: the same operation id again is
-- the same effect; returns true when this call recorded it, false when it existed. The same
-- operation id for another destination is a bug in the caller: raises (22023).
--   PERFORM webhook_inbox_emit('receipt:' || payment_id, 'receipts', jsonb_build_object(...));
--
-- Retention (`prune --older-than`, `run --retain`) deletes delivered effects processed before
-- its window, through webhook_inbox_outbox_delivered_idx (the statement is the sidecar's, like
-- the events'). Idempotency per operation id therefore lasts as long as the effect is kept.
CREATE OR REPLACE FUNCTION webhook_inbox_emit(p_operation_id text, p_destination text, p_payload jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    existing text;
BEGIN
    IF p_operation_id IS NULL OR p_operation_id !~ '^[!-~]{1,200}$' THEN
        RAISE EXCEPTION 'webhook_inbox_emit: operation id must be 1..200 printable ASCII characters without spaces'
              USING ERRCODE = '22023';
    END IF;
    IF p_destination IS NULL OR p_destination !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'webhook_inbox_emit: destination must match [a-z][a-z0-9_]{0,62}' USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'webhook_inbox_emit: payload must not be NULL' USING ERRCODE = '22023';
    END IF;
    INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, source_scope, source_event_id)
    VALUES (p_operation_id, p_destination, p_payload,
            nullif(current_setting('webhook_inbox.source_scope', true), ''),
            nullif(current_setting('webhook_inbox.source_event_id', true), ''))
    ON CONFLICT (operation_id) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT o.destination INTO existing FROM webhook_inbox_outbox o WHERE o.operation_id = p_operation_id;
    IF existing IS DISTINCT FROM p_destination THEN
        RAISE EXCEPTION 'webhook_inbox_emit: operation % was emitted to destination %, not %',
              p_operation_id, existing, p_destination USING ERRCODE = '22023';
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION webhook_inbox_emit(text, text, jsonb) IS
    'Record an external side effect (operation id, destination name, JSON payload) in the caller''s transaction; idempotent per operation id while the effect is kept (true = recorded now, false = already there). Retention deletes delivered effects after its window (`prune`, `run --retain`): the same operation id emitted after that is a new effect.';

-- The sidecar's claim, for one destination: up to p_limit due pending effects whose lease is
-- free, oldest due first (SKIP LOCKED: concurrent sidecars take different rows), each leased
-- to p_owner for p_lease_ms and charged one attempt; committed at once (autocommit): no row
-- lock is held while the sidecar calls the destination. Its cost does not grow with the
-- backlog (a sweep of every pending effect for ones at --max-attempts took 2 ms per claim of
-- 8 with 20000 pending): the due rows it picks (one ordered index range, LIMIT p_limit, SKIP
-- LOCKED) are split: those at the maximum are quarantined (their last allowed delivery was started and never saved, or --max-attempts was
-- lowered), the others leased. Such an effect is quarantined once due, not earlier, and takes
-- one of the p_limit rows (the claim returns fewer: the sidecar claims again at once).
-- Its statements find their rows by primary key (= ANY of the picked ids), so the one generic
-- plan is good whatever p_limit is: plan_cache_mode = force_generic_plan spares the planning
-- that PL/pgSQL otherwise repeats at every call (a custom plan looked cheaper than the
-- generic one, which joined the whole table by hash).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_claim(
        p_destination text, p_limit integer, p_owner text, p_lease_ms bigint, p_max_attempts integer)
RETURNS TABLE (operation_id text, payload text, attempts integer)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_owner IS NULL OR p_lease_ms IS NULL OR p_lease_ms < 1
       OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'webhook_inbox: limit, lease and max attempts must be >= 1, owner non-NULL' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH due AS (
        SELECT c.operation_id, c.attempts >= p_max_attempts AS spent
          FROM webhook_inbox_outbox c
         WHERE c.destination = p_destination AND c.status = 'pending' AND c.next_attempt_at <= now()
           AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
         ORDER BY c.next_attempt_at, c.created_at
         LIMIT p_limit
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
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer) IS
    'Sidecar v6: lease up to p_limit due pending effects of one destination to p_owner for p_lease_ms (attempts + 1 each); due effects already at p_max_attempts (last delivery never saved) are quarantined instead, and not returned. Args: destination, limit, owner, lease ms, max attempts.';

-- The provider's id in an answer: the top-level "id" of a JSON object body, else NULL.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_provider_id(p_body text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    doc jsonb;
BEGIN
    IF p_body IS NULL OR left(ltrim(p_body), 1) <> '{' THEN
        RETURN NULL;
    END IF;
    doc := p_body::jsonb;
    RETURN left(doc ->> 'id', 200);
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_provider_id(text) IS
    'The top-level "id" of a JSON object (at most 200 characters), or NULL when the body is not one.';

-- Saves one delivery's outcome, only while p_owner still holds the lease (another sidecar
-- that took over an expired lease owns the effect now: this save then changes nothing and
-- every OUT value is NULL). p_result:
--   'delivered'  -> status delivered (a 2xx)
--   'retry'      -> pending again, next attempt after webhook_inbox_retry_delay_ms(attempts - 1,
--                   ...) or the destination's Retry-After (p_retry_after_ms, at most a day),
--                   whichever is later; quarantined when attempts reached p_max_attempts
--   'quarantine' -> status quarantined (a 4xx other than 408/429), p_error says why
-- p_status is the HTTP status (NULL: no answer), p_body the answer's body (bounded by the
-- caller); the first 1000 characters are kept, and a JSON "id" as provider_id. The row is
-- found by primary key only (with status and owner in the locking SELECT the planner took
-- the pending partial index, reading every pending effect at every save: 130 us per save
-- with a few thousand pending).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save(
        p_operation_id text, p_owner text, p_result text, p_error text, p_status integer, p_body text,
        p_retry_after_ms bigint, p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    seen integer;
    cur_status text;
    cur_owner text;
    delay_ms bigint;
BEGIN
    IF p_result IS NULL OR p_result NOT IN ('delivered', 'retry', 'quarantine') THEN
        RAISE EXCEPTION 'webhook_inbox: p_result must be delivered, retry or quarantine, not %', p_result
              USING ERRCODE = '22023';
    END IF;
    -- By primary key only, then checked: with status and owner in the WHERE the planner may
    -- walk the pending partial index instead (every pending row, at every save).
    SELECT o.attempts, o.status, o.lease_owner INTO seen, cur_status, cur_owner FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id
       FOR UPDATE;
    IF NOT FOUND OR cur_status <> 'pending' OR cur_owner IS DISTINCT FROM p_owner THEN
        RETURN;
    END IF;
    IF p_result = 'retry' THEN
        delay_ms := greatest(webhook_inbox_retry_delay_ms(seen - 1, p_backoff_base_ms, p_backoff_cap_ms),
                             least(coalesce(p_retry_after_ms, 0), 86400000));
    END IF;
    UPDATE webhook_inbox_outbox o
       SET status = CASE WHEN p_result = 'delivered' THEN 'delivered'
                         WHEN p_result = 'quarantine' OR seen >= p_max_attempts THEN 'quarantined'
                         ELSE 'pending' END,
           lease_owner = NULL, lease_until = NULL,
           last_error = CASE WHEN p_result = 'delivered' THEN NULL ELSE left(p_error, 1000) END,
           response_status = p_status,
           response_excerpt = left(p_body, 1000),
           provider_id = coalesce(webhook_inbox_outbox_provider_id(p_body), o.provider_id),
           next_attempt_at = CASE WHEN delay_ms IS NULL THEN o.next_attempt_at
                                  ELSE clock_timestamp() + delay_ms * interval '1 millisecond' END,
           processed_at = CASE WHEN p_result <> 'retry' OR seen >= p_max_attempts THEN clock_timestamp() END
     WHERE o.operation_id = p_operation_id
    RETURNING o.status, o.attempts INTO new_status, new_attempts;
    IF new_status = 'pending' THEN
        retry_in_ms := delay_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save(text, text, text, text, integer, text, bigint, integer, bigint, bigint) IS
    'Sidecar v6: save one delivery (delivered / retry with backoff or Retry-After / quarantine) if p_owner still holds the lease; NULLs otherwise. Args: operation id, owner, result, error, HTTP status, body, Retry-After ms, max attempts, backoff base ms, backoff cap ms.';

-- Seconds until the next effect of these destinations is due (a pending effect's due time,
-- or its lease's end when later), NULL when none is pending; negative when one is due now.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_next_due(p_destinations text[]) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT extract(epoch FROM min(greatest(o.next_attempt_at, coalesce(o.lease_until, o.next_attempt_at)))
                              - clock_timestamp())::float8
      FROM webhook_inbox_outbox o
     WHERE o.status = 'pending' AND o.destination = ANY (p_destinations)
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_next_due(text[]) IS
    'Seconds until the next pending effect of these destinations may be claimed (NULL: none pending).';

-- Stats read through partial indexes, like webhook_inbox_stats(): pending rows (claim index),
-- quarantined rows, and the rows delivered in the last hour; delivered effects older than that
-- are never read (they are the bulk of the table until pruned).
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_quarantined_idx
    ON webhook_inbox_outbox (destination) WHERE status = 'quarantined';
COMMENT ON INDEX webhook_inbox_outbox_quarantined_idx IS
    'Partial index for stats, metrics and requeue: only quarantined effects.';
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_delivered_idx
    ON webhook_inbox_outbox (processed_at) WHERE status = 'delivered';
COMMENT ON INDEX webhook_inbox_outbox_delivered_idx IS
    'Partial index for stats (delivered in the last hour) and retention (delivered before a time).';

-- Monitoring, per destination: pending (of which retrying: attempted before, and leased:
-- being delivered now), the oldest pending effect's age, quarantined, delivered in the last hour.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_stats(
        OUT destination text, OUT pending bigint, OUT retrying bigint, OUT leased bigint,
        OUT oldest_pending_age_s double precision, OUT quarantined bigint, OUT delivered bigint)
RETURNS SETOF record
LANGUAGE sql STABLE AS $$
    SELECT coalesce(p.destination, q.destination, d.destination),
           coalesce(p.pending, 0), coalesce(p.retrying, 0), coalesce(p.leased, 0), p.oldest,
           coalesce(q.n, 0), coalesce(d.n, 0)
      FROM (SELECT o.destination, count(*) AS pending,
                   count(*) FILTER (WHERE o.attempts > 0 AND o.lease_until IS NULL) AS retrying,
                   count(*) FILTER (WHERE o.lease_until > clock_timestamp()) AS leased,
                   extract(epoch FROM clock_timestamp() - min(o.created_at))::float8 AS oldest
              FROM webhook_inbox_outbox o WHERE o.status = 'pending' GROUP BY o.destination) p
      FULL JOIN (SELECT o.destination, count(*) AS n
                   FROM webhook_inbox_outbox o WHERE o.status = 'quarantined' GROUP BY o.destination) q
             ON q.destination = p.destination
      FULL JOIN (SELECT o.destination, count(*) AS n
                   FROM webhook_inbox_outbox o
                  WHERE o.status = 'delivered' AND o.processed_at >= now() - interval '1 hour'
                  GROUP BY o.destination) d
             ON d.destination = coalesce(p.destination, q.destination)
     ORDER BY 1
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_stats() IS
    'Outbox per destination: pending, retrying, leased (being delivered), oldest pending age in s, quarantined, delivered IN THE LAST HOUR (what `webhook-inbox-sidecar stats` and /metrics show). Reads only pending, quarantined and last-hour rows.';

-- quarantined -> pending (attempts 0, due now) by operation id, destination, or all (both
-- NULL); wakes the deliverers. Returns how many moved.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_requeue(p_operation_id text, p_destination text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    UPDATE webhook_inbox_outbox o
       SET status = 'pending', attempts = 0, next_attempt_at = now(), last_error = NULL,
           lease_owner = NULL, lease_until = NULL, processed_at = NULL
     WHERE o.status = 'quarantined'
       AND (p_operation_id IS NULL OR o.operation_id = p_operation_id)
       AND (p_destination IS NULL OR o.destination = p_destination);
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('webhook_inbox_outbox', '');
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_requeue(text, text) IS
    'quarantined effects -> pending with attempts reset, by operation id and/or destination (NULL = any); returns the count (`requeue --effects`).';
