-- 006_outbox.sql - schema version 6: the outbox of external side effects. A handler records
-- an effect (send a receipt, capture a payment) with webhook_inbox_emit() in its own
-- transaction, keyed by a business operation id; the sidecar delivers it over HTTP with that
-- id as the Idempotency-Key, under a lease (no row lock during the call), and saves the
-- answer only while it still owns the lease. Also the dedupe table of effects received by
-- the Rails app (WebhookInbox::Controller#receive_effect).
-- Idempotent: safe to re-run. Applied after 001..004 (and any 005/006) by
-- `webhook-inbox-sidecar migrate` and the Rails generator.
--
-- Additive: webhook_inbox_schema_min_worker() stays 004's 4 (not redefined here), so v4
-- sidecars keep processing events against it (they deliver no effects).
-- webhook_inbox_run_handler() gets a new body with the same signature and behaviour, plus
-- the source event (below) for webhook_inbox_emit().
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

CREATE TABLE IF NOT EXISTS webhook_inbox_outbox (
    operation_id     text        PRIMARY KEY
                     CONSTRAINT webhook_inbox_outbox_operation_id_check CHECK (operation_id ~ '^[!-~]{1,200}$'),
    destination      text        NOT NULL
                     CONSTRAINT webhook_inbox_outbox_destination_check CHECK (destination ~ '^[a-z][a-z0-9_]{0,62}$'),
    payload          jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                     CONSTRAINT webhook_inbox_outbox_status_check
                     CHECK (status IN ('pending', 'delivered', 'quarantined')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_until      timestamptz,
    last_error       text
                     CONSTRAINT webhook_inbox_outbox_last_error_check CHECK (length(last_error) <= 1000),
    response_status  integer,
    response_excerpt text
                     CONSTRAINT webhook_inbox_outbox_excerpt_check CHECK (length(response_excerpt) <= 1000),
    provider_id      text
                     CONSTRAINT webhook_inbox_outbox_provider_id_check CHECK (length(provider_id) <= 200),
    source_scope     text,
    source_event_id  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_attempt_at  timestamptz,
    processed_at     timestamptz
);
COMMENT ON TABLE webhook_inbox_outbox IS
    'External side effects, one row per business operation: recorded by webhook_inbox_emit() in the handler''s transaction, delivered by the sidecar (HTTP POST, Idempotency-Key = operation_id) under a lease.';
COMMENT ON COLUMN webhook_inbox_outbox.operation_id IS
    'The business operation''s own id (''receipt:'' || payment id), not the event id: the primary key and the Idempotency-Key / webhook-id sent on every attempt. Printable ASCII, no spaces, at most 200 characters (it travels in a header).';
COMMENT ON COLUMN webhook_inbox_outbox.destination IS
    'Name of a destination configured in the sidecar (--destination NAME=URL); its URL and credentials live there, never in this table or the payload.';
COMMENT ON COLUMN webhook_inbox_outbox.payload IS 'The JSON body POSTed to the destination (the first emit''s; a repeated emit does not change it).';
COMMENT ON COLUMN webhook_inbox_outbox.status IS
    'pending (to deliver; retried with backoff), delivered (a 2xx was saved, final) or quarantined (4xx, or max attempts: needs a human or `requeue --effects`).';
COMMENT ON COLUMN webhook_inbox_outbox.attempts IS
    'Deliveries started (counted when claimed, so a sidecar killed during a call still counts one); quarantined at the sidecar''s --max-attempts.';
COMMENT ON COLUMN webhook_inbox_outbox.next_attempt_at IS 'Earliest time a sidecar may start the next delivery (backoff, or the destination''s Retry-After).';
COMMENT ON COLUMN webhook_inbox_outbox.lease_owner IS
    'Random id of the sidecar delivering it now; the save applies only while this is still the saver''s id.';
COMMENT ON COLUMN webhook_inbox_outbox.lease_until IS
    'The lease ends then (no row lock is held during the HTTP call); an expired lease lets another sidecar start the delivery again with the same key.';
COMMENT ON COLUMN webhook_inbox_outbox.last_error IS 'Why the last delivery failed or why it was quarantined (status and reason; never credentials).';
COMMENT ON COLUMN webhook_inbox_outbox.response_status IS 'HTTP status of the last answer (NULL: no answer: timeout or connection error).';
COMMENT ON COLUMN webhook_inbox_outbox.response_excerpt IS 'The first 1000 characters of the last answer''s body.';
COMMENT ON COLUMN webhook_inbox_outbox.provider_id IS 'The top-level "id" of a JSON answer (the provider''s id for the receipt, refund, shipment), when it has one.';
COMMENT ON COLUMN webhook_inbox_outbox.source_scope IS 'source_scope of the inbox event whose handler emitted the effect (NULL outside a handler).';
COMMENT ON COLUMN webhook_inbox_outbox.source_event_id IS 'event_id of the inbox event whose handler emitted the effect (NULL outside a handler).';
COMMENT ON COLUMN webhook_inbox_outbox.created_at IS 'When the emitting transaction recorded the effect.';
COMMENT ON COLUMN webhook_inbox_outbox.last_attempt_at IS 'When the last delivery started.';
COMMENT ON COLUMN webhook_inbox_outbox.processed_at IS 'When the effect became delivered or quarantined.';

CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_claim_idx
    ON webhook_inbox_outbox (destination, next_attempt_at, created_at)
    WHERE status = 'pending';
COMMENT ON INDEX webhook_inbox_outbox_claim_idx IS
    'Partial index serving the sidecar''s per-destination claim: only pending effects, ordered by due time.';

-- Effects the Rails app has received (receive_effect): one row per operation id, inserted in
-- the transaction that runs the block, so the block's writes and "done" commit together.
CREATE TABLE IF NOT EXISTS webhook_inbox_effects_received (
    operation_id text        PRIMARY KEY,
    name         text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_inbox_effects_received IS
    'Effects run by the Rails app (WebhookInbox::Controller#receive_effect), one row per operation id (the webhook-id the sidecar signs): committed with the block''s writes, so a redelivery is answered without running the block again.';
COMMENT ON COLUMN webhook_inbox_effects_received.operation_id IS 'The effect''s operation id (webhook_inbox_outbox.operation_id, sent as webhook-id).';
COMMENT ON COLUMN webhook_inbox_effects_received.name IS 'The receive_effect name that ran it (:send_receipt).';
COMMENT ON COLUMN webhook_inbox_effects_received.received_at IS 'When the block''s transaction committed.';

-- Stats read through partial indexes, like webhook_inbox_stats(): pending rows (claim index),
-- quarantined rows, and the rows delivered in the last hour; delivered effects older than that
-- are never read (they are the bulk of the table until pruned).
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_quarantined_idx
    ON webhook_inbox_outbox (destination) WHERE status = 'quarantined';
COMMENT ON INDEX webhook_inbox_outbox_quarantined_idx IS
    'Partial index for stats, metrics and requeue: only quarantined effects.';
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_delivered_idx
    ON webhook_inbox_outbox (processed_at) WHERE status = 'delivered';
COMMENT ON INDEX webhook_inbox_outbox_delivered_idx IS
    'Partial index for stats (delivered in the last hour) and retention (delivered before a time).';
