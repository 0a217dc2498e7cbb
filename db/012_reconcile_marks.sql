-- 012_reconcile_marks.sql - schema version 12: GitHub redeliveries are marked recovered by
-- reconcile, off the receipt path. 010's BEFORE INSERT row trigger webhook_inbox_mark_redelivered
-- ran a PL/pgSQL call and a lookup on every GitHub receipt (bench/redelivered, on a loaded
-- shared machine: 1.3x to 2x a GitHub insert's time or backend CPU); it is dropped. Instead each reconcile walk of a GitHub endpoint calls webhook_inbox_reconcile_mark
-- for its scope, before and after the walk: one UPDATE of that scope's rows received since the
-- redeliveries it asked for, through webhook_inbox_received_idx (005). No new index, so the
-- receipt path pays nothing (a partial index on x-github-delivery would still cost every
-- GitHub receipt an index insert: 0.9x to 1.7x in bench/redelivered, within its noise). A
-- redelivery is marked by the walk after it at the latest.
-- Idempotent: safe to re-run. Applied after 001..011.
--
-- Drops: trigger webhook_inbox_mark_redelivered and function webhook_inbox_mark_redelivered() (010).
-- Creates: webhook_inbox_reconcile_mark(text, integer). Redefines no other function.
-- Additive for sidecars: webhook_inbox_schema_min_worker() stays 4.

CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer
LANGUAGE sql STABLE AS $$ SELECT 12 $$;
COMMENT ON FUNCTION webhook_inbox_schema_version() IS
    'Version of the webhook_inbox schema in this database (db/NNN files applied up to NNN = this number). Sidecars older or newer check it at start and after every reconnect.';

DROP TRIGGER IF EXISTS webhook_inbox_mark_redelivered ON webhook_inbox;
DROP FUNCTION IF EXISTS webhook_inbox_mark_redelivered();

ALTER TABLE webhook_inbox_redeliveries ADD COLUMN IF NOT EXISTS settled_at timestamptz;
COMMENT ON COLUMN webhook_inbox_redeliveries.settled_at IS
    'When webhook_inbox_reconcile_mark was done with this request: it marked the stored redelivery, or an hour passed after requested_at without one arriving (GitHub redelivers within seconds). NULL: still looked for. Asking again clears it.';

COMMENT ON COLUMN webhook_inbox.recovered_at IS
    'When reconcile recovered this event from the provider''s API (Stripe, Paddle, Square: inserted from the provider''s event list; GitHub: stored from a redelivery reconcile asked for, marked by the next webhook_inbox_reconcile_mark). NULL: it arrived as an ordinary delivery.';

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
