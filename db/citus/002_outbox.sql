-- citus/002_outbox.sql - the outbox and the effects received on a Citus cluster (run after
-- citus/001_layout.sql by `migrate --citus`, and again by every later `migrate`).
-- Idempotent: safe to re-run. Converts existing tables in place.
--
-- Layout:
--   webhook_inbox_outbox            distributed by source_scope, co-located with webhook_inbox:
--                                   a handler's emit, a Ruby run and its event are on one
--                                   shard, so dispatch and the Ruby worker's round commit on
--                                   one node. Citus needs the distribution column in every
--                                   unique key: the primary key is (source_scope, operation_id),
--                                   so an operation id is unique per source scope (those the
--                                   gem makes - Ruby runs, destination routes - name the scope;
--                                   a handler's own id, 'receipt:' || payment id, is unique in
--                                   its tenant). An effect emitted outside a handler has
--                                   source_scope '' (it is NULL on one node).
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
-- Redefines, with the same signatures and results (Citus refuses FOR UPDATE over several
-- shards and ON CONFLICT (operation_id) has no unique key any more), re-applied after every
-- migrate so that db/functions/ is overridden again here. Each is the core body (db/functions/
-- outbox.sql, ruby_handlers.sql; the version named above it) in its Citus form: a change to
-- one of these must change its form here too, until the core is written for this layout
-- (issue 29; spec/webhook_inbox/schema_layout_spec.rb lists them).
--   webhook_inbox_emit                 ON CONFLICT (source_scope, operation_id)
--   webhook_inbox_run_ruby             (013) the same, and its runs read on the event's shard
--   webhook_inbox_outbox_claim         (015) one scope at a time (router queries), up to p_limit
--   webhook_inbox_outbox_save          the row found by (scope, operation id)
--   webhook_inbox_outbox_save_batch    one lookup of the scopes, then a save per answer
--   webhook_inbox_ruby_claim           (015) one scope per claim (PL/pgSQL: Citus cannot plan the
--                                      SQL function's parameters), the event joined on its shard
--   webhook_inbox_ruby_save            the claimed scope, so the save stays on the shard
--   webhook_inbox_ruby_start           (015) one scope at a time, as ruby_claim
--   webhook_inbox_ruby_lock,           (013) the run locked on its shard (scope and operation id)
--   webhook_inbox_ruby_finish
--   webhook_inbox_ruby_start_batch,    (016) the batch steps: starts one scope at a time as
--   webhook_inbox_ruby_lock_batch,     ruby_start, the runs found once and locked on their shards,
--   webhook_inbox_ruby_finish_batch    their scopes read once for ruby_finish
-- and adds webhook_inbox_citus_outbox_save() (the scoped save) and
-- webhook_inbox_citus_ruby_paused(). db/015's pause checks read webhook_inbox_flow, a
-- reference table from citus/004; webhook_inbox_outbox_next_due (015) is converted by citus/005.

DROP TRIGGER IF EXISTS webhook_inbox_outbox_notify_insert ON webhook_inbox_outbox;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_outbox'::regclass) THEN
        UPDATE webhook_inbox_outbox SET source_scope = '' WHERE source_scope IS NULL;
        ALTER TABLE webhook_inbox_outbox ALTER COLUMN source_scope SET DEFAULT '',
                                         ALTER COLUMN source_scope SET NOT NULL;
        ALTER TABLE webhook_inbox_outbox DROP CONSTRAINT webhook_inbox_outbox_pkey;
        ALTER TABLE webhook_inbox_outbox ADD CONSTRAINT webhook_inbox_outbox_pkey PRIMARY KEY (source_scope, operation_id);
        PERFORM create_distributed_table('webhook_inbox_outbox', 'source_scope', colocate_with => 'webhook_inbox');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_effects_received'::regclass) THEN
        PERFORM create_reference_table('webhook_inbox_effects_received');
    END IF;
END
$$;
COMMENT ON COLUMN webhook_inbox_outbox.source_scope IS
    'source_scope of the inbox event whose handler emitted the effect; on Citus the distribution column, '''' outside a handler.';

CREATE OR REPLACE FUNCTION webhook_inbox_emit(p_operation_id text, p_destination text, p_payload jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    existing text;
    scope    text := coalesce(current_setting('webhook_inbox.source_scope', true), '');
    event    text := nullif(current_setting('webhook_inbox.source_event_id', true), '');
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
    VALUES (p_operation_id, p_destination, p_payload, scope, event)
    ON CONFLICT (source_scope, operation_id) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT o.destination INTO existing FROM webhook_inbox_outbox o
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id;
    IF existing IS DISTINCT FROM p_destination THEN
        RAISE EXCEPTION 'webhook_inbox_emit: operation % was emitted to destination %, not %',
              p_operation_id, existing, p_destination USING ERRCODE = '22023';
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION webhook_inbox_emit(text, text, jsonb) IS
    'Record an external side effect (operation id, destination name, JSON payload) in the caller''s transaction; idempotent per (source scope, operation id) on Citus while the effect is kept (true = recorded now, false = already there).';

-- db/013's body (the SQL route's once-marker carries its event's key); the runs are keyed
-- and counted on the event's shard.
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
        INSERT INTO webhook_inbox_outbox AS o (operation_id, destination, payload, source_scope, source_event_id)
        VALUES (ops[cardinality(ops)], 'ruby', jsonb_build_object('handler', h), ev.source_scope, ev.event_id)
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
    'Dispatch of an event with Ruby handlers (Citus: runs keyed by scope and operation id): the SQL route once, one outbox run per handler; ''handed'' leaves the row pending for the Ruby worker.';

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

-- db/006's webhook_inbox_outbox_save on the row (p_scope, p_operation_id): one shard.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_outbox_save(
        p_scope text, p_operation_id text, p_owner text, p_result text, p_error text, p_status integer, p_body text,
        p_retry_after_ms bigint, p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    seen integer;
    cur_status text;
    cur_owner text;
    delay_ms bigint;
    t timestamptz := clock_timestamp(); -- the times in variables: Citus refuses a non-IMMUTABLE
    nxt timestamptz;                     -- function or operator (timestamptz + interval) in CASE
BEGIN
    IF p_result IS NULL OR p_result NOT IN ('delivered', 'retry', 'quarantine') THEN
        RAISE EXCEPTION 'webhook_inbox: p_result must be delivered, retry or quarantine, not %', p_result
              USING ERRCODE = '22023';
    END IF;
    SELECT o.attempts, o.status, o.lease_owner, o.next_attempt_at INTO seen, cur_status, cur_owner, nxt
      FROM webhook_inbox_outbox o
     WHERE o.source_scope = p_scope AND o.operation_id = p_operation_id
       FOR UPDATE;
    IF NOT FOUND OR cur_status <> 'pending' OR cur_owner IS DISTINCT FROM p_owner THEN
        RETURN;
    END IF;
    IF p_result = 'retry' THEN
        delay_ms := greatest(webhook_inbox_retry_delay_ms(seen - 1, p_backoff_base_ms, p_backoff_cap_ms),
                             least(coalesce(p_retry_after_ms, 0), 86400000));
        nxt := t + delay_ms * interval '1 millisecond';
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
           next_attempt_at = nxt,
           processed_at = CASE WHEN p_result <> 'retry' OR seen >= p_max_attempts THEN t END
     WHERE o.source_scope = p_scope AND o.operation_id = p_operation_id
    RETURNING o.status, o.attempts INTO new_status, new_attempts;
    IF new_status = 'pending' THEN
        retry_in_ms := delay_ms;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_outbox_save(text, text, text, text, text, integer, text, bigint, integer, bigint, bigint) IS
    'Citus: webhook_inbox_outbox_save() on the effect of one (source scope, operation id), one shard.';

-- The leased effect's scope is looked up (one read of every shard; the lease owner's is the
-- only pending row of that id that this owner holds), then saved on its shard.
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_save(
        p_operation_id text, p_owner text, p_result text, p_error text, p_status integer, p_body text,
        p_retry_after_ms bigint, p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint,
        OUT new_status text, OUT new_attempts integer, OUT retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    scope text;
BEGIN
    SELECT o.source_scope INTO scope FROM webhook_inbox_outbox o
     WHERE o.operation_id = p_operation_id AND o.lease_owner = p_owner AND o.status = 'pending'
     LIMIT 1;
    IF NOT FOUND THEN
        IF p_result IS NULL OR p_result NOT IN ('delivered', 'retry', 'quarantine') THEN
            RAISE EXCEPTION 'webhook_inbox: p_result must be delivered, retry or quarantine, not %', p_result
                  USING ERRCODE = '22023';
        END IF;
        RETURN;
    END IF;
    SELECT s.new_status, s.new_attempts, s.retry_in_ms INTO new_status, new_attempts, retry_in_ms
      FROM webhook_inbox_citus_outbox_save(scope, p_operation_id, p_owner, p_result, p_error, p_status, p_body,
                                           p_retry_after_ms, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms) s;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_save(text, text, text, text, integer, text, bigint, integer, bigint, bigint) IS
    'Sidecar v6 (Citus): save one delivery if p_owner still holds the lease; NULLs otherwise.';

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
              FROM webhook_inbox_citus_outbox_save(scopes ->> a.id, a.id, p_owner, a.result, a.error, a.status, a.body,
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
-- transaction (webhook_inbox.citus_ruby_scope) for webhook_inbox_ruby_save.
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
            PERFORM set_config('webhook_inbox.citus_ruby_scope', s, true);
            RETURN;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_claim(integer) IS
    'Ruby worker (Citus: one source scope per claim): lock up to p_limit due Ruby runs (FOR UPDATE SKIP LOCKED, held until the caller commits) with their events'' columns. v15: none while destination ruby is paused.';

-- db/009's save, on the claimed scope's shard (the claim's scope in this transaction; else
-- the run's scope is looked up on every shard).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_save(
        p_operation_id text, p_result text, p_error text, p_duration_ms double precision,
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    run   webhook_inbox_outbox;
    st    text;
    scope text := nullif(current_setting('webhook_inbox.citus_ruby_scope', true), '');
    t     timestamptz := clock_timestamp(); -- the times in variables: Citus refuses VOLATILE functions,
    nxt   timestamptz;                      -- and non-IMMUTABLE ones in CASE, in an UPDATE
BEGIN
    IF p_result IS NULL OR p_result NOT IN ('done', 'retry', 'quarantine') THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_save: p_result must be done, retry or quarantine, not %', p_result
              USING ERRCODE = '22023';
    END IF;
    IF scope IS NULL THEN
        SELECT o.source_scope INTO scope FROM webhook_inbox_outbox o
         WHERE o.operation_id = p_operation_id AND o.destination = 'ruby' LIMIT 1;
    END IF;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id AND o.destination = 'ruby' AND o.status = 'pending'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    st := CASE WHEN p_result = 'done' THEN 'delivered'
               WHEN p_result = 'quarantine' OR run.attempts + 1 >= p_max_attempts THEN 'quarantined'
               ELSE 'pending' END;
    nxt := run.next_attempt_at;
    IF p_result = 'retry' THEN
        nxt := t + webhook_inbox_retry_delay_ms(run.attempts, p_backoff_base_ms, p_backoff_cap_ms) * interval '1 millisecond';
    END IF;
    UPDATE webhook_inbox_outbox o
       SET status = st,
           processed_at = CASE WHEN st <> 'pending' THEN t END,
           attempts = o.attempts + CASE WHEN p_result = 'done' THEN 0 ELSE 1 END,
           last_error = CASE WHEN p_result = 'done' THEN NULL ELSE left(p_error, 1000) END,
           last_attempt_at = t,
           next_attempt_at = nxt
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id
    RETURNING o.* INTO run;
    PERFORM webhook_inbox_ruby_settle(run, p_duration_ms);
    RETURN run.status;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_save(text, text, text, double precision, integer, bigint, bigint) IS
    'Ruby worker (Citus: on the claimed scope''s shard): record one run''s result (done/retry/quarantine) in its claiming transaction and settle its event; returns the run''s new status (NULL: not a pending Ruby run).';

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

-- db/013's step 2: the run's event, then the run, both locked on their shard (the run found by
-- its operation id on every shard first, unlocked). The run's scope is kept in the
-- transaction (webhook_inbox.citus_ruby_scope, _op) for webhook_inbox_ruby_finish. db/021:
-- the event's ordering key first, waited for on the shard's node (webhook_inbox_citus_lock_key,
-- citus/001), where the sidecar's claims try it.
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_lock(p_operation_id text, p_attempt integer)
RETURNS TABLE (operation_id text, handler text, attempt integer, source_scope text, event_id text,
               event_type text, payload text, raw_body_base64 text, received_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    run webhook_inbox_outbox;
    ev  webhook_inbox;
BEGIN
    SELECT * INTO run FROM webhook_inbox_outbox o WHERE o.operation_id = p_operation_id AND o.destination = 'ruby' LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM webhook_inbox_citus_lock_key(run.source_scope, run.source_event_id, true);
    SELECT * INTO ev FROM webhook_inbox w
     WHERE w.source_scope = run.source_scope AND w.event_id = run.source_event_id
       FOR UPDATE;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.source_scope = run.source_scope AND o.operation_id = p_operation_id AND o.destination = 'ruby'
       AND o.status = 'pending' AND o.attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM set_config('webhook_inbox.citus_ruby_scope', run.source_scope, true),
            set_config('webhook_inbox.citus_ruby_op', run.operation_id, true);
    RETURN QUERY SELECT run.operation_id, run.payload->>'handler', p_attempt, run.source_scope, run.source_event_id,
                        ev.event_type, ev.payload::text,
                        CASE WHEN ev.payload IS NULL AND ev.raw_body IS NOT NULL
                             THEN translate(encode(ev.raw_body, 'base64'), E'\n', '') END,
                        ev.received_at;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_lock(text, integer) IS
    'Ruby worker, step 2 (Citus: on the run''s shard): lock the run''s event''s ordering key (v21: waits for the transaction holding it), its event, then the run if still pending at p_attempt; the run with its event''s columns, or no row (skip it).';

-- db/013's step 3 on the run's shard (the scope webhook_inbox_ruby_lock kept, else looked up),
-- the times in variables.
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
    IF p_result IS NULL OR p_result NOT IN ('done', 'retry', 'quarantine') THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_finish: p_result must be done, retry or quarantine, not %', p_result
              USING ERRCODE = '22023';
    END IF;
    IF current_setting('webhook_inbox.citus_ruby_op', true) IS NOT DISTINCT FROM p_operation_id THEN
        scope := current_setting('webhook_inbox.citus_ruby_scope', true);
    ELSE
        SELECT o.source_scope INTO scope FROM webhook_inbox_outbox o
         WHERE o.operation_id = p_operation_id AND o.destination = 'ruby' LIMIT 1;
    END IF;
    SELECT * INTO run FROM webhook_inbox_outbox o
     WHERE o.source_scope = scope AND o.operation_id = p_operation_id AND o.destination = 'ruby'
       AND o.status = 'pending' AND o.attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
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
    'Ruby worker, step 3 (Citus: on the run''s shard): record the run''s result (done/retry/quarantine) for the attempt charged at its start and settle its event; returns the run''s new status (NULL: not that pending run).';

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
-- each event and then its run locked on their shard, as the Citus webhook_inbox_ruby_lock above
-- does for one.
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

-- db/016's step 3: the runs' scopes read on every shard once, then the Citus
-- webhook_inbox_ruby_finish above for each, given its scope (webhook_inbox.citus_ruby_scope, _op).
CREATE OR REPLACE FUNCTION webhook_inbox_ruby_finish_batch(
        p_operation_ids text[], p_attempts integer[], p_results text[], p_errors text[], p_durations_ms double precision[],
        p_max_attempts integer, p_backoff_base_ms bigint, p_backoff_cap_ms bigint)
RETURNS TABLE (operation_id text, status text)
LANGUAGE plpgsql AS $$
DECLARE
    r      record;
    scopes jsonb := '{}';
BEGIN
    IF p_operation_ids IS NULL OR p_attempts IS NULL OR p_results IS NULL OR p_errors IS NULL OR p_durations_ms IS NULL
       OR cardinality(p_attempts) <> cardinality(p_operation_ids) OR cardinality(p_results) <> cardinality(p_operation_ids)
       OR cardinality(p_errors) <> cardinality(p_operation_ids) OR cardinality(p_durations_ms) <> cardinality(p_operation_ids) THEN
        RAISE EXCEPTION 'webhook_inbox_ruby_finish_batch: one attempt, result, error and duration per operation id'
              USING ERRCODE = '22023';
    END IF;
    FOR r IN
        SELECT o.operation_id AS op, o.source_scope AS scope FROM webhook_inbox_outbox o
         WHERE o.operation_id = ANY (p_operation_ids) AND o.destination = 'ruby'
    LOOP
        scopes := scopes || jsonb_build_object(r.op, r.scope);
    END LOOP;
    FOR i IN 1 .. cardinality(p_operation_ids) LOOP
        PERFORM set_config('webhook_inbox.citus_ruby_scope', coalesce(scopes->>p_operation_ids[i], ''), true),
                set_config('webhook_inbox.citus_ruby_op', p_operation_ids[i], true);
        operation_id := p_operation_ids[i];
        status := webhook_inbox_ruby_finish(p_operation_ids[i], p_attempts[i], p_results[i], p_errors[i], p_durations_ms[i],
                                            p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms);
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ruby_finish_batch(text[], integer[], text[], text[], double precision[], integer, bigint, bigint) IS
    'Ruby worker v16, step 3 (Citus: each run on its shard): webhook_inbox_ruby_finish for each run of the batch in one call; each run''s new status (NULL: not that pending run).';

DO $$
BEGIN
    PERFORM webhook_inbox_citus_propagate(); -- those over the outbox's row type, now on the workers
END
$$;
