-- citus/006_receive.sql - a receipt batch written on the node holding its shard, into the shard's
-- own table (issue 30). Idempotent. After 005 on purpose: it reads no clock but now() (STABLE), so
-- it needs no STABLE-clock search_path of 005's.
--
-- Why: an Inbox with citus_nodes sends a scope's receipts to the node holding its shard, where
-- Citus ran the INSERT on the distributed table by local execution: it planned the distributed
-- statement, then deparsed, parsed and planned the shard's statement at every batch. Written
-- against the shard table, with a plan prepared once per session, a batch of 20 rows cost the
-- cluster 0.47x the CPU, of 5 0.57x (docs/capacity.md, "The shard's own table"); a row alone
-- saved nothing measurable, so the gem sends only batches of two rows or more here.
--
-- Never on a stale table: a shard move ends by taking the shard's metadata lock exclusively on
-- every node, then points the placement elsewhere and leaves the old table until its cleanup (a
-- row written there after the move's last catch-up would be lost). So, as
-- webhook_inbox_citus_dispatch_shard (001) does: the metadata lock shared (the move waits for
-- this statement's commit, or this statement for the move), then the placement read under it.
-- Citus lets only the table's owner take that lock: any other role, a batch of several shards,
-- rows whose ordering is left to SQL, or a shard not here (moved away, or a node without
-- metadata) take the INSERT on the distributed table instead, which Citus locks and routes
-- itself (through its INSERT ... SELECT: correct, slower).

-- The arrays are the gem's batch statement's (ext/webhook_inbox/store.c, BATCH_SQL_TRACED and
-- BATCH_SQL_READ_TRACED: the same columns and expressions; a change there is made here too), in
-- its order: scope, event id, type, payload (jsonb), raw body, status, last error, request headers,
-- the ordering spec and time path (for PostgreSQL to derive), the key and time read by the caller
-- (seconds as text), the traceparent. Rows as RETURNING gives them: the keys inserted, each once;
-- ON CONFLICT (source_scope, event_id) DO NOTHING decides duplicates as it does there.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_receive(
        p_scopes text[], p_ids text[], p_types text[], p_payloads jsonb[], p_raws bytea[], p_statuses text[],
        p_errors text[], p_headers jsonb[], p_order_specs text[], p_order_paths text[], p_keys text[],
        p_times text[], p_traces text[])
RETURNS TABLE (source_scope text, event_id text)
-- Plans reused: the checks' and the shard statement's (plain PostgreSQL: no Citus plan cache, whose
-- reused plans grow a session - the reason citus_nodes' sessions force custom plans).
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    shard_id bigint := get_shard_id_for_distribution_column('webhook_inbox', p_scopes[1]);
    shard regclass;
    stmt text;
BEGIN
    IF cardinality(array_remove(p_scopes, p_scopes[1])) = 0 -- one scope (a batch of one shard)
       AND cardinality(array_remove(p_order_specs, NULL)) = 0 AND cardinality(array_remove(p_order_paths, NULL)) = 0
       AND pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = 'webhook_inbox'::regclass), 'USAGE') THEN
        PERFORM lock_shard_metadata(5, ARRAY[shard_id]); -- ShareLock, until this statement commits
        IF EXISTS (SELECT 1 FROM pg_dist_placement pl
                    WHERE pl.shardid = shard_id AND pl.groupid = (SELECT g.groupid FROM pg_dist_local_group g)) THEN
            shard := to_regclass(shard_name('webhook_inbox', shard_id));
        END IF;
    END IF;
    IF shard IS NULL THEN
        -- One-shot (a reused plan of a statement on a distributed table grows the session).
        RETURN QUERY EXECUTE $q$
            INSERT INTO webhook_inbox AS w (source_scope, event_id, event_type, payload, raw_body, status, last_error,
                                            processed_at, request_headers, ordering_key, ordering_at, next_attempt_at,
                                            trace_context)
            SELECT u.s, u.e, u.t, u.p, u.r, u.st, u.le, CASE WHEN u.st = 'quarantined' THEN now() END, u.h, o.key, o.at,
                   least(now(), o.at),
                   CASE WHEN octet_length(u.tc) = 55
                             AND u.tc ~ '^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}' THEN u.tc END
              FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                   AS u(s, e, t, p, r, st, le, h, ok, ot, dk, da, tc),
                   LATERAL (SELECT k.key, CASE WHEN k.key IS NOT NULL
                                               THEN coalesce(to_timestamp(u.da::float8), webhook_inbox_ordering_time(u.p, u.ot),
                                                             now()) END AS at
                              FROM (SELECT coalesce(u.dk, webhook_inbox_ordering_key(u.p, u.ok)) AS key) k) o
            ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING w.source_scope, w.event_id
            $q$ USING p_scopes, p_ids, p_types, p_payloads, p_raws, p_statuses, p_errors, p_headers, p_order_specs,
                      p_order_paths, p_keys, p_times, p_traces;
        RETURN;
    END IF;
    -- The shard's statement, prepared once per session (the name holds the table's OID: a shard
    -- moved away and back is prepared again; one per shard this node holds; whether it is, read
    -- from the session's setting: webhook_inbox_prepared, db/functions/claim_dispatch.sql). EXECUTE
    -- of a prepared statement takes no $n: the arrays go as literals (each payload printed and
    -- read again: still cheaper than planning the statement at every call, measured).
    stmt := 'webhook_inbox_citus_receive_' || shard::oid;
    IF NOT webhook_inbox_prepared(stmt) THEN
        PERFORM webhook_inbox_prepare_once(stmt, 'text[], text[], text[], jsonb[], bytea[], text[], text[], jsonb[], text[], text[], text[]',
            format($q$
            INSERT INTO %s AS w (source_scope, event_id, event_type, payload, raw_body, status, last_error, processed_at,
                                 request_headers, ordering_key, ordering_at, next_attempt_at, trace_context)
            SELECT u.s, u.e, u.t, u.p, u.r, u.st, u.le, CASE WHEN u.st = 'quarantined' THEN now() END, u.h, u.dk,
                   CASE WHEN u.dk IS NOT NULL THEN coalesce(to_timestamp(u.da::float8), now()) END,
                   least(now(), CASE WHEN u.dk IS NOT NULL THEN coalesce(to_timestamp(u.da::float8), now()) END),
                   CASE WHEN octet_length(u.tc) = 55
                             AND u.tc ~ '^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}' THEN u.tc END
              FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS u(s, e, t, p, r, st, le, h, dk, da, tc)
            ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING w.source_scope, w.event_id
            $q$, shard));
    END IF;
    RETURN QUERY EXECUTE format('EXECUTE %I(%L, %L, %L, %L, %L, %L, %L, %L, %L, %L, %L)', stmt, p_scopes, p_ids, p_types,
                                p_payloads, p_raws, p_statuses, p_errors, p_headers, p_keys, p_times, p_traces);
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_receive(text[], text[], text[], jsonb[], bytea[], text[], text[], jsonb[], text[],
                                                text[], text[], text[], text[]) IS
    'Citus: the gem''s receipt batch (its arrays) on the node holding the shard, into the shard''s table under the shard''s metadata lock (the table owner only); else the INSERT on webhook_inbox through Citus. RETURNING the keys inserted.';
