-- 014_ordering.sql - schema version 14: per-object ordering. The receiver stores an ordering
-- key with each event, derived from its signed payload by PostgreSQL in the INSERT itself
-- (webhook_inbox_ordering_key(), from the provider entry's paths or the endpoint's own; no
-- row trigger on the receipt path), and the provider's event time (ordering_at). The claim
-- never takes an event while an earlier one with the same (source_scope, ordering_key) is
-- still pending, nor - when the event's route is strict - while one is quarantined: one key
-- never runs on two workers at once, and its events run in ordering_at, then received_at,
-- then event_id order. Unkeyed events (ordering_key NULL) are claimed as before.
-- Idempotent: safe to re-run. Applied after 001..013. The new index is built with one scan of
-- the inbox under a SHARE lock (receipts wait meanwhile); on a large inbox create
-- webhook_inbox_ordering_idx CONCURRENTLY, as below, before migrating.
--
-- Redefines: webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint)
-- (005's, with the ordering filter in its claim - the sidecar's claim.c has the same filter -
-- and a static done UPDATE for a batch of one event). Additive otherwise: webhook_inbox_schema_min_worker()
-- stays 4; an older sidecar claims keyed events without looking at their keys.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 14 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

-- Nullable columns without defaults: adding them rewrites nothing.
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS ordering_at timestamptz;
COMMENT ON COLUMN webhook_inbox.ordering_key IS
    'The object the event is about (Stripe data.object.id, Didit session_id, a GitHub repository and issue), read from the signed payload at receipt; events with one key in one scope run one at a time, in ordering_at order. NULL: unordered.';
COMMENT ON COLUMN webhook_inbox.ordering_at IS
    'The provider''s event time (a number of seconds or milliseconds in the signed payload), else the receipt time; set with ordering_key. The receiver starts next_attempt_at at it when earlier, so the claim meets a key''s events in order.';

-- A keyed row always has its time (the claim compares it); NOT VALID: no scan of old rows,
-- which have no key.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'webhook_inbox_ordering_at_check'
                                                 AND conrelid = 'webhook_inbox'::regclass) THEN
        ALTER TABLE webhook_inbox ADD CONSTRAINT webhook_inbox_ordering_at_check
            CHECK (ordering_key IS NULL OR ordering_at IS NOT NULL) NOT VALID;
    END IF;
END
$$;

ALTER TABLE webhook_inbox_routes ADD COLUMN IF NOT EXISTS strict boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN webhook_inbox_routes.strict IS
    'Per-object ordering: true holds an event while an earlier event with its ordering key is quarantined (until it is requeued, or done); false lets it run past a quarantined one (a pending one always holds it).';

-- The predecessor lookup of the claim: only keyed rows that are not done, so the index stays
-- as small as the backlog however many done rows the table keeps.
CREATE INDEX IF NOT EXISTS webhook_inbox_ordering_idx
    ON webhook_inbox (source_scope, ordering_key, ordering_at, received_at, event_id)
    WHERE ordering_key IS NOT NULL AND status <> 'done';
COMMENT ON INDEX webhook_inbox_ordering_idx IS
    'Per-object ordering: the earlier pending or quarantined events of a key, probed once per keyed claim candidate.';

-- The key spec: paths separated by ',', each "a.b.c" (object fields; a number indexes an
-- array) or alternatives "a.b|c.d" (the first present wins). The key is the one value, or
-- for several paths a JSON array of their values; NULL when a path is missing, the payload
-- is not JSON, or the spec is NULL. A key past 200 bytes is stored as "sha256:" and its hex
-- digest, so no payload can make the index entry too large (SQLSTATE 54000 would refuse the
-- receipt). Never raises.
CREATE OR REPLACE FUNCTION webhook_inbox_ordering_key(p_payload jsonb, p_spec text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(key) > 200 THEN 'sha256:' || encode(sha256(convert_to(key, 'UTF8')), 'hex') ELSE key END
      FROM (SELECT CASE WHEN bool_and(k.v IS NOT NULL) THEN
                CASE WHEN count(*) = 1 THEN min(k.v) ELSE jsonb_agg(k.v ORDER BY k.i)::text END
           END AS key
      FROM (SELECT s.i, (SELECT p_payload #>> string_to_array(a.path, '.')
                           FROM unnest(string_to_array(s.alts, '|')) WITH ORDINALITY AS a(path, j)
                          WHERE p_payload #>> string_to_array(a.path, '.') IS NOT NULL
                          ORDER BY a.j LIMIT 1) AS v
              FROM unnest(string_to_array(p_spec, ',')) WITH ORDINALITY AS s(alts, i)) k) keyed
$$;
COMMENT ON FUNCTION webhook_inbox_ordering_key(jsonb, text) IS
    'The ordering key of a payload for a spec ("data.object.id", "repository.id,issue.number|pull_request.number"): the value, a JSON array of the values, or NULL when a path is missing. Called by the receiver''s INSERT.';

-- The provider's event time at path ("created"): a JSON number of seconds, or of milliseconds
-- when above 1e11 (past the year 5138 in seconds); NULL for anything else. Never raises.
CREATE OR REPLACE FUNCTION webhook_inbox_ordering_time(p_payload jsonb, p_path text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN n < 0 OR n >= 1e14 THEN NULL
                WHEN n >= 1e11 THEN to_timestamp((n / 1000)::float8)
                ELSE to_timestamp(n::float8) END
      FROM (SELECT CASE WHEN jsonb_typeof(p_payload #> string_to_array(p_path, '.')) = 'number'
                        THEN (p_payload #>> string_to_array(p_path, '.'))::numeric END AS n) t
$$;
COMMENT ON FUNCTION webhook_inbox_ordering_time(jsonb, text) IS
    'The event time at a payload path: a number of seconds (milliseconds above 1e11), else NULL. Called by the receiver''s INSERT.';

CREATE OR REPLACE FUNCTION webhook_inbox_route_strict(p_event_type text) RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT coalesce((webhook_inbox_route_match(p_event_type)).strict, false) $$;
COMMENT ON FUNCTION webhook_inbox_route_strict(text) IS
    'Whether the route an event type takes is strict (a quarantined predecessor holds the event); false when unrouted.';

-- As in 005, plus: a keyed event is not claimed while an earlier event of its key is pending
-- (running on another worker, backing off, or simply first) or, under a strict route,
-- quarantined; so a batch holds at most one event per key. The same filter is in the
-- sidecar's claim (sidecar/src/claim.c): inlined, not a function, so the plan probes
-- webhook_inbox_ordering_idx once per keyed candidate (a SQL function holding EXISTS is not
-- inlined, and costs ~4x). The receiver sets a keyed event's next_attempt_at to its
-- ordering_at when that is earlier, so the claim's scan meets a key's events in their order
-- and rarely passes over one that must wait.
CREATE OR REPLACE FUNCTION webhook_inbox_dispatch_batch(
        p_limit integer, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    ev         webhook_inbox;
    handler    regproc;
    routed     text;           -- event type whose route is in handler (batches are often one type)
    t0         timestamptz;
    done_scope text[] := '{}';
    done_id    text[] := '{}';
    done_what  text[] := '{}';
    done_ms    float8[] := '{}';
BEGIN
    FOR ev IN
        SELECT * FROM webhook_inbox w
         WHERE w.status = 'pending' AND w.next_attempt_at <= now()
           AND (w.ordering_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM webhook_inbox p
                 WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                   AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
                   AND (p.status = 'pending' OR webhook_inbox_route_strict(w.event_type))))
         ORDER BY w.next_attempt_at, w.received_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    LOOP
        source_scope := ev.source_scope;
        event_id := ev.event_id;
        event_type := ev.event_type;
        attempts := ev.attempts;
        t0 := clock_timestamp();
        latency_ms := extract(epoch FROM t0 - coalesce(ev.requeued_at, ev.received_at)) * 1000;
        IF routed IS DISTINCT FROM ev.event_type THEN
            handler := webhook_inbox_route(ev.event_type);
            routed := ev.event_type;
        END IF;
        SELECT r.result, r.detail, r.charged, r.retry_in_ms INTO result, detail, charged, retry_in_ms
          FROM webhook_inbox_run_event(ev, handler, p_unrouted, p_max_attempts, p_backoff_base_ms,
                                       p_backoff_cap_ms, p_unrouted_delay_ms) r;
        IF result = 'done' THEN
            done_scope := done_scope || ev.source_scope;
            done_id := done_id || ev.event_id;
            done_what := done_what || detail;
            done_ms := done_ms || (extract(epoch FROM clock_timestamp() - t0) * 1000)::float8;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF cardinality(done_id) = 1 THEN
        -- One event (--batch-size 1, a trickle): a static statement by primary key, planned
        -- once per session (EXECUTE planned it at every call: 100-200 us of ~575 us per
        -- transaction); the primary key lookup keeps any cached plan cheap as the inbox grows.
        UPDATE webhook_inbox w
           SET status = 'done', outcome = done_what[1], processed_at = clock_timestamp(), last_error = NULL,
               attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', done_what[1], done_ms[1]))
         WHERE w.source_scope = done_scope[1] AND w.event_id = done_id[1];
    ELSIF cardinality(done_id) > 1 THEN
        EXECUTE $sql$
            UPDATE webhook_inbox w
               SET status = 'done', outcome = d.outcome, processed_at = clock_timestamp(), last_error = NULL,
                   attempt_log = webhook_inbox_log_append(w.attempt_log, webhook_inbox_log_entry('done', d.outcome, d.ms))
              FROM unnest($1, $2, $3, $4) AS d(scope, id, outcome, ms)
             WHERE w.source_scope = d.scope AND w.event_id = d.id
        $sql$ USING done_scope, done_id, done_what, done_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint) IS
    'Sidecar v4: claim up to p_limit due events (FOR UPDATE SKIP LOCKED; a keyed event only when no earlier event of its key must run first), run each handler in its own subtransaction, record done/quarantined/retry (charged, with backoff)/waiting and an attempt_log entry in the same transaction; one row per event; latency from requeued_at or received_at. Args: limit, unrouted policy (wait|ignore|quarantine|retry), max attempts, backoff base ms, backoff cap ms, unrouted delay ms.';
