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
-- Redefines no core function: those over the outbox (db/functions/outbox.sql,
-- ruby_handlers.sql) name its key, and lock rows one source scope at a time where it is
-- distributed (webhook_inbox_outbox_distributed: the claims' and the batch save's scopes), as
-- Citus wants (FOR UPDATE within one shard). They run here with custom plans (below).
-- db/015's pause checks read webhook_inbox_flow, a reference table from citus/004;
-- webhook_inbox_outbox_next_due (015) is PL/pgSQL in the core, as Citus plans it.

DROP TRIGGER IF EXISTS webhook_inbox_outbox_notify_insert ON webhook_inbox_outbox;

-- Helpers of the Citus copies folded into the core (v25).
DROP FUNCTION IF EXISTS webhook_inbox_citus_outbox_save(text, text, text, text, text, integer, text, bigint, integer, bigint, bigint);
DROP FUNCTION IF EXISTS webhook_inbox_citus_ruby_paused();
DROP FUNCTION IF EXISTS webhook_inbox_citus_ruby_scopes();

-- The core's outbox claim and batch save run with a generic plan on one node (planned once
-- per session); Citus cannot distribute a generic plan of their scoped statements: custom
-- plans here.
ALTER FUNCTION webhook_inbox_outbox_claim(text, integer, text, bigint, integer) SET plan_cache_mode = auto;
ALTER FUNCTION webhook_inbox_outbox_save_batch(text, text[], text[], text[], integer[], text[], bigint[], integer, bigint, bigint)
      SET plan_cache_mode = auto;

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

DO $$
BEGIN
    PERFORM webhook_inbox_citus_propagate(); -- those over the outbox's row type, now on the workers
END
$$;
