-- citus/005_functions.sql - the gem's functions as Citus runs them (applied after 001-004 by
-- every `migrate` on a Citus layout; 006's one function comes after it on purpose, with its own
-- settings, and is not altered here). Idempotent.
--
-- SQL functions over distributed tables: Citus cannot plan the statement of a LANGUAGE sql
-- function that is not inlined ("parameterized queries for SQL functions referencing
-- distributed tables are not supported"). The core writes those it reads a distributed table
-- with as PL/pgSQL (webhook_inbox_hourly, _attempts_histogram, _unrouted, _outbox_stats,
-- _outbox_next_due: what `stats`, the dashboard, /metrics and the deliverer read), so they
-- run here as they are; this file only checks that no gem STABLE SQL function of one query
-- over a distributed table is left (the form that fails at its first call here), and fails
-- the migration naming it, rather than let it fail in production.
DO $$
DECLARE
    bad text;
BEGIN
    SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.oid::regprocedure::text) INTO bad
      FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
     WHERE p.proname LIKE 'webhook\_inbox\_%' AND p.pronamespace = current_schema()::regnamespace
       AND p.prokind = 'f' AND l.lanname = 'sql' AND p.provolatile <> 'v' -- reads (a write works as it is)
       AND (p.proretset OR p.proargmodes IS NULL) -- one row of OUT values (webhook_inbox_stats) plans as it is
       AND EXISTS (SELECT 1 FROM pg_dist_partition d
                    WHERE d.partmethod = 'h' AND p.prosrc ~ ('\m' || (d.logicalrelid::regclass)::text || '\M'))
       AND strpos(regexp_replace(p.prosrc, '[\s;]+$', ''), ';') = 0 -- one query (those Citus plans only as PL/pgSQL)
       AND regexp_replace(p.prosrc, '[\s;]+$', '') ~* '^(\s*--[^\n]*\n)*\s*(select|with)\M';
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'webhook_inbox: SQL functions that Citus cannot plan: %', bad
              USING HINT = 'write them as PL/pgSQL in db/functions/ (RETURN QUERY)', ERRCODE = '0A000';
    END IF;
END
$$;

-- Every gem function but triggers (they run on the shards) and the STABLE SQL ones that are
-- inlined (a SET would stop that) - every PL/pgSQL or volatile one, those of db/citus/ included -
-- runs with citus/001's STABLE clock first on its search_path. A SET stays in force in the
-- functions and handlers it calls. Distributed functions take the ALTER to the workers.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.proname LIKE 'webhook\_inbox\_%' AND p.pronamespace = current_schema()::regnamespace
           AND p.prokind = 'f' AND p.prorettype <> 'trigger'::regtype
           AND (l.lanname = 'plpgsql' OR p.provolatile = 'v')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = webhook_inbox_citus, pg_catalog, %I', f, current_schema());
    END LOOP;
END
$$;

-- The claims pick their scope with one read of every shard (the Ruby worker's lock finds its
-- run's scope so), inside the sidecar's (or the Ruby worker's) transaction. Citus runs such a
-- read over several connections per worker, and every connection that joined the transaction
-- then takes each SAVEPOINT (one per event: the handler's), RELEASE and COMMIT: 6 connections
-- for 2 workers made each event 5 round trips more. One connection per worker for these reads.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['webhook_inbox_citus_claim(integer)', 'webhook_inbox_ruby_claim(integer)',
                             'webhook_inbox_ruby_start(integer, bigint, bigint)', 'webhook_inbox_ruby_lock(text, integer)',
                             'webhook_inbox_outbox_claim(text, integer, text, bigint, integer)',
                             'webhook_inbox_outbox_save_batch(text, text[], text[], text[], integer[], text[], bigint[], integer, bigint, bigint)']
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET citus.max_adaptive_executor_pool_size = 1', f);
    END LOOP;
END
$$;
