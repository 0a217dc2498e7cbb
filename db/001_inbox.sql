-- 001_inbox.sql - the durable inbox shared by the receiver (gem) and the worker (sidecar).
-- Idempotent: safe to re-run. Applied by `webhook-inbox-sidecar migrate` and the Rails generator.
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

CREATE TABLE IF NOT EXISTS webhook_inbox (
    source_scope    text        NOT NULL,
    event_id        text        NOT NULL,
    event_type      text        NOT NULL DEFAULT '',
    payload         jsonb,
    raw_body        bytea,
    status          text        NOT NULL DEFAULT 'pending'
                    CONSTRAINT webhook_inbox_status_check
                    CHECK (status IN ('pending', 'done', 'quarantined')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    outcome         text,
    received_at     timestamptz NOT NULL DEFAULT now(),
    processed_at    timestamptz,
    PRIMARY KEY (source_scope, event_id)
);

COMMENT ON TABLE webhook_inbox IS
    'Verified webhook deliveries, one row per (source_scope, event_id): the receiver inserts with ON CONFLICT DO NOTHING, the sidecar moves pending rows to done or quarantined.';
COMMENT ON COLUMN webhook_inbox.source_scope IS
    'Trusted origin from server-side endpoint configuration (provider + account + mode), never from the payload alone.';
COMMENT ON COLUMN webhook_inbox.event_id IS
    'The provider''s event id (or a SHA-256 of the body where the provider has none); the dedupe key within source_scope.';
COMMENT ON COLUMN webhook_inbox.event_type IS 'Provider event type used to route the event to a handler ('''' when unknown).';
COMMENT ON COLUMN webhook_inbox.payload IS 'The verified body as jsonb; NULL when the body is not valid jsonb (then raw_body holds it).';
COMMENT ON COLUMN webhook_inbox.raw_body IS 'The verified raw body, kept only when it cannot be stored as jsonb (invalid JSON, \u0000, form bodies).';
COMMENT ON COLUMN webhook_inbox.status IS 'pending (waiting for the worker), done (handled, final) or quarantined (permanent failure, needs a human or requeue).';
COMMENT ON COLUMN webhook_inbox.attempts IS 'Handler runs that failed transiently; the worker quarantines after its maximum.';
COMMENT ON COLUMN webhook_inbox.next_attempt_at IS 'Earliest time the worker may claim a pending row again (backoff after a transient failure).';
COMMENT ON COLUMN webhook_inbox.last_error IS 'Reason of the last failure or of the quarantine; never secrets.';
COMMENT ON COLUMN webhook_inbox.outcome IS 'Text returned by the handler when the event became done.';
COMMENT ON COLUMN webhook_inbox.received_at IS 'When the receiver committed the row (the 200 was sent after this).';
COMMENT ON COLUMN webhook_inbox.processed_at IS 'When the row became done or quarantined.';

-- The worker's claim query: pending rows whose time has come, oldest first.
CREATE INDEX IF NOT EXISTS webhook_inbox_claim_idx
    ON webhook_inbox (next_attempt_at, received_at)
    WHERE status = 'pending';
COMMENT ON INDEX webhook_inbox_claim_idx IS
    'Partial index serving the worker''s SKIP LOCKED claim: only pending rows, ordered by due time.';
