-- 013_ruby_handler_fixes.sql - schema version 13: Ruby handler runs are charged before they
-- run, each in a transaction of its own, locking its event before its run (as dispatch does).
-- Idempotent: safe to re-run. Applied after the files numbered below it.
--
-- 009's worker ran a batch of runs in one transaction and charged a run only when it saved
-- it: a handler that killed its process (exit!, kill -9, a segfault, the OOM killer) was
-- never charged and its batch-mates ran again with it, forever. It also held each run's lock
-- from the claim and took the event's at the save, the reverse of dispatch (event, then the
-- run: webhook_inbox_run_ruby on a requeue), so the two could deadlock. From 013 the worker
-- (lib/webhook_inbox/handlers/runner.rb) does, per run:
--   1. webhook_inbox_ruby_start, committed before the handler runs (with the previous run's
--      result, else alone): one due run, charged (attempts + 1) and leased for its backoff,
--      so a run whose process died is due again after it, charged, and quarantined when it
--      had its last attempt (exhausted);
--   2. webhook_inbox_ruby_lock: its event's row, then the run's, fenced by the attempt number;
--   3. the handler in a savepoint, then webhook_inbox_ruby_finish (no second charge) in the
--      same transaction, which settles the event as 009 does.
-- 009's webhook_inbox_ruby_claim and webhook_inbox_ruby_save stay as they were, for workers of
-- the previous release during a rolling deploy.
--
-- The SQL route's once-markers (webhook_inbox_effects_received rows named 'sql:<route>',
-- which webhook_inbox_run_ruby writes) were never deleted. They now carry their event's key
-- (source_scope, source_event_id: the markers 009 wrote get theirs below, or go when their
-- event is gone), and prune and retention (sidecar/src/retention/prune.c) delete them with the events
-- they empty or delete, in the same bounded statements.
--
-- Functions defined here (new): webhook_inbox_ruby_start, webhook_inbox_ruby_lock,
-- webhook_inbox_ruby_finish. Redefined: webhook_inbox_schema_version, webhook_inbox_run_ruby
-- (009's, writing the marker's event key; nothing else changes), webhook_inbox_ruby_settle
-- (009's, without concat_ws over a column, which Citus refuses in an UPDATE).
--
-- Additive: webhook_inbox_schema_min_worker() stays 4.
--
-- The dashboard's effect queries get indexes (app/models/webhook_inbox/effect_list.rb): the
-- list, newest first by (created_at, operation_id), and an event's effects other than its
-- Ruby runs (which 009's index serves).
--
-- On a large outbox or webhook_inbox_effects_received, CREATE INDEX below blocks effect
-- inserts while it builds. Build them first without blocking, outside a transaction:
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_effects_received_event_idx
--     ON webhook_inbox_effects_received (source_scope, source_event_id) WHERE source_event_id IS NOT NULL;
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_outbox_created_idx
--     ON webhook_inbox_outbox (created_at, operation_id);
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_inbox_outbox_event_idx
--     ON webhook_inbox_outbox (source_scope, source_event_id, created_at, operation_id) WHERE destination <> 'ruby';
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

ALTER TABLE webhook_inbox_effects_received ADD COLUMN IF NOT EXISTS source_scope text;
ALTER TABLE webhook_inbox_effects_received ADD COLUMN IF NOT EXISTS source_event_id text;
COMMENT ON COLUMN webhook_inbox_effects_received.source_scope IS
    'For a SQL route''s once-marker (name sql:<route>, v13 on): its event''s scope, so prune deletes it with the event; NULL for receive_effect''s rows.';
COMMENT ON COLUMN webhook_inbox_effects_received.source_event_id IS
    'For a SQL route''s once-marker: its event''s id (see source_scope).';
CREATE INDEX IF NOT EXISTS webhook_inbox_effects_received_event_idx
    ON webhook_inbox_effects_received (source_scope, source_event_id) WHERE source_event_id IS NOT NULL;
COMMENT ON INDEX webhook_inbox_effects_received_event_idx IS
    'The once-markers of one event: deleted with it by prune and retention (sidecar/src/prune.c).';

CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_created_idx ON webhook_inbox_outbox (created_at, operation_id);
COMMENT ON INDEX webhook_inbox_outbox_created_idx IS
    'The dashboard''s effects list: keyset pages newest first by (created_at, operation_id), and its time range.';
CREATE INDEX IF NOT EXISTS webhook_inbox_outbox_event_idx
    ON webhook_inbox_outbox (source_scope, source_event_id, created_at, operation_id) WHERE destination <> 'ruby';
COMMENT ON INDEX webhook_inbox_outbox_event_idx IS
    'The effects an event emitted (other than its Ruby runs: webhook_inbox_outbox_ruby_event_idx), in order: the dashboard''s event page and its scope / event filters.';

-- The markers 009 wrote have no key: find their events (the operation id is the hash of
-- scope, event id and the marker's name), then delete the keyless markers left, whose event
-- is gone. The hashes go through a temporary table, so no statement joins the inbox with
-- this table (on Citus the inbox is distributed and this table is not). Touches only keyless
-- 'sql:' markers: a re-run finds none and does nothing.
DO $$
DECLARE
    names text[] := ARRAY(SELECT DISTINCT r.name FROM webhook_inbox_effects_received r
                           WHERE r.source_event_id IS NULL AND starts_with(r.name, 'sql:'));
BEGIN
    IF cardinality(names) = 0 THEN
        RETURN;
    END IF;
    CREATE TEMPORARY TABLE webhook_inbox_013_marker_keys AS
        SELECT w.source_scope, w.event_id, webhook_inbox_handler_operation_id(w.source_scope, w.event_id, n.name) AS operation_id
          FROM webhook_inbox w, unnest(names) n(name);
    UPDATE webhook_inbox_effects_received r
       SET source_scope = k.source_scope, source_event_id = k.event_id
      FROM webhook_inbox_013_marker_keys k
     WHERE r.operation_id = k.operation_id AND r.source_event_id IS NULL AND starts_with(r.name, 'sql:');
    DROP TABLE webhook_inbox_013_marker_keys;
    DELETE FROM webhook_inbox_effects_received r
     WHERE r.source_event_id IS NULL AND starts_with(r.name, 'sql:') AND starts_with(r.operation_id, 'handler_');
END
$$;
