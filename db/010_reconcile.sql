-- 010_reconcile.sql - schema version 10: recovery from the providers' APIs. `webhook-inbox-
-- sidecar reconcile` (and `run --reconcile NAME=INTERVAL`) lists what a provider sent for an
-- endpoint and inserts what the inbox lacks, under the endpoint's scope and with the key a
-- delivery would have had (a late delivery is then a duplicate); such rows carry
-- recovered_at. A walk over the provider's pages is resumable: its position is committed
-- with each page's rows (webhook_inbox_reconcile_cursors). GitHub events are recovered by
-- asking GitHub to redeliver (the receiver then stores them, signed, with the key it always
-- computes); the redeliveries asked for are kept so the row is marked when it arrives.
-- Idempotent: safe to re-run. Applied after 001..009.
--
-- Additive: webhook_inbox_schema_min_worker() stays 4 (nothing older sidecars call changes).
-- The trigger below runs only for rows whose request headers hold x-github-delivery (its
-- WHEN clause), one index lookup each.
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS recovered_at timestamptz;
COMMENT ON COLUMN webhook_inbox.recovered_at IS
    'When reconcile recovered this event from the provider''s API (Stripe: inserted from GET /v1/events; GitHub: stored from a redelivery reconcile asked for). NULL: it arrived as an ordinary delivery.';

CREATE TABLE IF NOT EXISTS webhook_inbox_reconcile_cursors (
    endpoint      text        PRIMARY KEY
                  CONSTRAINT webhook_inbox_reconcile_cursors_endpoint_check CHECK (endpoint ~ '^[a-z][a-z0-9_]{0,62}$'),
    source_scope  text        NOT NULL,
    walk_since    timestamptz,
    walk_until    timestamptz,
    walk_after    text,
    done_until    timestamptz,
    recovered     bigint      NOT NULL DEFAULT 0,
    last_error    text,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_inbox_reconcile_cursors IS
    'One row per reconciled endpoint: where its walk over the provider''s list stands. Written by the sidecar in the transaction of each page''s rows, so a walk stopped anywhere (429, 5xx, a crash) resumes at the next page.';
COMMENT ON COLUMN webhook_inbox_reconcile_cursors.walk_since IS 'The walk in progress covers events created from this time... (NULL: no walk in progress).';
COMMENT ON COLUMN webhook_inbox_reconcile_cursors.walk_until IS '...up to this time (events younger are left to their delivery).';
COMMENT ON COLUMN webhook_inbox_reconcile_cursors.walk_after IS 'The provider''s pagination cursor of the next page (Stripe: starting_after event id; GitHub: the Link header''s cursor); NULL: the first page.';
COMMENT ON COLUMN webhook_inbox_reconcile_cursors.done_until IS 'walk_until of the last walk that reached its end: the next scheduled walk starts there.';
COMMENT ON COLUMN webhook_inbox_reconcile_cursors.recovered IS 'Events recovered for this endpoint, all walks (GitHub: redeliveries asked for).';
COMMENT ON COLUMN webhook_inbox_reconcile_cursors.last_error IS 'Why the last walk stopped early (never credentials or payloads); NULL after a walk that ended.';

CREATE TABLE IF NOT EXISTS webhook_inbox_redeliveries (
    source_scope  text        NOT NULL,
    delivery_guid text        NOT NULL,
    requested_id  bigint      NOT NULL,
    delivery_id   bigint,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_scope, delivery_guid)
);
COMMENT ON TABLE webhook_inbox_redeliveries IS
    'Redeliveries reconcile asked a provider for (GitHub: POST .../deliveries/{id}/attempts), by the delivery''s GUID: the stored row is marked recovered_at when it arrives, and a failed delivery is asked for again only when it is newer than the last request.';
COMMENT ON COLUMN webhook_inbox_redeliveries.requested_id IS 'The provider''s id of the failed attempt last asked for (GitHub numbers each attempt); written before the call, so a redelivery that arrives while it is made is marked.';
COMMENT ON COLUMN webhook_inbox_redeliveries.delivery_id IS 'The newest attempt whose redelivery the provider accepted (202); NULL: none yet. A failed attempt up to this id is not asked for again; a newer one (the redelivery failed too) is.';
