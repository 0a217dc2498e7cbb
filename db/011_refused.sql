-- 011_refused.sql - schema version 11: deliveries refused for a signature or secret mismatch,
-- kept aside so a wrong or rotated secret costs no events. An endpoint configured with
-- keep_refused: true keeps what it answers 401 signature_mismatch, no_secret or unknown_key
-- here (never in webhook_inbox: nothing here is processed), bounded per endpoint by count,
-- bytes and age; `reverify` (rake webhook_inbox:reverify, the dashboard) verifies each row
-- again with the endpoint's current secrets and the row's receipt time as "now", stores the
-- ones that now verify as their delivery would have been stored, and deletes them here.
-- Idempotent: safe to re-run. Applied after 001..010.
--
-- Additive: webhook_inbox_schema_min_worker() stays 4 (the sidecar never reads this table).
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

CREATE TABLE IF NOT EXISTS webhook_inbox_refused (
    id              bigserial   PRIMARY KEY,
    endpoint        text        NOT NULL
                    CONSTRAINT webhook_inbox_refused_endpoint_check CHECK (octet_length(endpoint) BETWEEN 1 AND 200),
    source_scope    text        NOT NULL,
    provider        text        NOT NULL,
    reason          text        NOT NULL
                    CONSTRAINT webhook_inbox_refused_reason_check CHECK (reason IN ('signature_mismatch', 'no_secret', 'unknown_key')),
    body            bytea       NOT NULL,
    request_headers jsonb,
    request_env     jsonb       NOT NULL DEFAULT '{}',
    received_at     timestamptz NOT NULL,
    kept_at         timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_inbox_refused IS
    'Deliveries an endpoint with keep_refused answered 401 for a signature or secret mismatch: unverified bytes, never processed. Bounded per endpoint (webhook_inbox_keep_refused); reverify moves the ones that verify with the current secrets, checked at received_at, into webhook_inbox.';
COMMENT ON COLUMN webhook_inbox_refused.endpoint IS 'The configured endpoint name (WebhookInbox.configure c.endpoint): reverify verifies with its current secrets.';
COMMENT ON COLUMN webhook_inbox_refused.source_scope IS 'The scope the receiver would have stored the event under (the row keeps it: scopes can be per request).';
COMMENT ON COLUMN webhook_inbox_refused.reason IS 'Why it was refused: signature_mismatch (no secret signs it), no_secret (none configured), unknown_key (a key id not configured).';
COMMENT ON COLUMN webhook_inbox_refused.body IS 'The raw request body as received (bytes; unverified, possibly forged).';
COMMENT ON COLUMN webhook_inbox_refused.request_headers IS 'The request headers as webhook_inbox.request_headers keeps them (RequestHeaders.from_env: credentials never kept).';
COMMENT ON COLUMN webhook_inbox_refused.request_env IS 'The Rack request line a URL-signed provider''s signature covers: REQUEST_METHOD, rack.url_scheme, SERVER_NAME, SERVER_PORT, SCRIPT_NAME, PATH_INFO, QUERY_STRING.';
COMMENT ON COLUMN webhook_inbox_refused.received_at IS 'When the receiver answered 401 (its clock): reverify checks the signed timestamp against this, never against the time of the reverify, so an old captured delivery is not admitted.';

CREATE INDEX IF NOT EXISTS webhook_inbox_refused_endpoint_idx ON webhook_inbox_refused (endpoint, id);
COMMENT ON INDEX webhook_inbox_refused_endpoint_idx IS 'Per-endpoint bounds, lists and reverify pages.';

-- The audit trail takes reverifies (dashboard button and rake webhook_inbox:reverify, with the
-- actor). Widened, never narrowed:
-- re-run after a later file allowed more actions (the chain is applied whole by every
-- migrate), this leaves that constraint, and the rows it admits, alone.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'webhook_inbox_actions'::regclass
                      AND conname = 'webhook_inbox_actions_action_check'
                      AND pg_get_constraintdef(oid) LIKE '%''reverify''%') THEN
        ALTER TABLE webhook_inbox_actions DROP CONSTRAINT IF EXISTS webhook_inbox_actions_action_check;
        ALTER TABLE webhook_inbox_actions ADD CONSTRAINT webhook_inbox_actions_action_check
            CHECK (action IN ('requeue', 'replay', 'prune', 'reverify'));
    END IF;
END
$$;
COMMENT ON COLUMN webhook_inbox_actions.action IS
    'requeue: quarantined -> pending; replay: done -> pending (e.g. after fixing a handler); prune: done events emptied (and delivered effects deleted) by `webhook-inbox-sidecar prune` or rake webhook_inbox:prune; reverify: refused deliveries of an endpoint verified again, the ones that verify stored in the inbox; retire_handler (db/009): a Ruby handler''s registrations removed by an operator (filter handler, event_type, runs_retired; count: registrations removed).';
COMMENT ON COLUMN webhook_inbox_actions.filter IS
    'The filter as given: keys scope, event_id, type, from, to, error (see webhook_inbox_requeue); for prune older_than_s, scope, and effects_deleted (delivered effects deleted with the events); for reverify endpoint, still_refused, expired.';
COMMENT ON COLUMN webhook_inbox_actions.count IS 'Rows moved back to pending (prune: events emptied; reverify: refused deliveries admitted to the inbox).';
