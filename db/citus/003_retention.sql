-- citus/003_retention.sql - retention on a Citus cluster (`prune`, `run --retain`).
-- Idempotent: safe to re-run.
--
-- The sidecar's batch statements (sidecar/src/retention/prune.c) lock their rows FOR UPDATE SKIP
-- LOCKED over the whole table, which Citus refuses across shards. On a Citus layout the
-- sidecar calls webhook_inbox_citus_prune() under the same statement names instead
-- (sidecar/src/citus/citus.c): the same batch, one source_scope (one shard) at a time.

-- The SQL routes' once-markers (db/013: webhook_inbox_effects_received rows keyed by their
-- event) of these events of scope p_scope, deleted with them (a reference table: every
-- node's copy, so only when there are some). Returns how many events (not markers).
CREATE OR REPLACE FUNCTION webhook_inbox_citus_forget_markers(p_scope text, p_event_ids text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM webhook_inbox_effects_received r
                WHERE r.source_scope = p_scope AND r.source_event_id = ANY (coalesce(p_event_ids, '{}'))) THEN
        DELETE FROM webhook_inbox_effects_received r
         WHERE r.source_scope = p_scope AND r.source_event_id = ANY (p_event_ids);
    END IF;
    RETURN coalesce(cardinality(p_event_ids), 0);
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_forget_markers(text, text[]) IS
    'Citus: delete the SQL routes'' once-markers of these events of one scope (retention); returns the number of events.';

-- One batch of p_kind, at most p_limit rows, of events received (effects processed) more
-- than p_age_s seconds ago, in scope p_scope (NULL: any). p_kind:
--   'prune'    delete done events                      (wi_prune: keys not kept)
--   'keep'     empty done events, keep their keys      (wi_prune_keep, from v8; and from
--              v13 their SQL once-markers: wi_prune_keep_markers)
--   'forget'   delete emptied events pruned before     (wi_forget; wi_forget_markers)
--   'effects'  delete delivered effects and their received rows (wi_prune_effects; a Ruby
--              run stays while its event is not done: it is the run's once-marker)
-- The events' SQL once-markers (db/013) go with them, as in prune.c's forms from v13.
-- Returns how many went. The scopes come from the oldest candidates (one read of every
-- shard, no lock); each scope's rows are then locked and changed on their shard.
CREATE OR REPLACE FUNCTION webhook_inbox_citus_prune(p_kind text, p_age_s double precision, p_scope text, p_limit integer)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    before timestamptz := now() - p_age_s * interval '1 second';
    s      text;
    n      bigint := 0;
    k      bigint;
    ops    text[];
    ids    text[];
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('prune', 'keep', 'forget', 'effects') THEN
        RAISE EXCEPTION 'webhook_inbox_citus_prune: kind must be prune, keep, forget or effects, not %', coalesce(p_kind, 'NULL')
              USING ERRCODE = '22023';
    END IF;
    FOR s IN
        SELECT DISTINCT c.scope FROM (
            SELECT w.source_scope AS scope FROM webhook_inbox w
             WHERE p_kind IN ('prune', 'keep') AND w.status = 'done' AND w.received_at < before
               AND (p_kind = 'prune' OR w.pruned_at IS NULL) AND (p_scope IS NULL OR w.source_scope = p_scope)
             LIMIT p_limit) c
        UNION
        SELECT DISTINCT c.scope FROM (
            SELECT w.source_scope AS scope FROM webhook_inbox w
             WHERE p_kind = 'forget' AND w.pruned_at IS NOT NULL AND w.pruned_at < before
               AND (p_scope IS NULL OR w.source_scope = p_scope)
             LIMIT p_limit) c
        UNION
        SELECT DISTINCT c.scope FROM (
            SELECT o.source_scope AS scope FROM webhook_inbox_outbox o
             WHERE p_kind = 'effects' AND o.status = 'delivered' AND o.processed_at < before
               AND (p_scope IS NULL OR o.source_scope = p_scope)
             LIMIT p_limit) c
    LOOP
        IF p_kind = 'prune' THEN
            WITH doomed AS (
                SELECT w.source_scope, w.event_id FROM webhook_inbox w
                 WHERE w.source_scope = s AND w.status = 'done' AND w.received_at < before
                 LIMIT p_limit - n FOR UPDATE SKIP LOCKED
            ), gone AS (
                DELETE FROM webhook_inbox w USING doomed d
                 WHERE w.source_scope = s AND w.source_scope = d.source_scope AND w.event_id = d.event_id
                RETURNING w.event_id)
            SELECT array_agg(g.event_id) INTO ids FROM gone g;
            k := webhook_inbox_citus_forget_markers(s, ids);
        ELSIF p_kind = 'keep' THEN
            WITH doomed AS (
                SELECT w.source_scope, w.event_id FROM webhook_inbox w
                 WHERE w.source_scope = s AND w.status = 'done' AND w.pruned_at IS NULL AND w.received_at < before
                 LIMIT p_limit - n FOR UPDATE SKIP LOCKED
            ), gone AS (
                UPDATE webhook_inbox w SET payload = NULL, raw_body = NULL, request_headers = NULL, attempt_log = '[]',
                       outcome = NULL, last_error = NULL, pruned_at = now()
                  FROM doomed d
                 WHERE w.source_scope = s AND w.source_scope = d.source_scope AND w.event_id = d.event_id
                RETURNING w.event_id)
            SELECT array_agg(g.event_id) INTO ids FROM gone g;
            k := webhook_inbox_citus_forget_markers(s, ids);
        ELSIF p_kind = 'forget' THEN
            WITH doomed AS (
                SELECT w.source_scope, w.event_id FROM webhook_inbox w
                 WHERE w.source_scope = s AND w.pruned_at IS NOT NULL AND w.pruned_at < before
                 LIMIT p_limit - n FOR UPDATE SKIP LOCKED
            ), gone AS (
                DELETE FROM webhook_inbox w USING doomed d
                 WHERE w.source_scope = s AND w.source_scope = d.source_scope AND w.event_id = d.event_id
                RETURNING w.event_id)
            SELECT array_agg(g.event_id) INTO ids FROM gone g;
            k := webhook_inbox_citus_forget_markers(s, ids);
        ELSE
            WITH doomed AS (
                SELECT o.operation_id FROM webhook_inbox_outbox o
                 WHERE o.source_scope = s AND o.status = 'delivered' AND o.processed_at < before
                   AND (o.destination <> 'ruby' OR NOT EXISTS (SELECT 1 FROM webhook_inbox w
                        WHERE w.source_scope = s AND w.event_id = o.source_event_id AND w.status <> 'done'))
                 LIMIT p_limit - n FOR UPDATE OF o SKIP LOCKED
            ), gone AS (
                DELETE FROM webhook_inbox_outbox o USING doomed d
                 WHERE o.source_scope = s AND o.operation_id = d.operation_id
                RETURNING o.operation_id
            )
            SELECT array_agg(g.operation_id) INTO ops FROM gone g;
            -- The app's dedupe rows of those effects (a reference table: every node's copy).
            DELETE FROM webhook_inbox_effects_received r WHERE r.operation_id = ANY (coalesce(ops, '{}'));
            k := coalesce(cardinality(ops), 0);
        END IF;
        n := n + k;
        EXIT WHEN n >= p_limit;
    END LOOP;
    RETURN n;
END
$$;
COMMENT ON FUNCTION webhook_inbox_citus_prune(text, double precision, text, integer) IS
    'Citus: one retention batch (prune, keep, forget or effects) of at most p_limit rows older than p_age_s seconds, one source scope at a time; returns how many went.';
