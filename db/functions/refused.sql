-- functions/refused.sql - what the receiver refused: kept refused deliveries and the per-minute rejection counts.
-- Repeatable: every migrate applies it after the numbered files (CREATE OR REPLACE; a signature
-- that changes is dropped here first). The only definition of each function below.
-- Bodies are checked when called, so the files may go in any order (a runner applies each
-- file as one transaction: one string, or inside BEGIN; `psql -1 -f` works too).
SET LOCAL check_function_bodies = off;

-- One flush: p_counts = [[scope, reason, minute (ISO 8601), count], ...] (jsonb, so a client
-- sends it as one parameter).
CREATE OR REPLACE FUNCTION webhook_inbox_record_rejections(p_counts jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO webhook_inbox_rejections AS r (source_scope, reason, minute, count)
    SELECT e->>0, left(e->>1, 100), date_trunc('minute', (e->>2)::timestamptz), sum((e->>3)::bigint)
      FROM jsonb_array_elements(p_counts) e
     GROUP BY 1, 2, 3
    ON CONFLICT (source_scope, reason, minute) DO UPDATE SET count = r.count + EXCLUDED.count;
    DELETE FROM webhook_inbox_rejections WHERE minute < now() - interval '7 days';
$$;
COMMENT ON FUNCTION webhook_inbox_record_rejections(jsonb) IS
    'Adds one flush of in-process rejection counts ([[scope, reason, minute, count], ...]) and forgets rows older than 7 days.';

-- Keeps refused deliveries within their endpoint's bounds. rows: a JSON array of objects
-- {endpoint, source_scope, provider, reason, body (hex), request_headers (object or null),
-- request_env (object), received_at, max_count, max_bytes, max_age_s}. Per row, under a
-- transaction-scoped advisory lock of its endpoint (concurrent writers cannot pass a bound
-- together): rows older than max_age_s go, then the row is kept only if the endpoint holds
-- fewer than max_count rows and the bytes fit max_bytes. Past a bound new rows are not kept
-- (the oldest are the ones a provider stops retrying first; a flood of forged deliveries
-- cannot push out the real ones kept before it). Returns one row per endpoint: kept, and
-- not kept because a bound was reached.
CREATE OR REPLACE FUNCTION webhook_inbox_keep_refused(p_rows jsonb)
RETURNS TABLE (endpoint text, kept integer, full_count integer)
LANGUAGE plpgsql AS $$
DECLARE
    r       jsonb;
    n       bigint;
    b       bigint;
    v_body  bytea;
    ep      text;
    did     jsonb := '{}';
BEGIN
    FOR r IN SELECT value FROM jsonb_array_elements(p_rows) LOOP
        ep := r->>'endpoint';
        v_body := decode(r->>'body', 'hex');
        PERFORM pg_advisory_xact_lock(hashtextextended('webhook_inbox_refused:' || ep, 0));
        DELETE FROM webhook_inbox_refused f
         WHERE f.endpoint = ep AND f.received_at < now() - make_interval(secs => (r->>'max_age_s')::double precision);
        SELECT count(*), coalesce(sum(octet_length(f.body)), 0) INTO n, b FROM webhook_inbox_refused f WHERE f.endpoint = ep;
        IF n < (r->>'max_count')::bigint AND b + octet_length(v_body) <= (r->>'max_bytes')::bigint THEN
            INSERT INTO webhook_inbox_refused (endpoint, source_scope, provider, reason, body, request_headers, request_env, received_at)
            VALUES (ep, r->>'source_scope', r->>'provider', r->>'reason', v_body,
                    CASE WHEN jsonb_typeof(r->'request_headers') = 'object' THEN r->'request_headers' END,
                    coalesce(r->'request_env', '{}'), (r->>'received_at')::timestamptz);
            did := jsonb_set(did, ARRAY[ep], jsonb_build_array(coalesce((did#>>ARRAY[ep, '0'])::int, 0) + 1,
                                                               coalesce((did#>>ARRAY[ep, '1'])::int, 0)));
        ELSE
            did := jsonb_set(did, ARRAY[ep], jsonb_build_array(coalesce((did#>>ARRAY[ep, '0'])::int, 0),
                                                               coalesce((did#>>ARRAY[ep, '1'])::int, 0) + 1));
        END IF;
    END LOOP;
    RETURN QUERY SELECT d.key, (d.value->>0)::int, (d.value->>1)::int FROM jsonb_each(did) d;
END
$$;
COMMENT ON FUNCTION webhook_inbox_keep_refused(jsonb) IS
    'Keeps a batch of refused deliveries within each endpoint''s bounds (count, bytes, age; past a bound new ones are not kept); returns per endpoint how many were kept and how many found it full.';
