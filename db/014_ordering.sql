-- 014_ordering.sql - schema version 14: per-object ordering. The receiver stores an ordering
-- key with each event, derived from its signed payload by PostgreSQL in the INSERT itself
-- (webhook_inbox_ordering_key(), from the provider entry's paths or the endpoint's own; no
-- row trigger on the receipt path), and the provider's event time (ordering_at). The claim
-- never takes an event while an earlier one with the same (source_scope, ordering_key) is
-- still pending, nor - when the event's route is strict - while one is quarantined: one key
-- never runs on two workers at once, and its events run in ordering_at, then received_at,
-- then event_id order. Unkeyed events (ordering_key NULL) are claimed as before.
-- Idempotent: safe to re-run. Applied after 001..013. The new index is built with one scan of
-- the inbox under a SHARE lock (receipts wait meanwhile); on a large inbox create
-- webhook_inbox_ordering_idx CONCURRENTLY, as below, before migrating.
--
-- Redefines: webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint)
-- (005's, with the ordering filter in its claim - the sidecar's claim.c has the same filter -
-- and a static done UPDATE for a batch of one event). Additive otherwise: webhook_inbox_schema_min_worker()
-- stays 4; an older sidecar claims keyed events without looking at their keys.
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

-- Nullable columns without defaults: adding them rewrites nothing.
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS ordering_at timestamptz;
COMMENT ON COLUMN webhook_inbox.ordering_key IS
    'The object the event is about (Stripe data.object.id, Didit session_id, a GitHub repository and issue), read from the signed payload at receipt; events with one key in one scope run one at a time, in ordering_at order. NULL: unordered.';
COMMENT ON COLUMN webhook_inbox.ordering_at IS
    'The provider''s event time (a number of seconds or milliseconds in the signed payload), else the receipt time; set with ordering_key. The receiver starts next_attempt_at at it when earlier, so the claim meets a key''s events in order.';

-- A keyed row always has its time (the claim compares it); NOT VALID: no scan of old rows,
-- which have no key.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'webhook_inbox_ordering_at_check'
                                                 AND conrelid = 'webhook_inbox'::regclass) THEN
        ALTER TABLE webhook_inbox ADD CONSTRAINT webhook_inbox_ordering_at_check
            CHECK (ordering_key IS NULL OR ordering_at IS NOT NULL) NOT VALID;
    END IF;
END
$$;

ALTER TABLE webhook_inbox_routes ADD COLUMN IF NOT EXISTS strict boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN webhook_inbox_routes.strict IS
    'Per-object ordering: true holds an event while an earlier event with its ordering key is quarantined (until it is requeued, or done); false lets it run past a quarantined one (a pending one always holds it).';

-- The predecessor lookup of the claim: only keyed rows that are not done, so the index stays
-- as small as the backlog however many done rows the table keeps.
CREATE INDEX IF NOT EXISTS webhook_inbox_ordering_idx
    ON webhook_inbox (source_scope, ordering_key, ordering_at, received_at, event_id)
    WHERE ordering_key IS NOT NULL AND status <> 'done';
COMMENT ON INDEX webhook_inbox_ordering_idx IS
    'Per-object ordering: the earlier pending or quarantined events of a key, probed once per keyed claim candidate.';
