-- functions/receipt.sql - what the receipt relies on: the wake-up trigger on new events.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Wake the workers: one NOTIFY per inserting statement (NOTIFY also folds duplicates per transaction).
CREATE OR REPLACE FUNCTION webhook_inbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('webhook_inbox', '');
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION webhook_inbox_notify() IS 'Statement trigger: NOTIFY webhook_inbox so LISTENing sidecars wake up.';

-- The wake-up: one NOTIFY per inserting statement. Created when missing; never on a table
-- Citus distributes (db/citus/001_layout.sql drops it there: sidecars poll).
DO $$
DECLARE
    distributed boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
           INTO distributed USING 'webhook_inbox'::regclass;
    END IF;
    IF NOT distributed AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'webhook_inbox'::regclass
                                                                 AND tgname = 'webhook_inbox_notify_insert') THEN
        CREATE TRIGGER webhook_inbox_notify_insert
            AFTER INSERT ON webhook_inbox
            FOR EACH STATEMENT EXECUTE FUNCTION webhook_inbox_notify();
    END IF;
END
$$;
