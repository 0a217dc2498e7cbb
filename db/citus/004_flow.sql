-- citus/004_flow.sql - pause, resume and rate limits (db/015) on a Citus cluster (run after
-- citus/003 by `migrate --citus`, and again by every later `migrate`). Idempotent.
--
-- Layout: webhook_inbox_flow (a few rules) is a reference table, a copy on every node: the
-- dispatch and the claims read it next to any shard, and stats joins it with the inbox.
--
-- The flow functions (db/functions/flow.sql) are written the way Citus accepts them (no
-- STABLE function or operator over a column in an UPDATE, no multi-shard UPDATE calling a
-- function that reads a table, no correlated subquery from a reference table into a
-- distributed one) and run here as they are. So are the claims' pause checks
-- (webhook_inbox_outbox_claim, _ruby_claim, _ruby_start_batch in db/functions/).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_flow'::regclass) THEN
        PERFORM create_reference_table('webhook_inbox_flow');
    END IF;
END
$$;

-- The Citus form of webhook_inbox_flow_matches_any() before the 1.0 layout; the core has it now.
DROP FUNCTION IF EXISTS webhook_inbox_citus_flow_matches_any(text[], text);

DO $$
BEGIN
    PERFORM webhook_inbox_citus_propagate(); -- the new functions, and those over the flow's row type
END
$$;
