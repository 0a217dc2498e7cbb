-- 022_worker_heartbeats.sql - schema version 22: the Ruby workers say they are alive. Each
-- Ruby worker (`bin/webhook-inbox-sidecar ruby`) writes a row when it starts and refreshes
-- its heartbeat while it works (every 10 s at most, from its rounds), and marks it stopped
-- when it exits cleanly; `webhook_inbox:doctor` reads them, so "Ruby handlers registered
-- and no worker alive" (every event of their types waits) is a failing check, not silence.
-- Rows of workers gone for a day are deleted by the next heartbeat of any worker.
-- Idempotent: safe to re-run. Applied after 001..020 (it depends on none of 019..021).
--
-- Redefines no function. New: webhook_inbox_workers, webhook_inbox_worker_beat(...),
-- webhook_inbox_worker_stopped(text). Additive: webhook_inbox_schema_min_worker() stays 4
-- (the sidecar never reads this table). On a Citus coordinator it stays a local table.
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

CREATE TABLE IF NOT EXISTS webhook_inbox_workers (
    worker_id    text        PRIMARY KEY
                 CONSTRAINT webhook_inbox_workers_worker_id_check CHECK (worker_id ~ '^[!-~]{1,200}$'),
    kind         text        NOT NULL
                 CONSTRAINT webhook_inbox_workers_kind_check CHECK (kind IN ('ruby')),
    host         text        NOT NULL CONSTRAINT webhook_inbox_workers_host_check CHECK (length(host) <= 255),
    pid          integer     NOT NULL,
    handlers     integer     NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz
);
COMMENT ON TABLE webhook_inbox_workers IS
    'Ruby workers alive or lately gone, one row per process run: written by the worker itself (webhook_inbox_worker_beat), read by webhook_inbox:doctor. Never edit by hand.';
COMMENT ON COLUMN webhook_inbox_workers.worker_id IS 'ruby:<host>:<pid>:<random>, new at every start (also the lease owner of the jobs it performs).';
COMMENT ON COLUMN webhook_inbox_workers.handlers IS 'How many Ruby handlers the worker loaded.';
COMMENT ON COLUMN webhook_inbox_workers.heartbeat_at IS 'Last sign of life: refreshed at most every 10 s while the worker runs rounds; older than a minute means stopped, hung, or a handler batch running that long.';
COMMENT ON COLUMN webhook_inbox_workers.stopped_at IS 'When it exited cleanly (SIGTERM/SIGINT); NULL while running, or after a kill.';
