-- functions/triggers.sql - the triggers on the gem's tables and their functions: the wake-ups
-- of sidecars and deliverers (NOTIFY) and the requeue stamp.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Wake the workers: one NOTIFY per inserting statement (NOTIFY also folds duplicates per
-- transaction). Since v32 the trigger below sends it from its WHEN condition and never calls
-- this function; it stays the trigger's named function (and does the same if called).
CREATE OR REPLACE FUNCTION webhook_inbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('webhook_inbox', '');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION webhook_inbox_notify() IS 'Function of the statement trigger webhook_inbox_notify_insert, whose WHEN sends the NOTIFY webhook_inbox itself (so this is not called): NOTIFY webhook_inbox so LISTENing sidecars wake up.';

-- Wake the sidecars' deliverers: one NOTIFY per inserting statement (sent by the trigger's WHEN
-- since v32, as webhook_inbox_notify's).
CREATE OR REPLACE FUNCTION webhook_inbox_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('webhook_inbox_outbox', '');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION webhook_inbox_outbox_notify() IS 'Function of the statement trigger webhook_inbox_outbox_notify_insert, whose WHEN sends the NOTIFY webhook_inbox_outbox itself (so this is not called): NOTIFY webhook_inbox_outbox so LISTENing deliverers wake up.';

-- Back to pending from done or quarantined, by whatever means (webhook_inbox_requeue, the
-- sidecar's `requeue`, a hand-written UPDATE): stamp requeued_at, so latency counts from
-- here, and log it. The WHEN clause keeps every other update free of the trigger.
CREATE OR REPLACE FUNCTION webhook_inbox_on_requeue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.requeued_at := now();
    NEW.attempt_log := webhook_inbox_log_append(NEW.attempt_log,
        webhook_inbox_log_entry('requeued', 'from ' || OLD.status, NULL));
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION webhook_inbox_on_requeue() IS
    'Row trigger: a row moved back to pending from done or quarantined gets requeued_at = now() and a ''requeued'' attempt_log entry.';

-- A route's names (db/029) from its regprocs, on the node that resolves the write: filled
-- when an INSERT leaves one out, and again when an UPDATE changes a regproc but not its name
-- (webhook_inbox_citus_resolve_routes, add_webhook_inbox_route's batch handler). A name the
-- write gives is kept: Citus copies a reference table to a new node with the names and
-- another node's OIDs. Schema-qualified and quoted, so it resolves whatever the search_path.
CREATE OR REPLACE FUNCTION webhook_inbox_routes_names() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.handler IS DISTINCT FROM OLD.handler AND NEW.handler_name IS NOT DISTINCT FROM OLD.handler_name) THEN
        IF TG_OP = 'UPDATE' OR NEW.handler_name IS NULL THEN
            SELECT format('%I.%I', n.nspname, p.proname) INTO NEW.handler_name
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = NEW.handler::oid;
        END IF;
    END IF;
    IF (TG_OP = 'INSERT' AND NEW.batch_handler_name IS NULL)
       OR (TG_OP = 'UPDATE' AND NEW.batch_handler IS DISTINCT FROM OLD.batch_handler
           AND NEW.batch_handler_name IS NOT DISTINCT FROM OLD.batch_handler_name) THEN
        NEW.batch_handler_name := NULL;
        IF NEW.batch_handler IS NOT NULL THEN
            SELECT format('%I.%I', n.nspname, p.proname) INTO NEW.batch_handler_name
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = NEW.batch_handler::oid;
            IF NEW.batch_handler_name IS NULL THEN
                RAISE EXCEPTION 'webhook_inbox: the route % names a batch handler that does not exist (OID %)',
                      NEW.event_type, NEW.batch_handler::oid USING ERRCODE = '42883';
            END IF;
        END IF;
    END IF;
    IF NEW.handler_name IS NULL THEN
        RAISE EXCEPTION 'webhook_inbox: the route % names a handler that does not exist (OID %)', NEW.event_type, NEW.handler::oid
              USING ERRCODE = '42883';
    END IF;
    -- A name the write gave must at least parse as one (42602 here, not at every dispatch).
    PERFORM to_regproc(NEW.handler_name), to_regproc(NEW.batch_handler_name);
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION webhook_inbox_routes_names() IS
    'Row trigger on webhook_inbox_routes: handler_name and batch_handler_name (schema-qualified) from the regprocs, unless the write gives them; refuses a regproc that names no function and a name that does not parse.';

-- The triggers, each created when missing, or replaced in place once when its form changed
-- (never dropped and created again: a current database takes no lock here). The NOTIFY ones never on a table Citus distributes:
-- db/citus/ drops them there (on a worker a NOTIFY fails the two-phase commit, and no sidecar
-- listens there: they poll). The requeue stamp changes only its row, so it stays on Citus.
DO $$
DECLARE
    distributed regclass[] := '{}';
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT coalesce(array_agg(logicalrelid), ''{}'') FROM pg_catalog.pg_dist_partition' INTO distributed;
    END IF;
    -- The wake-ups (v32): the NOTIFY sent by the WHEN condition, evaluated once per inserting
    -- statement; pg_notify returns void, never NULL, so the condition is false and the trigger
    -- function is never called. The same NOTIFY at the same point (the statement's end, sent
    -- at commit, dropped on rollback) without a PL/pgSQL call per statement: that call was
    -- 5-9% of a receipt's backend CPU in statements of 5 rows (docs/capacity.md). The form
    -- before v32 (no WHEN) is replaced in place, once (CREATE OR REPLACE TRIGGER, PostgreSQL 14+).
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'webhook_inbox'::regclass
                                              AND tgname = 'webhook_inbox_notify_insert' AND tgqual IS NOT NULL)
       AND NOT 'webhook_inbox'::regclass = ANY (distributed) THEN
        CREATE OR REPLACE TRIGGER webhook_inbox_notify_insert
            AFTER INSERT ON webhook_inbox
            FOR EACH STATEMENT WHEN (pg_notify('webhook_inbox', '') IS NULL)
            EXECUTE FUNCTION webhook_inbox_notify();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'webhook_inbox_outbox'::regclass
                                              AND tgname = 'webhook_inbox_outbox_notify_insert' AND tgqual IS NOT NULL)
       AND NOT 'webhook_inbox_outbox'::regclass = ANY (distributed) THEN
        CREATE OR REPLACE TRIGGER webhook_inbox_outbox_notify_insert
            AFTER INSERT ON webhook_inbox_outbox
            FOR EACH STATEMENT WHEN (pg_notify('webhook_inbox_outbox', '') IS NULL)
            EXECUTE FUNCTION webhook_inbox_outbox_notify();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'webhook_inbox'::regclass AND tgname = 'webhook_inbox_requeued') THEN
        CREATE TRIGGER webhook_inbox_requeued
            BEFORE UPDATE OF status ON webhook_inbox
            FOR EACH ROW WHEN (OLD.status <> 'pending' AND NEW.status = 'pending')
            EXECUTE FUNCTION webhook_inbox_on_requeue();
    END IF;
    IF to_regclass('webhook_inbox_routes') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'webhook_inbox_routes'::regclass AND tgname = 'webhook_inbox_routes_names') THEN
        CREATE TRIGGER webhook_inbox_routes_names
            BEFORE INSERT OR UPDATE ON webhook_inbox_routes
            FOR EACH ROW EXECUTE FUNCTION webhook_inbox_routes_names();
    END IF;
END
$$;
