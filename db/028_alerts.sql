-- 028_alerts.sql - schema version 28: operational notifications. `run --notify NAME` has one
-- sidecar at a time check a few conditions an operator must hear about (a quarantine burst,
-- an old backlog, signature failures kept for an endpoint, reconcile recovering events a
-- delivery missed, events held by a pause) and, when one starts or clears, emit a message to
-- each named destination through the outbox (webhook_inbox_alerts_check in
-- db/functions/alerts.sql): delivered, retried, signed and kept like any effect, so the
-- outbox row is each notification's audit. This table holds each condition's state, so two
-- sidecars never tell one change twice and a flapping condition is told at most once per
-- interval. Idempotent: safe to re-run. On a Citus coordinator it stays local.
-- Additive: webhook_inbox_schema_min_worker() stays 4.

CREATE TABLE IF NOT EXISTS webhook_inbox_alerts (
    condition   text        PRIMARY KEY
                CONSTRAINT webhook_inbox_alerts_condition_check CHECK (octet_length(condition) BETWEEN 1 AND 300),
    firing      boolean     NOT NULL,
    since       timestamptz NOT NULL,
    value       bigint      NOT NULL,
    summary     text        NOT NULL,
    told        text
                CONSTRAINT webhook_inbox_alerts_told_check CHECK (told IN ('firing', 'resolved')),
    told_at     timestamptz,
    checked_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_inbox_alerts IS
    'Operational notifications (`run --notify`): each condition that fires or was told as firing, with what was last told and when. Written by webhook_inbox_alerts_check only; a condition told resolved and clear is deleted.';
COMMENT ON COLUMN webhook_inbox_alerts.condition IS
    'quarantine_burst, backlog_age, reconcile_recovered, paused_backlog, or signature_failures:<endpoint>.';
COMMENT ON COLUMN webhook_inbox_alerts.firing IS 'Whether the condition held at the last check.';
COMMENT ON COLUMN webhook_inbox_alerts.since IS 'When it started to hold (or cleared, once not firing).';
COMMENT ON COLUMN webhook_inbox_alerts.value IS 'The measure at the last check (events, seconds or deliveries; see summary).';
COMMENT ON COLUMN webhook_inbox_alerts.summary IS 'One line for a human: counts and names only, never a payload, header or secret.';
COMMENT ON COLUMN webhook_inbox_alerts.told IS 'The state last sent to the destinations (NULL: nothing sent yet).';
COMMENT ON COLUMN webhook_inbox_alerts.told_at IS 'When it was sent (the outbox rows of that time are the messages).';
