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

CREATE TABLE IF NOT EXISTS effect_runs (
    id           bigserial PRIMARY KEY,
    operation_id text NOT NULL,
    payment_id   text,
    created_at   timestamp(6) NOT NULL,
    updated_at   timestamp(6) NOT NULL
);
COMMENT ON TABLE effect_runs IS 'One row per committed run of the receive_effect block (no unique key: a second run would show).';
CREATE SEQUENCE IF NOT EXISTS effect_block_calls;
COMMENT ON SEQUENCE effect_block_calls IS 'Every call of the receive_effect block, committed or not (sequences ignore rollbacks).';
