-- functions/reconcile.sql - recovery from provider APIs: marks of redelivered events.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Marks the rows of scope p_scope that are the redeliveries reconcile asked for: a row whose
-- x-github-delivery is an unsettled request's GUID, received at or after that request (an
-- earlier row is the original delivery, stored though GitHub counted it failed) and within
-- the hour after. Looks at p_limit requests at most, oldest first. One statement per table:
-- on Citus the inbox UPDATE is a router query to the scope's shard.
CREATE OR REPLACE FUNCTION webhook_inbox_reconcile_mark(p_scope text, p_limit integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    guids text[];
    asked timestamptz[];
    ends timestamptz[];  -- asked + 1 hour, computed here: Citus refuses a STABLE operator
    marked text[];       -- (timestamptz + interval) over a column in an UPDATE
BEGIN
    SELECT array_agg(r.delivery_guid ORDER BY r.requested_at), array_agg(r.requested_at ORDER BY r.requested_at),
           array_agg(r.requested_at + interval '1 hour' ORDER BY r.requested_at)
      INTO guids, asked, ends
      FROM (SELECT delivery_guid, requested_at FROM webhook_inbox_redeliveries
             WHERE source_scope = p_scope AND settled_at IS NULL
             ORDER BY requested_at LIMIT greatest(p_limit, 1)) r;
    IF guids IS NULL THEN
        RETURN 0;
    END IF;
    WITH m AS (
        UPDATE webhook_inbox i SET recovered_at = now()
         WHERE i.source_scope = p_scope
           AND i.received_at >= asked[1] AND i.received_at <= ends[cardinality(ends)]
           AND i.recovered_at IS NULL
           AND i.request_headers ? 'x-github-delivery'
           AND (i.request_headers->>'x-github-delivery') = ANY (guids)
           AND i.received_at BETWEEN asked[array_position(guids, i.request_headers->>'x-github-delivery')]
                                 AND ends[array_position(guids, i.request_headers->>'x-github-delivery')]
        RETURNING i.request_headers->>'x-github-delivery' AS guid)
    SELECT coalesce(array_agg(guid), '{}') INTO marked FROM m;
    UPDATE webhook_inbox_redeliveries SET settled_at = now()
     WHERE source_scope = p_scope AND settled_at IS NULL AND delivery_guid = ANY (guids)
       AND (delivery_guid = ANY (marked) OR requested_at < now() - interval '1 hour');
    RETURN cardinality(marked);
END
$$;
COMMENT ON FUNCTION webhook_inbox_reconcile_mark(text, integer) IS
    'Sets recovered_at on scope p_scope''s rows that are redeliveries reconcile asked for (webhook_inbox_redeliveries, x-github-delivery GUID, received within the hour after the request) and settles those requests; returns how many rows it marked. Called by the sidecar around each GitHub walk: the receipt path never runs it.';
