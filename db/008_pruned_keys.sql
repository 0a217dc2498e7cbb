-- 008_pruned_keys.sql - schema version 8: retention keeps the keys it prunes, and the audit
-- trail takes prunes. Pruning a done
-- event used to delete its row, and with it the (source_scope, event_id) key that makes a
-- redelivery a duplicate: a captured delivery of a scheme without a signed timestamp (GitHub,
-- Shopify, :hmac without {timestamp}) replayed after retention was a new event. Now prune
-- empties the row instead - payload, raw body, headers, history, outcome and error go; the
-- key, type, status and times stay, pruned_at is set - and deletes the emptied row only
-- once it has been kept that long again (--remember-pruned, 30 days by default). An insert
-- of a remembered key is a duplicate through the same unique index as ever: no trigger, no
-- extra lookup on the receipt path. Idempotent: safe to re-run. Applied after 001..007.
--
-- v4 sidecars keep working (webhook_inbox_schema_min_worker() stays 4): their prune deletes
-- rows as before (forgetting the keys), nothing they call changes its signature.
--
-- On a large existing inbox, CREATE INDEX below blocks inserts while it builds (receivers
-- answer 503 and providers retry). Build them first without blocking, outside a transaction:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_prunable_idx ON webhook_inbox (received_at)
--     WHERE status = 'done' AND pruned_at IS NULL;
-- and this file then skips it (the pruned index starts empty; the column is added without a
-- table rewrite).
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS pruned_at timestamptz;
COMMENT ON COLUMN webhook_inbox.pruned_at IS
    'When retention emptied this done row (payload, raw_body, request_headers, attempt_log, outcome, last_error removed; the key kept so a redelivery or replay is still a duplicate). NULL: not pruned. The row itself is deleted once pruned_at is older than the sidecar''s --remember-pruned.';

-- Prune's "done rows received before": without the pruned rows, which sort first (they are
-- the oldest) and would otherwise be walked past on every batch.
CREATE INDEX IF NOT EXISTS webhook_inbox_prunable_idx ON webhook_inbox (received_at)
    WHERE status = 'done' AND pruned_at IS NULL;
COMMENT ON INDEX webhook_inbox_prunable_idx IS
    'Done rows that still hold their payload, by received_at: what retention empties next.';
CREATE INDEX IF NOT EXISTS webhook_inbox_pruned_idx ON webhook_inbox (pruned_at) WHERE pruned_at IS NOT NULL;
COMMENT ON INDEX webhook_inbox_pruned_idx IS
    'Emptied rows by when they were emptied: what retention forgets (deletes) once --remember-pruned has passed.';

-- The audit trail takes the CLI's and rake's prunes beside requeues and replays (they come
-- with the actor: --actor, else $USER@host). Widened, never narrowed:
-- re-run after a later file allowed more actions (the chain is applied whole by every
-- migrate), this leaves that constraint, and the rows it admits, alone.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'webhook_inbox_actions'::regclass
                      AND conname = 'webhook_inbox_actions_action_check'
                      AND pg_get_constraintdef(oid) LIKE '%''prune''%') THEN
        ALTER TABLE webhook_inbox_actions DROP CONSTRAINT IF EXISTS webhook_inbox_actions_action_check;
        ALTER TABLE webhook_inbox_actions ADD CONSTRAINT webhook_inbox_actions_action_check
            CHECK (action IN ('requeue', 'replay', 'prune'));
    END IF;
END
$$;
COMMENT ON COLUMN webhook_inbox_actions.action IS
    'requeue: quarantined -> pending; replay: done -> pending (e.g. after fixing a handler); prune: done events emptied (and delivered effects deleted) by `webhook-inbox-sidecar prune` or rake webhook_inbox:prune.';
COMMENT ON COLUMN webhook_inbox_actions.filter IS
    'The filter as given: keys scope, event_id, type, from, to, error (see webhook_inbox_requeue); for prune older_than_s, scope, and effects_deleted (delivered effects deleted with the events).';
COMMENT ON COLUMN webhook_inbox_actions.count IS 'Rows moved back to pending (prune: events emptied).';
