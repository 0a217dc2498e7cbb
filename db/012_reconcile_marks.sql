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
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

DROP TRIGGER IF EXISTS webhook_inbox_mark_redelivered ON webhook_inbox;
DROP FUNCTION IF EXISTS webhook_inbox_mark_redelivered();

ALTER TABLE webhook_inbox_redeliveries ADD COLUMN IF NOT EXISTS settled_at timestamptz;
COMMENT ON COLUMN webhook_inbox_redeliveries.settled_at IS
    'When webhook_inbox_reconcile_mark was done with this request: it marked the stored redelivery, or an hour passed after requested_at without one arriving (GitHub redelivers within seconds). NULL: still looked for. Asking again clears it.';

COMMENT ON COLUMN webhook_inbox.recovered_at IS
    'When reconcile recovered this event from the provider''s API (Stripe, Paddle, Square: inserted from the provider''s event list; GitHub: stored from a redelivery reconcile asked for, marked by the next webhook_inbox_reconcile_mark). NULL: it arrived as an ordinary delivery.';
