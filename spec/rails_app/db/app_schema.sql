-- app_schema.sql - the Rails app's own tables (the inbox schema comes from the gem's db/*.sql).
CREATE TABLE IF NOT EXISTS webhook_events (
    id         bigserial PRIMARY KEY,
    event_id   text NOT NULL UNIQUE,
    event_type text,
    payload    jsonb NOT NULL,
    created_at timestamp(6) NOT NULL,
    updated_at timestamp(6) NOT NULL
);
COMMENT ON TABLE webhook_events IS 'Baseline controller storage, like the Didit article (unique event_id).';

CREATE TABLE IF NOT EXISTS tx_effects (
    id         bigserial PRIMARY KEY,
    event_id   text NOT NULL,
    created_at timestamp(6) NOT NULL,
    updated_at timestamp(6) NOT NULL
);
COMMENT ON TABLE tx_effects IS 'Business writes committed with the inbox row (transactional inbox spec).';
