-- citus/002_outbox.sql - the outbox and the effects received on a Citus cluster (run after
-- citus/001_layout.sql by `migrate --citus`, and again by every later `migrate`).
-- Idempotent: safe to re-run. Converts existing tables in place.
--
-- Layout:
--   webhook_inbox_outbox            distributed by source_scope, co-located with webhook_inbox:
--                                   a handler's emit, a Ruby run and its event are on one
--                                   shard, so dispatch and the Ruby worker's round commit on
--                                   one node. Citus needs the distribution column in every
--                                   unique key: the primary key has it on one node too (db/025:
--                                   (operation_id, source_scope); a cluster converted before
--                                   v25 keeps (source_scope, operation_id), the same key), so
--                                   the core functions name the same key here.
--   webhook_inbox_effects_received  a reference table (a copy on every node): the dispatch reads
--                                   it for every event (the SQL route's once-marker, db/009's
--                                   run_event), by an operation id computed from a regproc that
--                                   Citus cannot prune by, so distributed it read all 32 shards
--                                   per event (30-45 ms); a copy is read where the query runs.
--                                   Written by the Rails app's receive_effect and by the marker
--                                   of types with Ruby handlers (two-phase commit over the nodes),
--                                   and pruned with the effects.
-- Wake-ups: the outbox's NOTIFY trigger is dropped (on a worker it fails the two-phase commit
-- of a transaction over two nodes, and no deliverer listens there); the deliverer and the
-- Ruby worker poll (--poll-interval). requeue --effects still notifies from the coordinator.
--
-- Still redefines these core functions (db/functions/outbox.sql, ruby_handlers.sql) in a
-- Citus form, with the same signatures and results, re-applied after every migrate so that
-- db/functions/ is overridden again here: Citus refuses FOR UPDATE over several shards, so
-- each takes or locks one scope at a time. A change to one of them must change its form here
-- too, until the core is written for both (issue 29; spec/webhook_inbox/schema_layout_spec.rb
-- lists them, and the list only shrinks).
--   webhook_inbox_outbox_claim         (015) one scope at a time (router queries), up to p_limit
--   webhook_inbox_outbox_save_batch    one lookup of the scopes, then webhook_inbox_outbox_save_scoped
--                                      per answer
--   webhook_inbox_ruby_claim           (015) one scope per claim (PL/pgSQL: Citus cannot plan the
--                                      SQL function's parameters), the event joined on its shard;
--                                      the scope kept for webhook_inbox_ruby_save
--   webhook_inbox_ruby_start           (015) one scope at a time, as ruby_claim
--   webhook_inbox_ruby_start_batch,    (016) the batch steps: starts one scope at a time as
--   webhook_inbox_ruby_lock_batch      ruby_start, the runs found once and locked on their shards
-- and adds the Citus-only helpers webhook_inbox_citus_ruby_paused() and
-- webhook_inbox_citus_ruby_scopes(). db/015's pause checks read webhook_inbox_flow, a
-- reference table from citus/004; webhook_inbox_outbox_next_due (015) is converted by citus/005.

DROP TRIGGER IF EXISTS webhook_inbox_outbox_notify_insert ON webhook_inbox_outbox;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_outbox'::regclass) THEN
        PERFORM create_distributed_table('webhook_inbox_outbox', 'source_scope', colocate_with => 'webhook_inbox');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_effects_received'::regclass) THEN
        PERFORM create_reference_table('webhook_inbox_effects_received');
    END IF;
END
$$;

-- The deliverer's claim: db/015's (nothing while the destination is paused, one effect per
-- free slot when it is rate limited), one source_scope (one shard) at a time among the scopes of
-- the oldest due effects of the destination (random order, so concurrent sidecars start on
-- different scopes), until p_limit effects are leased or the scopes run out. The window
-- applies the claim's own filters (destination, pending, due, lease expired; the pause before),
-- so it holds only effects the claim may take, bar those another claim has locked at that
-- moment (effects have no ordering key: nothing holds one back for long). Committed at
-- once by the sidecar (autocommit), like db/006's; over several nodes with two-phase commit.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_claim(
        p_destination text, p_limit integer, p_owner text, p_lease_ms bigint, p_max_attempts integer)
RETURNS TABLE (operation_id text, payload text, attempts integer)
LANGUAGE plpgsql AS $$
DECLARE
    s    text;
    got  integer := 0;
    k    integer;
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
    FOR s IN
        SELECT d.scope FROM (SELECT DISTINCT o.scope FROM (
                 SELECT c.source_scope AS scope FROM webhook_inbox_outbox c
                  WHERE c.destination = p_destination AND c.status = 'pending' AND c.next_attempt_at <= now()
                    AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
                  ORDER BY c.next_attempt_at LIMIT 256) o) d
         ORDER BY random()
    LOOP
        RETURN QUERY
        WITH due AS (
            SELECT c.operation_id, c.attempts >= p_max_attempts AS spent
              FROM webhook_inbox_outbox c
             WHERE c.source_scope = s AND c.destination = p_destination AND c.status = 'pending'
               AND c.next_attempt_at <= now() AND (c.lease_until IS NULL OR c.lease_until < clock_timestamp())
             ORDER BY c.next_attempt_at, c.created_at
             LIMIT lim - got
               FOR UPDATE SKIP LOCKED
        ), quarantined AS (
            UPDATE webhook_inbox_outbox o
               SET status = 'quarantined', processed_at = clock_timestamp(), lease_owner = NULL, lease_until = NULL,
                   last_error = left(CASE WHEN o.lease_until IS NULL THEN 'max attempts reached'
                                          ELSE 'max attempts reached; the last delivery was never saved (sidecar stopped): outcome unknown'
                                     END || coalesce(' (before: ' || o.last_error || ')', ''), 1000)
             WHERE o.source_scope = s AND o.operation_id = ANY (ARRAY(SELECT due.operation_id FROM due WHERE due.spent))
            RETURNING o.operation_id
        )
        UPDATE webhook_inbox_outbox o
           SET attempts = o.attempts + 1, lease_owner = p_owner,
               lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
               last_attempt_at = clock_timestamp()
         WHERE o.source_scope = s AND o.operation_id = ANY (ARRAY(SELECT due.operation_id FROM due WHERE NOT due.spent))
        RETURNING o.operation_id, o.payload::text, o.attempts;
        GET DIAGNOSTICS k = ROW_COUNT;
        got := got + k;
        EXIT WHEN got >= lim;
    END LOOP;
    IF rule.rate IS NOT NULL AND got > 0 THEN
        PERFORM webhook_inbox_flow_take('destination', p_destination);
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer) IS
    'Sidecar v6 (Citus: one scope at a time): lease up to p_limit due pending effects of one destination to p_owner for p_lease_ms; those already at p_max_attempts are quarantined instead. v15: nothing while the destination is paused, one per rate slot when it is rate limited.';

-- db/007's batch: the same rows out (operation id order, an id given twice saves its first
-- answer only), each answer saved on its effect's shard.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save_batch(
        p_owner text, p_operation_ids text[], p_results text[], p_errors text[], p_statuses integer[],
        p_bodies text[], p_retry_after_ms bigint[], p_max_attempts integer, p_backoff_base_ms bigint,
        p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, new_status text, new_attempts integer, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    n      integer := coalesce(cardinality(p_operation_ids), 0);
    bad    text;
    a      record;
    scopes jsonb;
    prev   text;
BEGIN
    IF coalesce(cardinality(p_results), 0) <> n OR coalesce(cardinality(p_errors), 0) <> n
       OR coalesce(cardinality(p_statuses), 0) <> n OR coalesce(cardinality(p_bodies), 0) <> n
       OR coalesce(cardinality(p_retry_after_ms), 0) <> n THEN
        RAISE EXCEPTION 'webhook_inbox_outbox_save_batch: the arrays must have one element per operation id'
              USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(r, 'NULL') INTO bad FROM unnest(p_results) r
     WHERE r IS NULL OR r NOT IN ('delivered', 'retry', 'quarantine') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'webhook_inbox: p_result must be delivered, retry or quarantine, not %', bad
              USING ERRCODE = '22023';
    END IF;
    SELECT jsonb_object_agg(o.operation_id, o.source_scope) INTO scopes FROM webhook_inbox_outbox o
     WHERE o.operation_id = ANY (p_operation_ids) AND o.lease_owner = p_owner AND o.status = 'pending';
    FOR a IN SELECT u.* FROM unnest(p_operation_ids, p_results, p_errors, p_statuses, p_bodies, p_retry_after_ms)
                             WITH ORDINALITY u(id, result, error, status, body, retry_after_ms, ord)
              ORDER BY u.id, u.ord
    LOOP
        operation_id := a.id;
        new_status := NULL;
        new_attempts := NULL;
        retry_in_ms := NULL;
        IF a.id IS DISTINCT FROM prev AND scopes ? a.id THEN
            SELECT s.new_status, s.new_attempts, s.retry_in_ms INTO new_status, new_attempts, retry_in_ms
              FROM webhook_inbox_outbox_save_scoped(scopes ->> a.id, a.id, p_owner, a.result, a.error, a.status, a.body,
                                                   a.retry_after_ms, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms) s;
        END IF;
        prev := a.id;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save_batch(text, text[], text[], text[], integer[], text[], bigint[], integer, bigint, bigint) IS
    'Sidecar v7 (Citus): webhook_inbox_outbox_save() for many deliveries; one row per delivery, NULL statuses where the lease was lost.';

-- Whether the destination 'ruby' (the Ruby handlers' runs) is paused (db/015).
CREATE OR REPLACE FUNCTION webhook_inbox_citus_ruby_paused() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM webhook_inbox_flow f WHERE f.kind = 'destination' AND f.target = 'ruby' AND f.paused);
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_ruby_paused() IS
    'Citus: whether the Ruby handlers'' runs are paused (the destination ruby in webhook_inbox_flow).';

-- The scopes the Ruby worker's claims below try, in random order (concurrent workers start on
-- different scopes): those of the 256 oldest due pending runs. Every run there is one those
-- claims may take (the same filters: destination ruby, pending, due; a charged run is leased
-- past now(), and the pause is checked before), bar one another claim has locked at that
-- moment: a run waits for its event's key in the lock step (db/021), never in the claim, and
-- a key's pending runs are those of one event (its later events wait for it, db/014), so no
-- held key fills the window.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_ruby_scopes()
RETURNS TABLE (scope text)
LANGUAGE sql AS $$
    SELECT d.scope FROM (SELECT DISTINCT o.scope FROM (
             SELECT c.source_scope AS scope FROM webhook_inbox_outbox c
              WHERE c.destination = 'ruby' AND c.status = 'pending' AND c.next_attempt_at <= now()
              ORDER BY c.next_attempt_at LIMIT 256) o) d
     ORDER BY random()
$$;
COMMENT ON FUNCTION webhook_inbox_citus_ruby_scopes() IS
    'Citus: the scopes the Ruby worker''s claims try, in random order - those of the 256 oldest due pending Ruby runs.';

-- The Ruby worker's claim before v13: db/015's (none while the destination ruby is paused), on ONE source_scope (one shard: the runs and their
-- events are co-located), like webhook_inbox_citus_claim. The scope is kept in the
-- transaction (webhook_inbox.ruby_scope) for webhook_inbox_ruby_save.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_claim(p_limit integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    s text;
BEGIN
    IF webhook_inbox_citus_ruby_paused() THEN
        RETURN;
    END IF;
    FOR s IN SELECT r.scope FROM webhook_inbox_citus_ruby_scopes() r LOOP
        RETURN QUERY
        WITH due AS (
            SELECT o.operation_id, o.payload->>'handler' AS handler, o.attempts + 1 AS attempt,
                   o.source_scope, o.source_event_id
              FROM webhook_inbox_outbox o
             WHERE o.source_scope = s AND o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
             ORDER BY o.next_attempt_at, o.created_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED
        )
        SELECT d.operation_id, d.handler, d.attempt, d.source_scope, d.source_event_id, w.event_type, w.payload::text,
               CASE WHEN w.payload IS NULL THEN translate(encode(w.raw_body, 'base64'), E'\n', '') END, w.received_at
          FROM due d
          LEFT JOIN webhook_inbox w ON w.source_scope = s AND w.source_scope = d.source_scope AND w.event_id = d.source_event_id;
        IF FOUND THEN
            PERFORM set_config('webhook_inbox.ruby_scope', s, true);
            RETURN;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_claim(integer) IS
    'Ruby worker (Citus: one source scope per claim): lock up to p_limit due Ruby runs (FOR UPDATE SKIP LOCKED, held until the caller commits) with their events'' columns. v15: none while destination ruby is paused.';

-- The Ruby worker's step 1 from v13: db/015's webhook_inbox_ruby_start (013's, with the
-- pause check), one source_scope at a time like the claim above, the times in variables
-- (Citus refuses VOLATILE functions, and STABLE ones over a column, in an UPDATE).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_start(p_max_attempts integer, p_backoff_base_ms bigint,
        p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, attempt integer, exhausted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    s    text;
    op   text;
    seen integer;
    t    timestamptz;
    nxt  timestamptz;
BEGIN
    IF webhook_inbox_citus_ruby_paused() THEN
        RETURN;
    END IF;
    FOR s IN SELECT r.scope FROM webhook_inbox_citus_ruby_scopes() r LOOP
        SELECT o.operation_id, o.attempts INTO op, seen FROM webhook_inbox_outbox o
         WHERE o.source_scope = s AND o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
         ORDER BY o.next_attempt_at, o.created_at
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        t := clock_timestamp();
        nxt := t + webhook_inbox_retry_delay_ms(seen, p_backoff_base_ms, p_backoff_cap_ms) * interval '1 millisecond';
        UPDATE webhook_inbox_outbox o
           SET attempts = o.attempts + CASE WHEN seen < p_max_attempts THEN 1 ELSE 0 END,
               last_attempt_at = t, next_attempt_at = nxt
         WHERE o.source_scope = s AND o.operation_id = op
        RETURNING o.operation_id, o.attempts, seen >= p_max_attempts INTO operation_id, attempt, exhausted;
        RETURN NEXT;
        RETURN;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_start(integer, bigint, bigint) IS
    'Ruby worker, step 1 (committed before the handler runs; Citus: one scope at a time): take one due run, unless the destination ruby is paused (v15), charge it (attempts + 1) and lease it for its backoff; exhausted when it had its last attempt already.';

-- db/016's batch steps. Step 1 as the Citus webhook_inbox_ruby_start above (one source scope
-- at a time, each run taken alone and charged on its shard, the times in variables), up to
-- p_limit first attempts over the scopes; a run with an earlier attempt comes alone, as in
-- db/016.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_start_batch(p_limit integer, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, attempt integer, exhausted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    s    text;
    op   text;
    seen integer;
    n    integer := 0;
    t    timestamptz;
    nxt  timestamptz;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_start_batch: p_limit and p_max_attempts must be >= 1' USING ERRCODE = '22023';
    END IF;
    IF webhook_inbox_citus_ruby_paused() THEN
        RETURN;
    END IF;
    FOR s IN SELECT r.scope FROM webhook_inbox_citus_ruby_scopes() r LOOP
        LOOP
            -- A charged run is leased past now(): the next look skips it.
            SELECT o.operation_id, o.attempts INTO op, seen FROM webhook_inbox_outbox o
             WHERE o.source_scope = s AND o.destination = 'ruby' AND o.status = 'pending' AND o.next_attempt_at <= now()
             ORDER BY o.next_attempt_at, o.created_at
             LIMIT 1
               FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            IF n > 0 AND seen > 0 THEN
                RETURN;
            END IF;
            t := clock_timestamp();
            nxt := t + webhook_inbox_retry_delay_ms(seen, p_backoff_base_ms, p_backoff_cap_ms) * interval '1 millisecond';
            UPDATE webhook_inbox_outbox o
               SET attempts = o.attempts + CASE WHEN seen < p_max_attempts THEN 1 ELSE 0 END,
                   last_attempt_at = t, next_attempt_at = nxt
             WHERE o.source_scope = s AND o.operation_id = op
            RETURNING o.operation_id, o.attempts, seen >= p_max_attempts INTO operation_id, attempt, exhausted;
            RETURN NEXT;
            n := n + 1;
            IF seen > 0 OR n >= p_limit THEN
                RETURN;
            END IF;
        END LOOP;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_start_batch(integer, integer, bigint, bigint) IS
    'Ruby worker v16, step 1 (Citus: one scope at a time): up to p_limit due first attempts, or one other run alone, each charged and leased as webhook_inbox_ruby_start; none while destination ruby is paused.';

-- db/016's step 2: the runs found by their operation ids on every shard once (unlocked), their
-- events' ordering keys (db/021: read per event, then locked in lock id order on each event's
-- node, so workers sharing keys take them in one order), then in the order of their events
-- each event and then its run locked on their shard, as webhook_inbox_ruby_lock (db/functions/
-- ruby_handlers.sql) does for one.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock_batch(p_operation_ids text[], p_attempts integer[])
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r   record;
    at  integer;
    run webhook_inbox_outbox;
    ev  webhook_inbox;
    id  bigint;
    ids bigint[] := '{}';      -- per keyed run: its key's lock id, its scope and event
    scopes text[] := '{}';
    events text[] := '{}';
BEGIN
    IF p_operation_ids IS NULL OR p_attempts IS NULL OR cardinality(p_operation_ids) <> cardinality(p_attempts) THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_lock_batch: one attempt per operation id' USING ERRCODE = '22023';
    END IF;
    FOR r IN
        SELECT o.source_scope AS scope, o.source_event_id AS event FROM webhook_inbox_outbox o
         WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby'
    LOOP
        id := NULL;
        SELECT webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key) INTO id FROM webhook_inbox w
         WHERE w.source_scope = r.scope AND w.event_id = r.event AND w.ordering_key IS NOT NULL;
        IF id IS NOT NULL THEN
            ids := ids || id;
            scopes := scopes || r.scope;
            events := events || r.event;
        END IF;
    END LOOP;
    FOR r IN
        SELECT DISTINCT ON (k.id) k.scope, k.event FROM unnest(ids, scopes, events) AS k(id, scope, event) ORDER BY k.id
    LOOP
        PERFORM webhook_inbox_citus_lock_key(r.scope, r.event, true);
    END LOOP;
    FOR r IN
        SELECT o.source_scope AS scope, o.source_event_id AS event, o.operation_id AS op FROM webhook_inbox_outbox o
         WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby'
         ORDER BY 1, 2, 3
    LOOP
        at := p_attempts[array_position(p_operation_ids, r.op)];
        SELECT * INTO ev FROM webhook_inbox w
         WHERE w.source_scope = r.scope AND w.event_id = r.event
           FOR UPDATE;
        SELECT * INTO run FROM webhook_inbox_outbox o
         WHERE o.source_scope = r.scope AND o.operation_id = r.op AND o.destination = 'ruby'
           AND o.status = 'pending' AND o.attempts = at
           FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        RETURN QUERY SELECT run.operation_id, run.payload->>'handler', at, run.source_scope, run.source_event_id,
                            ev.event_type, ev.payload::text,
                            CASE WHEN ev.payload IS NULL AND ev.raw_body IS NOT NULL
                                 THEN translate(encode(ev.raw_body, 'base64'), E'\n', '') END,
                            ev.received_at;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock_batch(text[], integer[]) IS
    'Ruby worker v16, step 2 (Citus: on each run''s shard): the runs'' events'' ordering keys (v21, in lock id order), then each run''s event, then the run if still pending at its attempt, in the order of their events; the runs still pending at their attempt.';

DO $$
BEGIN
    PERFORM webhook_inbox_citus_propagate(); -- those over the outbox's row type, now on the workers
END
$$;
