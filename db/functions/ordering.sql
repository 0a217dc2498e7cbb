-- functions/ordering.sql - per-object ordering: the key and time a receipt derives, strict routes, the key lock.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

CREATE OR REPLACE FUNCTION webhook_inbox_route_strict(p_event_type text) RETURNS boolean
LANGUAGE sql STABLE AS $$ SELECT coalesce((webhook_inbox_route_match(p_event_type)).strict, false) $$;
COMMENT ON FUNCTION webhook_inbox_route_strict(text) IS
    'Whether the route an event type takes is strict (a quarantined predecessor holds the event); false when unrouted.';

-- The advisory lock id of one (source_scope, ordering_key): 64 bits of hash (two keys that
-- share one only take turns). Inlined into the claims' statements.
CREATE OR REPLACE FUNCTION webhook_inbox_ordering_lock_id(p_scope text, p_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT hashtextextended(p_scope || E'\n' || p_key, 21) $$;
COMMENT ON FUNCTION webhook_inbox_ordering_lock_id(text, text) IS
    'Per-object ordering: the transaction-level advisory lock id a transaction holds while it runs an event of this (source_scope, ordering_key) (db/021).';

-- 014's contract: the spec is paths separated by ',', each "a.b.c" or alternatives "a.b|c.d"
-- (the first present wins); the key is the one value, or for several paths a JSON array of
-- their values; NULL when a path is missing or the spec is empty; past 200 bytes "sha256:"
-- and its hex digest. STRICT: an unordered receipt (spec NULL) makes no call. Never raises.
CREATE OR REPLACE FUNCTION webhook_inbox_ordering_key(p_payload jsonb, p_spec text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    key text;
BEGIN
    IF p_spec <> '' AND strpos(p_spec, ',') = 0 AND strpos(p_spec, '|') = 0 THEN
        key := p_payload #>> string_to_array(p_spec, '.');
    ELSE
        SELECT CASE WHEN bool_and(k.v IS NOT NULL) THEN
                    CASE WHEN count(*) = 1 THEN min(k.v) ELSE jsonb_agg(k.v ORDER BY k.i)::text END
               END
          INTO key
          FROM (SELECT s.i, (SELECT p_payload #>> string_to_array(a.path, '.')
                               FROM unnest(string_to_array(s.alts, '|')) WITH ORDINALITY AS a(path, j)
                              WHERE p_payload #>> string_to_array(a.path, '.') IS NOT NULL
                              ORDER BY a.j LIMIT 1) AS v
                  FROM unnest(string_to_array(p_spec, ',')) WITH ORDINALITY AS s(alts, i)) k;
    END IF;
    IF octet_length(key) > 200 THEN
        RETURN 'sha256:' || encode(sha256(convert_to(key, 'UTF8')), 'hex');
    END IF;
    RETURN key;
END
$$;
COMMENT ON FUNCTION webhook_inbox_ordering_key(jsonb, text) IS
    'The ordering key of a payload for a spec ("data.object.id", "repository.id,issue.number|pull_request.number"): the value, a JSON array of the values, or NULL when a path is missing. Called by the receiver''s INSERT.';

-- 014's contract: a JSON number of seconds at the path, or of milliseconds above 1e11; NULL
-- for anything else. One expression, inlined into the INSERT that calls it.
CREATE OR REPLACE FUNCTION webhook_inbox_ordering_time(p_payload jsonb, p_path text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(p_payload #> string_to_array(p_path, '.')) IS DISTINCT FROM 'number' THEN NULL
                WHEN (p_payload #>> string_to_array(p_path, '.'))::numeric < 0
                  OR (p_payload #>> string_to_array(p_path, '.'))::numeric >= 1e14 THEN NULL
                WHEN (p_payload #>> string_to_array(p_path, '.'))::numeric >= 1e11
                THEN to_timestamp(((p_payload #>> string_to_array(p_path, '.'))::numeric / 1000)::float8)
                ELSE to_timestamp((p_payload #>> string_to_array(p_path, '.'))::numeric::float8) END
$$;
COMMENT ON FUNCTION webhook_inbox_ordering_time(jsonb, text) IS
    'The event time at a payload path: a number of seconds (milliseconds above 1e11), else NULL. Called by the receiver''s INSERT.';
