-- 029_route_names.sql - schema version 29: a route names its handlers by name, resolved on the
-- node that runs them. `handler` and `batch_handler` are regprocs, OIDs; the routes are a
-- reference table on Citus, a copy on every node, and a copy keeps the OIDs it was written
-- with: a worker whose functions Citus created again (start_metadata_sync_to_node,
-- citus_activate_node) or a worker added (citus_add_node: the copy arrives by binary COPY,
-- with another node's OIDs) held OIDs that named nothing there, and every event of its shards
-- failed (42601) until quarantined. handler_name and batch_handler_name hold each one's
-- schema-qualified name ('public.handle_order'); the dispatch resolves them on its node
-- (to_regproc, once per batch and type) and refuses, uncharged, when one is missing there
-- (WIH01, functions/claim_dispatch.sql).
-- The regproc columns stay what writers write and readers read (add_webhook_inbox_route,
-- db/schema.rb and structure.sql dumps, the doctor, hand-written INSERTs): the trigger
-- webhook_inbox_routes_names (functions/triggers.sql) fills a name from its regproc on the
-- node that resolves the write, unless the write names it (a copy to a new node does).
-- Idempotent: safe to re-run. On Citus the columns reach every node's copy; the names are
-- filled here from the coordinator's resolution, each row written with constants.
-- Additive: webhook_inbox_schema_min_worker() stays 4 (a sidecar calls the same functions).

ALTER TABLE webhook_inbox_routes ADD COLUMN IF NOT EXISTS handler_name text;
ALTER TABLE webhook_inbox_routes ADD COLUMN IF NOT EXISTS batch_handler_name text; -- NULL: no batch handler
COMMENT ON COLUMN webhook_inbox_routes.handler_name IS
    'The handler''s schema-qualified name, resolved on the node that runs it (to_regproc); filled from handler by the trigger webhook_inbox_routes_names when a write leaves it out.';
COMMENT ON COLUMN webhook_inbox_routes.batch_handler_name IS
    'The batch handler''s schema-qualified name (as handler_name), or NULL when the route has none.';

-- The existing routes' names, from this node's OIDs, written as constants (on Citus each
-- node's copy gets the coordinator's names, whatever OIDs it holds). A regproc that names no
-- function here stops the migration: such a route never ran.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT x.event_type, h.name AS handler_name, b.name AS batch_handler_name,
               x.handler::oid AS handler_oid, x.batch_handler::oid AS batch_oid
          FROM webhook_inbox_routes x
          LEFT JOIN LATERAL (SELECT format('%I.%I', n.nspname, p.proname) AS name FROM pg_proc p
                               JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = x.handler::oid) h ON true
          LEFT JOIN LATERAL (SELECT format('%I.%I', n.nspname, p.proname) AS name FROM pg_proc p
                               JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = x.batch_handler::oid) b ON true
         WHERE x.handler_name IS NULL OR (x.batch_handler IS NOT NULL AND x.batch_handler_name IS NULL)
         ORDER BY x.event_type
    LOOP
        IF r.handler_name IS NULL OR (r.batch_oid IS NOT NULL AND r.batch_handler_name IS NULL) THEN
            RAISE EXCEPTION 'webhook_inbox: the route % names a function that does not exist (OID %)', r.event_type,
                  CASE WHEN r.handler_name IS NULL THEN r.handler_oid ELSE r.batch_oid END
                  USING ERRCODE = '42883', HINT = 'Create the function, or delete the route, then migrate again.';
        END IF;
        EXECUTE format('UPDATE webhook_inbox_routes SET handler_name = %L, batch_handler_name = %L WHERE event_type = %L',
                       r.handler_name, r.batch_handler_name, r.event_type);
    END LOOP;
END
$$;
ALTER TABLE webhook_inbox_routes ALTER COLUMN handler_name SET NOT NULL;
