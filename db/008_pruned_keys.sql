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

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 8 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

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

-- Requeue and replay (and their counts) never move an emptied row: it has no payload left
-- to run. Otherwise as in 005: the WHERE clause for a filter, values as $1..$7.
CREATE OR REPLACE FUNCTION webhook_inbox_filter_sql(p_filter jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    sql text := 'w.status = $1 AND w.pruned_at IS NULL';
    k   text;
BEGIN
    IF p_filter IS NULL OR jsonb_typeof(p_filter) <> 'object' THEN
        RAISE EXCEPTION 'webhook_inbox: the filter must be a JSON object' USING ERRCODE = '22023';
    END IF;
    FOR k IN SELECT jsonb_object_keys(p_filter) LOOP
        IF k NOT IN ('scope', 'event_id', 'type', 'from', 'to', 'error') THEN
            RAISE EXCEPTION 'webhook_inbox: unknown filter key %', k USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF p_filter->>'scope' IS NOT NULL THEN sql := sql || ' AND w.source_scope = $2'; END IF;
    IF p_filter->>'event_id' IS NOT NULL THEN sql := sql || ' AND w.event_id = $3'; END IF;
    IF p_filter->>'type' LIKE '%*' THEN
        sql := sql || ' AND starts_with(w.event_type, left($4, -1))';
    ELSIF p_filter->>'type' IS NOT NULL THEN
        sql := sql || ' AND w.event_type = $4';
    END IF;
    IF p_filter->>'from' IS NOT NULL THEN sql := sql || ' AND w.received_at >= $5'; END IF;
    IF p_filter->>'to' IS NOT NULL THEN sql := sql || ' AND w.received_at < $6'; END IF;
    IF p_filter->>'error' IS NOT NULL THEN
        sql := sql || ' AND strpos(lower(w.last_error), lower($7)) > 0';
    END IF;
    RETURN sql;
END
$$;
COMMENT ON FUNCTION webhook_inbox_filter_sql(jsonb) IS
    'Internal: the WHERE clause (fixed text, values as $1..$7) for a requeue/replay filter; never an emptied (pruned) row.';

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
