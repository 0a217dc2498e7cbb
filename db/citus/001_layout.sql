-- citus/001_layout.sql - the inbox on a Citus cluster (`webhook-inbox-sidecar migrate --citus`,
-- run on the coordinator after db/NNN_*.sql; re-applied by every later `migrate` once present).
-- Idempotent: safe to re-run. Converts an existing single-node inbox in place (its rows are
-- copied into the shards).
--
-- Layout:
--   webhook_inbox                  distributed by source_scope: a receipt (INSERT ... ON
--                                  CONFLICT on the primary key) and an event's dispatch each
--                                  touch one shard, so they commit on one node without 2PC
--   webhook_inbox_routes,          reference tables (a copy on every node), read by the
--   webhook_inbox_ruby_handlers,   dispatch next to any shard (and reconcile, db/012)
--   webhook_inbox_redeliveries
--   the other tables (outbox,      stay on the coordinator (plain PostgreSQL tables): small,
--   effects received, actions,     and functions over their row types (webhook_inbox_ruby_settle)
--   rejections)                    could not be created on the workers
--   the gem's functions            propagated to the workers where their types allow
--                                  (create_distributed_function), so a route's handler
--                                  name (v29) resolves on every node
-- Wake-ups: the NOTIFY trigger on webhook_inbox is dropped. It fires on the worker that holds
-- the shard, where no sidecar listens, and a NOTIFY inside a transaction that Citus commits
-- with two-phase commit (one touching two nodes) fails it ("cannot PREPARE a transaction that
-- has executed LISTEN, UNLISTEN, or NOTIFY"). Sidecars find new events by polling
-- (--poll-interval); requeue's NOTIFY runs on the coordinator and still wakes them.
-- Claiming: webhook_inbox_citus_dispatch_shard() below, a batch pushed down to the node of one
-- shard; webhook_inbox_citus_claim() and webhook_inbox_citus_dispatch_batch() (one scope
-- through the coordinator) for the one-event-per-statement path; a sidecar uses them when it
-- finds them (sidecar/src/citus/citus.c).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'webhook_inbox: the citus extension is not installed in this database'
              USING ERRCODE = '0A000',
                    HINT = 'On the coordinator: CREATE EXTENSION citus; SELECT citus_add_node(host, port) per worker; then migrate --citus.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary' AND isactive) THEN
        RAISE EXCEPTION 'webhook_inbox: this Citus coordinator has no active worker node'
              USING ERRCODE = '0A000', HINT = 'SELECT citus_add_node(host, port) for each worker, then migrate --citus.';
    END IF;
END
$$;

DROP TRIGGER IF EXISTS webhook_inbox_notify_insert ON webhook_inbox;

-- Row triggers that only change the row itself (webhook_inbox_on_requeue, 005) run on the
-- shard, in the statement's transaction.
SET LOCAL citus.enable_unsafe_triggers = on;

-- Propagates every gem function whose argument and result types all exist on the workers
-- (no row type of a table left on the coordinator), and the handlers the routes name (their
-- batch handlers too: the shard's batch on a worker calls them, webhook_inbox_citus_dispatch_shard).
CREATE OR REPLACE FUNCTION webhook_inbox_citus_propagate() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    f regprocedure;
    n integer := 0;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
         WHERE (p.proname LIKE 'webhook\_inbox\_%'
                OR p.oid IN (SELECT to_regproc(r.handler_name)::oid FROM webhook_inbox_routes r -- by name: v29
                             UNION ALL SELECT to_regproc(r.batch_handler_name)::oid FROM webhook_inbox_routes r)) -- batch: v19
           AND p.prokind = 'f'
           AND p.oid NOT IN (SELECT o.objid FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass)
           AND NOT EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[] || p.prorettype) t
                             JOIN pg_class c ON c.reltype = t
                            WHERE c.oid NOT IN (SELECT d.logicalrelid FROM pg_dist_partition d))
         ORDER BY p.oid
    LOOP
        PERFORM create_distributed_function(f);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_propagate() IS
    'Citus: create_distributed_function() for each gem function (and routed handler) not yet on the workers whose types exist there; returns how many.';

-- The routes written again with each handler by name, so that every node's copy of the
-- reference table holds that node's OID of the function. A regproc is an OID: when Citus
-- creates a function on a worker again (the node re-activated, its metadata synced again by
-- start_metadata_sync_to_node) or copies the routes to a node added, the copy there keeps
-- OIDs that name nothing there. Since v29 the dispatch resolves handlers by name
-- (handler_name, db/029) and never reads those OIDs; this keeps the regproc columns true on
-- every node for whoever reads them there. Run by every `migrate --citus`. Returns the routes
-- rewritten.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_resolve_routes() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN SELECT event_type, handler_name AS handler, batch_handler_name AS batch_handler -- names: v29
               FROM webhook_inbox_routes ORDER BY event_type
    LOOP
        EXECUTE format('UPDATE webhook_inbox_routes SET handler = %L::regproc, batch_handler = %L::regproc WHERE event_type = %L',
                       r.handler, r.batch_handler, r.event_type);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_resolve_routes() IS
    'Citus: rewrites each route''s handler and batch handler from their names, so every node''s copy names its own OID of the function (stale after a node is re-activated or added; the dispatch reads the names since v29); returns how many routes.';

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox'::regclass) THEN
        PERFORM create_distributed_table('webhook_inbox', 'source_scope');
    END IF;
    -- The handlers of existing routes first: copying the routes to the workers resolves
    -- each regproc there.
    PERFORM webhook_inbox_citus_propagate();
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_routes'::regclass) THEN
        PERFORM create_reference_table('webhook_inbox_routes');
    END IF;
    IF to_regclass('webhook_inbox_ruby_handlers') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_ruby_handlers'::regclass) THEN
        PERFORM create_reference_table('webhook_inbox_ruby_handlers');
    END IF;
    -- Read by reconcile (the GitHub page statement, webhook_inbox_reconcile_mark, 012: its
    -- UPDATE of the inbox is one router query to the scope's shard, the GUIDs as an array).
    IF to_regclass('webhook_inbox_redeliveries') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_redeliveries'::regclass) THEN
        PERFORM create_reference_table('webhook_inbox_redeliveries');
    END IF;
    PERFORM webhook_inbox_citus_propagate(); -- those over the routes' row type
    PERFORM webhook_inbox_citus_resolve_routes();
END
$$;

-- Time stamps on Citus. Citus refuses any VOLATILE function in an UPDATE of a distributed
-- table ("functions used in UPDATE queries on distributed tables must not be VOLATILE"),
-- and the gem's functions stamp rows with clock_timestamp(). Rather than a Citus copy of
-- each function, they run with this schema first on their search_path, where
-- clock_timestamp() is declared STABLE: Citus then evaluates it once per statement on the
-- coordinator and sends the value (the same for every row of one statement, as with
-- now(); the statements stamp one row). webhook_inbox_log_entry() is labelled IMMUTABLE
-- so that a call with a column argument is pushed down to the shard, where it stamps the
-- entry with the real clock (its arguments are never all constants in the gem's
-- functions, so nothing folds it at planning). Re-applied after every migrate: CREATE OR
-- REPLACE in db/functions/ resets both. The search_path is set on the gem's functions by
-- citus/005_functions.sql, once every function of db/citus/ before it exists.
CREATE SCHEMA IF NOT EXISTS webhook_inbox_citus;
COMMENT ON SCHEMA webhook_inbox_citus IS 'Citus layout: clock_timestamp() as STABLE for the gem''s functions (db/citus/001_layout.sql).';
CREATE OR REPLACE FUNCTION webhook_inbox_citus.clock_timestamp() RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT pg_catalog.clock_timestamp() $$;
COMMENT ON FUNCTION webhook_inbox_citus.clock_timestamp() IS
    'pg_catalog.clock_timestamp() declared STABLE, first on the gem functions'' search_path on Citus (see db/citus/001_layout.sql).';
ALTER FUNCTION webhook_inbox_log_entry(text, text, double precision) IMMUTABLE;

-- The claim, on one shard: picks a source_scope among those of the oldest due pending rows
-- that the ordering lets run (webhook_inbox_citus_claim_scopes above; random, so concurrent sidecars start on different scopes; the next one when another
-- worker holds every due row of it), then locks up to p_limit of that scope's due rows,
-- oldest due first, FOR UPDATE SKIP LOCKED in the caller's transaction. Citus refuses
-- FOR UPDATE across shards; scoped, it is one router query. Order is per scope: there is
-- no global oldest-first across scopes any more (it never mattered across tenants).
-- Per-object ordering (db/014, as webhook_inbox_dispatch_batch and sidecar/src/claim/claim.c): a
-- keyed event is not claimed while an earlier event of its (source_scope, ordering_key) is
-- pending, nor while one is quarantined and the event's route is strict. A key lives in one
-- scope, so the predecessor probes run on the scope's shard. The strict flag is read on the
-- coordinator (inside the shard's query it would read the reference table from the worker):
-- first the types of the scope's due keyed events behind a quarantined one (one router read),
-- then which of those take a strict route; the claim holds back those types' events behind a
-- quarantined one. Then each claimed keyed event's key (db/021): the transaction-level
-- advisory lock webhook_inbox_citus_lock_key takes on the scope's node, where the shard's
-- pushed-down batch (webhook_inbox_citus_dispatch_shard) and the Ruby worker take it too; an
-- event whose key another transaction holds is left out (pending, locked until this ends),
-- and a scope whose every claimed key is held gives way to the next scope.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_lock_key(p_scope text, p_event_id text, p_wait boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    got boolean;
BEGIN
    -- One router query by the event's primary key: the lock is taken on the node that holds it.
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key))
           FROM webhook_inbox w
          WHERE w.source_scope = p_scope AND w.event_id = p_event_id AND w.ordering_key IS NOT NULL;
        RETURN true;
    END IF;
    SELECT pg_try_advisory_xact_lock(webhook_inbox_ordering_lock_id(w.source_scope, w.ordering_key)) INTO got
      FROM webhook_inbox w
     WHERE w.source_scope = p_scope AND w.event_id = p_event_id AND w.ordering_key IS NOT NULL;
    RETURN coalesce(got, true);
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_lock_key(text, text, boolean) IS
    'Citus: the ordering key lock of an event (db/021), on the node of its shard: waited for (p_wait), or tried (false: another transaction holds it); true for an unkeyed or missing event.';

-- The scopes the claim below tries, in random order (concurrent sidecars start on different
-- scopes): those of the 256 oldest due pending rows that db/014's ordering lets run, so later
-- events of one held key (its first event in backoff, or quarantined under a strict route)
-- never fill the window and hide another scope's due work. Two bounded windows over the
-- claim index, each row probed on the ordering index (the probe's correlation names the
-- distribution column, so Citus pushes both down to every shard): rows with no earlier
-- non-done event of their key (no route read), and up to 64 rows whose earlier events are
-- quarantined but none pending, kept when their route is not strict (read here, on the
-- coordinator, over the 64 rows' types). Row locks and key locks (db/021) are not seen: the
-- claim skips a scope whose rows are all taken and tries the next.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_claim_scopes()
RETURNS TABLE (scope text)
LANGUAGE sql AS $$
    SELECT d.scope FROM (
        SELECT a.scope FROM (
            SELECT w.source_scope AS scope FROM webhook_inbox w
             WHERE w.status = 'pending' AND w.next_attempt_at <= now()
               AND (w.ordering_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM webhook_inbox p
                     WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                       AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)))
             ORDER BY w.next_attempt_at LIMIT 256) a
        UNION
        SELECT b.scope FROM (
            SELECT w.source_scope AS scope, w.event_type FROM webhook_inbox w
             WHERE w.status = 'pending' AND w.next_attempt_at <= now() AND w.ordering_key IS NOT NULL
               AND EXISTS (
                    SELECT 1 FROM webhook_inbox p
                     WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status NOT IN ('done', 'pending')
                       AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id))
               AND NOT EXISTS (
                    SELECT 1 FROM webhook_inbox p
                     WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status = 'pending'
                       AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id))
             ORDER BY w.next_attempt_at LIMIT 64) b
         WHERE NOT webhook_inbox_route_strict(b.event_type)) d
     ORDER BY random()
$$;
COMMENT ON FUNCTION webhook_inbox_citus_claim_scopes() IS
    'Citus: the scopes webhook_inbox_citus_claim() tries, in random order - those of the oldest due pending rows db/014''s ordering lets run (bounded windows), so a held key never hides another scope.';

CREATE OR REPLACE FUNCTION webhook_inbox_citus_claim(p_limit integer)
RETURNS TABLE (source_scope text, event_id text, event_type text, attempts integer)
LANGUAGE plpgsql AS $$
DECLARE
    s      text;
    types  text[];
    strict_types text[];
    r      record;
    taken  boolean;            -- this scope gave the claim a row (not every one of its keys held)
BEGIN
    FOR s IN SELECT c.scope FROM webhook_inbox_citus_claim_scopes() c LOOP
        types := ARRAY(
            SELECT DISTINCT w.event_type FROM webhook_inbox w
             WHERE w.source_scope = s AND w.ordering_key IS NOT NULL AND w.status = 'pending' AND w.next_attempt_at <= now()
               AND EXISTS (SELECT 1 FROM webhook_inbox p
                            WHERE p.source_scope = s AND p.ordering_key = w.ordering_key AND p.status NOT IN ('done', 'pending')
                              AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)));
        strict_types := ARRAY(SELECT t FROM unnest(types) t WHERE webhook_inbox_route_strict(t));
        taken := false;
        FOR r IN
            SELECT w.source_scope, w.event_id, w.event_type, w.attempts, w.ordering_key FROM webhook_inbox w
             WHERE w.source_scope = s AND w.status = 'pending' AND w.next_attempt_at <= now()
               AND (w.ordering_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM webhook_inbox p
                     WHERE p.source_scope = s AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                       AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
                       AND (p.status = 'pending' OR w.event_type = ANY (strict_types))))
             ORDER BY w.next_attempt_at, w.received_at
             LIMIT p_limit
               FOR UPDATE OF w SKIP LOCKED
        LOOP
            CONTINUE WHEN r.ordering_key IS NOT NULL AND NOT webhook_inbox_citus_lock_key(r.source_scope, r.event_id, false);
            source_scope := r.source_scope;
            event_id := r.event_id;
            event_type := r.event_type;
            attempts := r.attempts;
            taken := true;
            RETURN NEXT;
        END LOOP;
        IF taken THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_claim(integer) IS
    'Citus: lock up to p_limit due pending events of ONE source_scope (FOR UPDATE SKIP LOCKED, one shard) in the caller''s transaction; a keyed event only when no earlier event of its key must run first (db/014) and no other transaction holds its key (db/021, webhook_inbox_citus_lock_key).';

-- The sidecar's batch on Citus, with webhook_inbox_dispatch_batch()'s arguments and rows:
-- the claim above, then webhook_inbox_dispatch() (the one-event dispatch, unchanged) on
-- each claimed event, in the caller's transaction. Every statement names the scope, so the
-- transaction - claim, handlers, done - stays on one shard and commits on one node.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_dispatch_batch(
        p_limit integer, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    scopes text[];
    ids    text[];
    types  text[];
BEGIN
    SELECT array_agg(c.source_scope ORDER BY c.n), array_agg(c.event_id ORDER BY c.n), array_agg(c.event_type ORDER BY c.n)
      INTO scopes, ids, types
      FROM webhook_inbox_citus_claim(p_limit) WITH ORDINALITY AS c(source_scope, event_id, event_type, attempts, n);
    FOR i IN 1 .. coalesce(cardinality(ids), 0) LOOP
        source_scope := scopes[i];
        event_id := ids[i];
        event_type := types[i];
        SELECT d.result, d.detail, d.attempts, d.latency_ms, d.charged, d.retry_in_ms
          INTO result, detail, attempts, latency_ms, charged, retry_in_ms
          FROM webhook_inbox_dispatch(scopes[i], ids[i], p_unrouted, p_max_attempts, p_backoff_base_ms,
                                      p_backoff_cap_ms, p_unrouted_delay_ms) d;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_dispatch_batch(integer, text, integer, bigint, bigint, bigint) IS
    'Citus: webhook_inbox_dispatch_batch() kept on one shard - claim up to p_limit due events of one scope, webhook_inbox_dispatch() each; same arguments and rows.';

-- The sidecar's batch delegated to a worker (sidecar/src/citus/citus.c): one key per shard of
-- webhook_inbox, a distribution value that hashes into it ('shard:N'), ordered by hash range.
-- The sidecar cycles through them and names one in each call of
-- webhook_inbox_citus_dispatch_shard() below, which Citus then runs on that shard's node.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_shard_keys() RETURNS SETOF text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    shards bigint[] := ARRAY(SELECT s.shardid FROM pg_dist_shard s WHERE s.logicalrelid = 'webhook_inbox'::regclass
                              ORDER BY s.shardminvalue::bigint);
    keys   text[] := array_fill(NULL::text, ARRAY[cardinality(shards)]);
    todo   integer := cardinality(shards);
    i      integer := 0;
    k      integer;
BEGIN
    WHILE todo > 0 AND i < 1000000 LOOP
        k := array_position(shards, get_shard_id_for_distribution_column('webhook_inbox', 'shard:' || i));
        IF k IS NOT NULL AND keys[k] IS NULL THEN
            keys[k] := 'shard:' || i;
            todo := todo - 1;
        END IF;
        i := i + 1;
    END LOOP;
    RETURN QUERY SELECT u.key FROM unnest(keys) WITH ORDINALITY u(key, n) WHERE u.key IS NOT NULL ORDER BY u.n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_shard_keys() IS
    'Citus: one distribution value per shard of webhook_inbox (''shard:N''), in hash order: the keys the sidecar passes to webhook_inbox_citus_dispatch_shard().';

-- The sidecar's batch on one shard, on the node that holds it: a distributed function
-- co-located with webhook_inbox by p_key, so a call outside a transaction block with a
-- constant key is pushed down whole to that shard's worker (one round trip from the
-- coordinator). There, under p_lock_timeout (the sidecar's --lock-timeout, which its session
-- on the coordinator does not carry to the worker), it claims up to p_limit due pending events
-- of the shard, every scope the shard holds (the shard table itself, FOR UPDATE SKIP LOCKED;
-- db/014's ordering as in webhook_inbox_citus_claim, the strict types read from the local copy
-- of the routes; db/021's key lock tried on each claimed keyed row), and hands them to the
-- core's webhook_inbox_dispatch_claimed with the shard as the table to mark: the batch as on
-- one node (batch handlers once per run of a type, one done UPDATE per batch), its statements
-- on the local shard planned by PostgreSQL, not by Citus at every call (issue 30). Its
-- transaction commits on that node alone. Same rows as webhook_inbox_dispatch_batch(). Where
-- the shard is not local (the call was not pushed down: inside a transaction block, or a node
-- without metadata; the shard moved away) it is webhook_inbox_citus_dispatch_batch(), one
-- scope through Citus.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_dispatch_shard(
        p_key text, p_lock_timeout text, p_limit integer, p_unrouted text, p_max_attempts integer,
        p_backoff_base_ms bigint, p_backoff_cap_ms bigint, p_unrouted_delay_ms bigint)
RETURNS TABLE (source_scope text, event_id text, event_type text, result text, detail text,
               attempts integer, latency_ms double precision, charged boolean, retry_in_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    shard_id bigint := get_shard_id_for_distribution_column('webhook_inbox', p_key);
    shard regclass;
    types text[];
    strict_types text[];
    evs webhook_inbox[];
    tids tid[];
    claim text; -- this session's prepared claim of the shard
    plan_mode text;
    routes regclass := to_regclass(shard_name('webhook_inbox_routes', get_shard_id_for_distribution_column('webhook_inbox_routes')));
    ruby regclass := to_regclass(shard_name('webhook_inbox_ruby_handlers',
                                            get_shard_id_for_distribution_column('webhook_inbox_ruby_handlers')));
    strict_any boolean;
    markers regclass; -- with a batch: this node's copies of the effects received and the flow rules
    flow regclass;
BEGIN
    -- The shard's table here only while this node holds the shard, for the whole transaction: a
    -- shard move blocks the shard's writes at its end with an exclusive lock on its metadata on
    -- every node, then points the placement elsewhere, and leaves the old table behind until its
    -- cleanup. A batch called straight on the old node (the sidecar's --citus-direct, its map
    -- not yet reloaded) took that stale table for the shard and ran its events a second time
    -- (spec/citus/citus_direct_batches_spec.rb). So: the metadata lock shared (the move waits
    -- for this batch, or this batch for the move), then the placement read under it. Citus lets
    -- only the table's owner take that lock (lock_shard_metadata): another role's batch reads the
    -- placement unlocked (a stale map is still refused; a batch running across the move's end is
    -- not covered: docs/capacity.md says to run direct sidecars as the owner).
    IF pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = 'webhook_inbox'::regclass), 'USAGE') THEN
        PERFORM lock_shard_metadata(5, ARRAY[shard_id]); -- ShareLock
    END IF;
    IF EXISTS (SELECT 1 FROM pg_dist_placement pl
                WHERE pl.shardid = shard_id AND pl.groupid = (SELECT g.groupid FROM pg_dist_local_group g)) THEN
        shard := to_regclass(shard_name('webhook_inbox', shard_id));
    END IF;
    IF shard IS NULL THEN
        RETURN QUERY SELECT * FROM webhook_inbox_citus_dispatch_batch(p_limit, p_unrouted, p_max_attempts, p_backoff_base_ms,
                                                                       p_backoff_cap_ms, p_unrouted_delay_ms);
        RETURN;
    END IF;
    -- The gem's functions are distributed functions, and outside Citus' own backends (a direct
    -- sidecar's session here) Citus plans a statement that is one call of such a function with
    -- parameters anew at every execution - it keeps PostgreSQL from a generic plan, in case the
    -- call could be pushed down to another node: 10-40 us each, several a batch (issue 30).
    -- This batch runs on the shard's node already: such calls in it go through a subquery
    -- (OFFSET 0 keeps it one; its column read, so the call is made), which Citus leaves alone.
    PERFORM c.ok FROM (SELECT webhook_inbox_dispatch_check(p_unrouted, p_max_attempts, p_backoff_base_ms, p_backoff_cap_ms,
                                                           p_unrouted_delay_ms) AS ok OFFSET 0) c;
    PERFORM set_config('lock_timeout', p_lock_timeout, true), -- the sidecar's, set on its coordinator session
            set_config('citus.enable_manual_changes_to_shards', 'on', true); -- the done marks, in the shard
    -- Whether any route is strict (else no type is: the read below is skipped), from this node's
    -- copy of the routes, the reference table's local shard read as a plain table and prepared
    -- once per session: through Citus the read cost an empty shard's call a third of its time.
    IF routes IS NULL THEN
        strict_any := EXISTS (SELECT 1 FROM webhook_inbox_routes r WHERE r.strict);
    ELSE
        IF NOT webhook_inbox_prepared('webhook_inbox_citus_strict_' || routes::oid) THEN
            PERFORM webhook_inbox_prepare_once('webhook_inbox_citus_strict_' || routes::oid, NULL,
                                               format('SELECT EXISTS (SELECT 1 FROM %s r WHERE r.strict)', routes));
        END IF;
        EXECUTE format('EXECUTE %I', 'webhook_inbox_citus_strict_' || routes::oid) INTO strict_any;
    END IF;
    IF strict_any THEN
        EXECUTE format($q$
            SELECT ARRAY(SELECT DISTINCT w.event_type FROM %1$s w
                          WHERE w.ordering_key IS NOT NULL AND w.status = 'pending' AND w.next_attempt_at <= now()
                            AND EXISTS (SELECT 1 FROM %1$s p
                                         WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key
                                           AND p.status NOT IN ('done', 'pending')
                                           AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)))
            $q$, shard) INTO types;
    END IF;
    strict_types := ARRAY(SELECT t FROM unnest(types) t WHERE webhook_inbox_route_strict(t));
    claim := 'webhook_inbox_citus_claim_' || shard::oid || '_' || p_limit;
    -- db/021: each claimed keyed row's key tried on this node, after the claim locked it (as
    -- webhook_inbox_claim_due does); a row whose key another transaction holds is left out.
    -- The rows as webhook_inbox values (the shard's columns are the table's, in its order).
    -- Prepared once per worker session (Citus keeps its connections) and run with its generic
    -- plan: planned at every call it cost more than a batch's done marks. The name holds the
    -- shard table's OID (a shard moved away and back is prepared again) and the limit, a
    -- constant in it (as a parameter the generic plan is costed for a tenth of the pending rows,
    -- and a backlog turns JIT on: 16 ms a claim at 500,000 pending).
    IF NOT webhook_inbox_prepared(claim) THEN
        PERFORM webhook_inbox_prepare_once(claim, 'text[]', format($q$
        SELECT array_agg(c.ev ORDER BY c.next_attempt_at, c.received_at),
               array_agg(c.tid ORDER BY c.next_attempt_at, c.received_at) FROM (
            SELECT ROW(w.*)::webhook_inbox AS ev, w.ctid AS tid, w.source_scope, w.ordering_key, w.next_attempt_at, w.received_at
              FROM %1$s w
             WHERE w.status = 'pending' AND w.next_attempt_at <= now()
               AND (w.ordering_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM %1$s p
                     WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key AND p.status <> 'done'
                       AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)
                       AND (p.status = 'pending' OR w.event_type = ANY ($1))))
             ORDER BY w.next_attempt_at, w.received_at
             LIMIT %2$s
               FOR UPDATE OF w SKIP LOCKED) c
         WHERE c.ordering_key IS NULL OR pg_try_advisory_xact_lock(webhook_inbox_ordering_lock_id(c.source_scope, c.ordering_key))
        $q$, shard, p_limit));
    END IF;
    plan_mode := current_setting('plan_cache_mode');
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
    EXECUTE format('EXECUTE %I(%L::text[])', claim, strict_types) INTO evs, tids; -- EXECUTE takes no $n
    PERFORM set_config('plan_cache_mode', plan_mode, true);
    -- v29: each type's route resolved here by name (a type whose handler is missing on this
    -- node waits, uncharged; the others run). The routes and Ruby handlers read from this
    -- node's copies (the reference tables' local shards, prepared once per session: through
    -- Citus each read was planned at every call, a quarter of a batch of 20 on its worker);
    -- the once-markers and the pause and rate rules too (their statement through Citus was
    -- the batch's costliest after the claim). Found only for a batch (an empty shard's call
    -- skips them); either not found on this node: both read through Citus (NULL).
    IF evs IS NOT NULL THEN
        markers := to_regclass(shard_name('webhook_inbox_effects_received',
                                          get_shard_id_for_distribution_column('webhook_inbox_effects_received')));
        flow := to_regclass(shard_name('webhook_inbox_flow', get_shard_id_for_distribution_column('webhook_inbox_flow')));
        RETURN QUERY SELECT * FROM (SELECT * FROM webhook_inbox_dispatch_claimed(evs, tids, shard, p_unrouted, p_max_attempts,
                                                                                 p_backoff_base_ms, p_backoff_cap_ms,
                                                                                 p_unrouted_delay_ms, routes, ruby, markers, flow)
                                     OFFSET 0) c; -- a subquery: above, at webhook_inbox_dispatch_check
    END IF;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_dispatch_shard(text, text, integer, text, integer, bigint, bigint, bigint) IS
    'Citus: webhook_inbox_dispatch_batch() on the shard p_key hashes to, pushed down to its node (lock_timeout p_lock_timeout) - claim up to p_limit due events of that shard, then webhook_inbox_dispatch_claimed() with the shard as the table to mark; same rows.';
SELECT create_distributed_function('webhook_inbox_citus_dispatch_shard(text, text, integer, text, integer, bigint, bigint, bigint)',
                                   'p_key', colocate_with := 'webhook_inbox');
