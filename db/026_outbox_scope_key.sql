-- 026_outbox_scope_key.sql - schema version 26: the outbox has one key everywhere, (operation
-- id, source scope), as it already had on Citus (where the distribution column, source_scope,
-- must be in every unique key). So webhook_inbox_emit(), the Ruby runs, the Rails jobs and every
-- lookup name the same key on one node and on Citus, and db/functions/ holds one body of each
-- (issue 29). source_scope is '' for an effect emitted outside a handler (before: NULL on one
-- node), so those effects still share one namespace of operation ids; an effect emitted by a
-- handler is unique per its event's scope (the ids the gem makes - Ruby runs, destination
-- routes, captured jobs - hash or name the scope or the run anyway).
-- The key's columns are in this order so the lookups by operation id alone (the sidecar's
-- save, the Ruby worker's lock and finish, the dashboard) stay primary key probes on one node
-- with no second index; ON CONFLICT (source_scope, operation_id) finds it in either order. A
-- Citus cluster keeps the key citus/002 gave it, (source_scope, operation_id): the same key.
-- Idempotent: safe to re-run. Applied after 001..022 (it depends on 006).
--
-- Takes an ACCESS EXCLUSIVE lock on webhook_inbox_outbox while the key is rebuilt (effects
-- wait for it; seconds per million effects). Upgrade the app (its Ruby workers write jobs into
-- the outbox with this key) with the schema: an older worker's ON CONFLICT (operation_id)
-- finds no key any more and its handler retries until the new code runs.

DO $$
BEGIN
    IF (SELECT array_agg(a.attname::text ORDER BY a.attname)
          FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
         WHERE c.conname = 'webhook_inbox_outbox_pkey' AND c.conrelid = 'webhook_inbox_outbox'::regclass)
       IS DISTINCT FROM ARRAY['operation_id', 'source_scope'] THEN
        UPDATE webhook_inbox_outbox SET source_scope = '' WHERE source_scope IS NULL;
        ALTER TABLE webhook_inbox_outbox ALTER COLUMN source_scope SET DEFAULT '',
                                         ALTER COLUMN source_scope SET NOT NULL,
                                         DROP CONSTRAINT webhook_inbox_outbox_pkey,
                                         ADD CONSTRAINT webhook_inbox_outbox_pkey PRIMARY KEY (operation_id, source_scope);
    END IF;
END
$$;
COMMENT ON COLUMN webhook_inbox_outbox.operation_id IS
    'The business operation''s own id (''receipt:'' || payment id), not the event id: unique per source scope (the primary key is (operation_id, source_scope)), and the Idempotency-Key / webhook-id sent on every attempt. Printable ASCII, no spaces, at most 200 characters (it travels in a header).';
COMMENT ON COLUMN webhook_inbox_outbox.source_scope IS
    'source_scope of the inbox event whose handler emitted the effect ('''' outside a handler); part of the primary key, and on Citus the distribution column.';
