-- 030_trace_context.sql - schema version 30: the W3C trace context (`traceparent`) of the
-- receipt, kept with the event and with each effect its handler records, so the sidecar and
-- the Ruby worker continue the receipt's trace (docs/operations.md, "Traces").
-- The receipt stores its span's context (the gem's insert, ext/webhook_inbox/store.c, and
-- the Rails store: a malformed or oversized value becomes NULL there, never an error);
-- webhook_inbox_emit() and the Ruby handler runs copy the handled event's context to the
-- outbox row in the SQL that inserts it (functions/outbox.sql, functions/ruby_handlers.sql).
-- NULL: tracing was off at the receipt, or the value was not a valid version-00 traceparent.
-- Idempotent: safe to re-run. Adding a NULL column rewrites nothing (no scan, a short lock);
-- on Citus the columns reach every shard. Additive: webhook_inbox_schema_min_worker() stays 4.

ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS trace_context text;
COMMENT ON COLUMN webhook_inbox.trace_context IS
    'W3C traceparent of the receipt''s span (00-<trace id>-<span id>-<flags>, 55 characters), or NULL (tracing off, or a malformed value dropped); never a reason to refuse the event.';

ALTER TABLE webhook_inbox_outbox ADD COLUMN IF NOT EXISTS trace_context text;
COMMENT ON COLUMN webhook_inbox_outbox.trace_context IS
    'W3C traceparent inherited from the event whose handler recorded the effect (its trace_context), or NULL; the delivery span is its child and the HTTP call sends it on.';
