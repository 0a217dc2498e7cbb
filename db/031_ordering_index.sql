-- 031_ordering_index.sql - schema version 31: a narrower per-object ordering index. Every
-- keyed receipt adds an entry to webhook_inbox_ordering_idx; v14's held the whole ordering
-- (source_scope, ordering_key, ordering_at, received_at, event_id): about 90 bytes a key,
-- with a long scope common to every entry compared first. Now (ordering_key, ordering_at):
-- the claim's predecessor probe still reads only the key's earlier entries through the index
-- and checks the scope and the rest of the order on the row (bench/pipeline: the receipt's
-- PostgreSQL CPU and WAL per row, docs/capacity.md). The same queries use it; none changes.
-- Idempotent: safe to re-run. Rebuilds the index under a SHARE lock (receipts wait
-- meanwhile); on a large inbox build it CONCURRENTLY first and migrate after:
--   CREATE INDEX CONCURRENTLY webhook_inbox_ordering_idx_v31 ON webhook_inbox (ordering_key, ordering_at)
--       WHERE ordering_key IS NOT NULL AND status <> 'done';
--   DROP INDEX CONCURRENTLY webhook_inbox_ordering_idx;
--   ALTER INDEX webhook_inbox_ordering_idx_v31 RENAME TO webhook_inbox_ordering_idx;
-- Redefines no function; webhook_inbox_schema_min_worker() stays 4 (older sidecars' claims
-- use the new index as they used the old one).

DO $$
BEGIN
    -- v14's five-column form: replaced (an index already in the new form is kept).
    IF EXISTS (SELECT 1 FROM pg_index i
                WHERE i.indexrelid = to_regclass('webhook_inbox_ordering_idx')
                  AND i.indnatts <> 2) THEN
        DROP INDEX webhook_inbox_ordering_idx;
    END IF;
END
$$;

-- The predecessor lookup of the claim: only keyed rows that are not done, so the index stays
-- as small as the backlog however many done rows the table keeps.
CREATE INDEX IF NOT EXISTS webhook_inbox_ordering_idx
    ON webhook_inbox (ordering_key, ordering_at)
    WHERE ordering_key IS NOT NULL AND status <> 'done';
COMMENT ON INDEX webhook_inbox_ordering_idx IS
    'Per-object ordering: the earlier pending or quarantined events of a key (scope and full order checked on the row), probed once per keyed claim candidate.';
