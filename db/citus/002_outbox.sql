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
-- db/functions/ is overridden again here. A change to one of them must change its form here
-- too, until the core is written for both (issue 29; spec/webhook_inbox/schema_layout_spec.rb
-- lists them, and the list only shrinks).
--   webhook_inbox_outbox_save_batch    one lookup of the scopes, then webhook_inbox_outbox_save_scoped
--                                      per answer (the core saves the lot in one statement, with
--                                      the backoff's VOLATILE jitter in its UPDATE, which Citus refuses)
-- The claims are the core's: they take one source scope at a time where the outbox is
-- distributed (webhook_inbox_outbox_claim_scopes), and run with custom plans here (below).
-- db/015's pause checks read webhook_inbox_flow, a reference table from citus/004;
-- webhook_inbox_outbox_next_due (015) is converted by citus/005.

DROP TRIGGER IF EXISTS webhook_inbox_outbox_notify_insert ON webhook_inbox_outbox;

-- Helpers of the Citus copies folded into the core (v25).
DROP FUNCTION IF EXISTS webhook_inbox_citus_outbox_save(text, text, text, text, text, integer, text, bigint, integer, bigint, bigint);
DROP FUNCTION IF EXISTS webhook_inbox_citus_ruby_paused();
DROP FUNCTION IF EXISTS webhook_inbox_citus_ruby_scopes();

-- The core's outbox claim runs with a generic plan on one node (planned once per session);
-- Citus cannot distribute a generic plan of its scoped statements: custom plans here.
ALTER FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer) SET plan_cache_mode = auto;

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

DO $$
BEGIN
    PERFORM webhook_inbox_citus_propagate(); -- those over the outbox's row type, now on the workers
END
$$;
