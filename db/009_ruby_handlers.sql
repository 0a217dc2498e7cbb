-- 009_ruby_handlers.sql - schema version 9: Ruby handlers (WebhookInbox.subscribe, classes in
-- app/webhooks). The app's Ruby worker (`bin/webhook-inbox-sidecar ruby`) registers which
-- event types it handles; the sidecar's dispatch then runs the type's SQL route (if any) and
-- records one run per Ruby handler in the outbox (destination 'ruby', operation id
-- handler_<sha256(scope, event id, handler)>), and the event stays pending until the Ruby
-- worker has run each of them: it runs one in a savepoint of a transaction that holds the
-- run's row lock, and marks the run delivered in that transaction, so the handler's writes
-- and its once-marker commit together (a crash rolls both back). The last run to succeed
-- marks the event done; a permanent failure, or the last attempt, quarantines the run and
-- the event. Idempotent: safe to re-run. Applied after 001..008.
--
-- Additive: webhook_inbox_schema_min_worker() stays 004's 4. A sidecar of any version >= 4
-- calls webhook_inbox_run_event() through dispatch, whose new body hands such events over
-- (result 'handed', a result older sidecars count nowhere); types without Ruby handlers
-- run exactly as before.
--
-- On a large existing outbox, CREATE INDEX below blocks effect inserts while it builds. Build
-- it first without blocking, outside a transaction:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_outbox_ruby_event_idx
--     ON webhook_inbox_outbox (source_scope, source_event_id) WHERE destination = 'ruby';
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

CREATE TABLE IF NOT EXISTS webhook_inbox_ruby_handlers (
    event_type    text        NOT NULL
                  CONSTRAINT webhook_inbox_ruby_handlers_event_type_check
                  CHECK (event_type <> '' AND length(event_type) <= 255 AND strpos(left(event_type, -1), '*') = 0),
    handler       text        NOT NULL
                  CONSTRAINT webhook_inbox_ruby_handlers_handler_check CHECK (handler ~ '^[!-~]{1,120}$'),
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, handler)
);
COMMENT ON TABLE webhook_inbox_ruby_handlers IS
    'The Rails app''s Ruby handlers, written by its Ruby worker at start from WebhookInbox.subscribe and app/webhooks (the code is the truth; never edit by hand). Every handler whose pattern matches an event''s type runs once for it.';
COMMENT ON COLUMN webhook_inbox_ruby_handlers.event_type IS 'An exact event type, a prefix pattern ending in ''*'' (''payment_intent.*''), or ''*'' (every type).';
COMMENT ON COLUMN webhook_inbox_ruby_handlers.handler IS 'The handler''s stable name (its class name, or subscribe''s as:): part of each run''s operation id, so renaming a handler makes new runs.';

CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_ruby_event_idx
    ON webhook_inbox_outbox (source_scope, source_event_id) WHERE destination = 'ruby';
COMMENT ON INDEX webhook_inbox_outbox_ruby_event_idx IS
    'The Ruby runs of one event: whether any is still pending when one finishes (webhook_inbox_ruby_settle).';

-- The audit trail takes retire_handler (rake webhook_inbox:retire_handler). Widened, never
-- narrowed, as in 008 and 011 (which runs after this file and finds 'reverify' admitted).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'webhook_inbox_actions'::regclass
                      AND conname = 'webhook_inbox_actions_action_check'
                      AND pg_get_constraintdef(oid) LIKE '%''retire_handler''%') THEN
        ALTER TABLE webhook_inbox_actions DROP CONSTRAINT IF EXISTS webhook_inbox_actions_action_check;
        ALTER TABLE webhook_inbox_actions ADD CONSTRAINT webhook_inbox_actions_action_check
            CHECK (action IN ('requeue', 'replay', 'prune', 'reverify', 'retire_handler'));
    END IF;
END
$$;
