-- citus/005_functions.sql - the gem's functions as Citus can run them (the last file of
-- db/citus/, applied after the others by every `migrate` on a Citus layout). Idempotent.
--
-- SQL functions over distributed tables: Citus cannot plan the statement of a LANGUAGE sql
-- function that is not inlined ("parameterized queries for SQL functions referencing
-- distributed tables are not supported": webhook_inbox_hourly, _attempts_histogram,
-- _unrouted, _outbox_stats, _outbox_next_due, what `stats`, the dashboard and /metrics
-- read). Each gem STABLE SQL function whose one query names a distributed table is re-created
-- here as PL/pgSQL with the same signature, volatility and statement (RETURN QUERY, or
-- RETURN for one value; #variable_conflict use_column: a column wins over a parameter of
-- the same name, as in SQL). A db/NNN that redefines one in SQL is converted again at the
-- next migrate. Functions of more than one statement are left as they are.
DO $$
DECLARE
    f    record;
    body text;
BEGIN
    FOR f IN
        SELECT p.oid, p.proname, p.proretset, p.provolatile, p.prosrc,
               pg_get_function_arguments(p.oid) AS args, pg_get_function_result(p.oid) AS result
          FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.proname LIKE 'webhook\_inbox\_%' AND p.pronamespace = current_schema()::regnamespace
           AND p.prokind = 'f' AND l.lanname = 'sql' AND p.provolatile <> 'v' -- reads (a write works as it is)
           AND (p.proretset OR p.proargmodes IS NULL) -- one row of OUT values (webhook_inbox_stats) plans as it is
           AND EXISTS (SELECT 1 FROM pg_dist_partition d
                        WHERE d.partmethod = 'h' AND p.prosrc ~ ('\m' || (d.logicalrelid::regclass)::text || '\M'))
    LOOP
        body := regexp_replace(f.prosrc, '[\s;]+$', '');
        CONTINUE WHEN strpos(body, ';') > 0 OR body !~* '^(\s*--[^\n]*\n)*\s*(select|with)\M'; -- one query only
        body := E'#variable_conflict use_column\nBEGIN\n'
             || CASE WHEN f.proretset THEN 'RETURN QUERY ' || body || E';\n'
                     ELSE 'RETURN (' || body || E');\n' END
             || 'END';
        EXECUTE format('CREATE OR REPLACE FUNCTION %I(%s) RETURNS %s LANGUAGE plpgsql %s AS %L',
                       f.proname, f.args, f.result,
                       CASE f.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE' ELSE 'VOLATILE' END, body);
    END LOOP;
END
$$;

-- Every PL/pgSQL or volatile gem function (those of citus/003 and the conversions above
-- included) runs with citus/001's STABLE clock first on its search_path; citus/001 did the
-- same for the functions there were then.
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
