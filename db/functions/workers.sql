-- functions/workers.sql - the heartbeats of Ruby workers and sidecars.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- Upserts the caller's row with heartbeat now (started_at set on its first beat), and deletes
-- the rows of workers silent for a day. Returns nothing.
CREATE OR REPLACE FUNCTION webhook_inbox_worker_beat(p_worker_id text, p_kind text, p_host text, p_pid integer,
                                                     p_handlers integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_inbox_workers AS w (worker_id, kind, host, pid, handlers)
    VALUES (p_worker_id, p_kind, left(p_host, 255), p_pid, coalesce(p_handlers, 0))
    ON CONFLICT (worker_id) DO UPDATE
       SET heartbeat_at = now(), handlers = coalesce(p_handlers, w.handlers), stopped_at = NULL;
    DELETE FROM webhook_inbox_workers w WHERE w.heartbeat_at < now() - interval '1 day';
END
$$;
COMMENT ON FUNCTION webhook_inbox_worker_beat(text, text, text, integer, integer) IS
    'A worker''s heartbeat (worker id, kind, host, pid, handlers loaded): its row upserted with heartbeat_at now; rows silent for a day deleted.';

CREATE OR REPLACE FUNCTION webhook_inbox_worker_stopped(p_worker_id text) RETURNS void
LANGUAGE sql AS $$
    UPDATE webhook_inbox_workers SET stopped_at = now() WHERE worker_id = p_worker_id
$$;
COMMENT ON FUNCTION webhook_inbox_worker_stopped(text) IS 'A worker''s clean exit: stopped_at set on its row.';
