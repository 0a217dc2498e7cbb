-- 019_batch_handlers.sql - schema version 19: a route may name a batch handler, one call
-- for a run of events of its type, set-based. Measured (bench/sidecar, pg_stat_statements):
-- with a row handler, a batched event costs the handler's own statements once per event
-- (~30 us for the orders handler), its PL/pgSQL (~15 us) and the dispatch around it, about
-- 1.7 times the same work done by one statement per 100 events. A batch handler does the
-- work of many events in a few statements, as an app's bulk job would.
--
-- The contract. webhook_inbox_routes.batch_handler names a function
--     (events webhook_inbox[]) RETURNS text[]
-- that does, for all the events it is given, what the route's row handler (handler, still
-- required) would do for each of them in that order, and returns one outcome per event in
-- the order given (NULL: 'done', as a row handler's NULL). It is an optimisation of the
-- common case, never a second meaning: for anything out of the ordinary (a missing row, a
-- mismatch, a duplicate, a quarantine) it raises, webhook_inbox_batch_defer() or any error,
-- and every event of the batch is then run again by the row handler, each in its own
-- savepoint, which decides for each (done, retried with backoff, quarantined). Its writes
-- are rolled back first, so nothing it did commits: an event is handled once, by one of the
-- two. An error other than a deliberate one (webhook_inbox_batch_defer's WIB01, a quarantine's
-- WIQ01, a "not yet" WIR01) also raises a WARNING (SQLSTATE WIB03) naming the function, the event type and the error's SQLSTATE
-- (never its message, which may hold payload data): the sidecar logs it (server_warning,
-- once a minute per text), so a batch handler that always fails is seen, not silently
-- slow. A result of another length than its input is such an error (WIB02). A deliberate
-- one raises a NOTICE (WIB04) instead. The sidecar counts both
-- (webhook_inbox_batch_handler_fallbacks_total, batch_fallbacks= in its summary line).
--
-- When it is called. In webhook_inbox_dispatch_batch's optimistic subtransaction (db/017),
-- for each run of two or more consecutive claimed events of one type whose route has a
-- batch handler and that take the plain path (no Ruby handlers, no once-marker, no pause or
-- rate rule matching, the row neither held nor holding a slot). Consecutive, so the claim's
-- order between types is kept as with row handlers. One event alone, and every event of a
-- batch of one (--batch-size 1), goes to the row handler. On Citus the batch is dispatched
-- per event (webhook_inbox_citus_dispatch_shard), so batch handlers are not called there.
-- During the call webhook_inbox.source_scope and webhook_inbox.source_event_id are '' (it
-- handles many events): an effect it emits (webhook_inbox_emit) records no source event.
-- Its events' attempt_log durations share its time evenly.
--
-- Also: the batch's arguments are checked before the claim (017 claimed first).
-- Idempotent: safe to re-run. Applied after 001..018.
--
-- Redefines: webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint)
-- (017's; same arguments, rows and results). New: webhook_inbox_routes.batch_handler,
-- webhook_inbox_route_batch_handler(text), webhook_inbox_batch_defer(text).
-- Additive: webhook_inbox_schema_min_worker() stays 4; a route without a batch handler runs
-- as in 017.
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

ALTER TABLE webhook_inbox_routes ADD COLUMN IF NOT EXISTS batch_handler regproc;
COMMENT ON COLUMN webhook_inbox_routes.batch_handler IS
    'Optional function (webhook_inbox[]) RETURNS text[]: does the row handler''s work for a run of events set-based, one outcome per event in order; raises to hand them all to the row handler (db/019).';
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'webhook_inbox_routes_batch_handler_check'
                                                 AND conrelid = 'webhook_inbox_routes'::regclass) THEN
        ALTER TABLE webhook_inbox_routes ADD CONSTRAINT webhook_inbox_routes_batch_handler_check
            CHECK (batch_handler IS NULL OR destination IS NULL);
    END IF;
END
$$;
