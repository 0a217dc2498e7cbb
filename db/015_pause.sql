-- 015_pause.sql - schema version 15: pause, resume and rate limits. An operator pauses a
-- route (an event type pattern: exact, 'prefix*' or '*'), a scope or a destination (an
-- outbox destination, or 'ruby' for the Ruby handlers' runs) from the dashboard, the CLI
-- (`webhook-inbox-sidecar pause|resume`) or rake. A paused route's or scope's events are
-- stored and wait, pending and never charged an attempt; a paused destination's effects stay
-- pending, never claimed. Resume makes them due again, optionally at a rate (events/s per
-- route or destination) enforced across all sidecars: one GCRA row per rule in
-- webhook_inbox_flow, advanced in the claiming transaction; an event over the rate is given
-- the next free slot as its next_attempt_at (and keeps it in rate_slot_at), so it comes back
-- exactly when due and runs then without taking another slot. Every change is an action in
-- webhook_inbox_actions (pause, resume). Idempotent: safe to re-run. Applied after 001..014.
--
-- Redefines: webhook_inbox_run_event (009's body, with the gate first),
-- webhook_inbox_outbox_claim (006), webhook_inbox_outbox_next_due (006),
-- webhook_inbox_ruby_claim (009, the claim of Ruby workers before v13) and
-- webhook_inbox_ruby_start (013's body, with the same pause check). Widens webhook_inbox_actions_action_check (as 008/009/011).
-- Additive: webhook_inbox_schema_min_worker() stays 4. A sidecar of any version >= 4 calls
-- webhook_inbox_run_event(), whose new results 'paused' and 'throttled' leave the row
-- pending, uncharged (older sidecars count them nowhere, as 009's 'handed').
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

CREATE TABLE IF NOT EXISTS webhook_inbox_flow (
    kind       text             NOT NULL
               CONSTRAINT webhook_inbox_flow_kind_check CHECK (kind IN ('route', 'scope', 'destination')),
    target     text             NOT NULL
               CONSTRAINT webhook_inbox_flow_target_check CHECK (target <> '' AND length(target) <= 255),
    paused     boolean          NOT NULL DEFAULT false,
    rate       double precision
               CONSTRAINT webhook_inbox_flow_rate_check CHECK (rate > 0 AND rate <= 100000),
    tat        timestamptz      NOT NULL DEFAULT now(),
    changed_at timestamptz      NOT NULL DEFAULT now(),
    changed_by text             NOT NULL,
    PRIMARY KEY (kind, target),
    CONSTRAINT webhook_inbox_flow_rate_kind_check CHECK (rate IS NULL OR kind IN ('route', 'destination')),
    CONSTRAINT webhook_inbox_flow_pattern_check CHECK (kind <> 'route' OR strpos(left(target, -1), '*') = 0)
);
COMMENT ON TABLE webhook_inbox_flow IS
    'Pause and rate limit rules, one per route (event type pattern), scope or destination; written by webhook_inbox_pause/webhook_inbox_resume only (each change audited in webhook_inbox_actions). A row that is neither paused nor rate limited is deleted.';
COMMENT ON COLUMN webhook_inbox_flow.target IS 'route: an exact event type, ''prefix*'' or ''*''; scope: a source_scope; destination: an outbox destination name, or ''ruby'' (the Ruby handlers'' runs).';
COMMENT ON COLUMN webhook_inbox_flow.rate IS 'events/s (routes, destinations), over all sidecars; NULL: unlimited.';
COMMENT ON COLUMN webhook_inbox_flow.tat IS 'GCRA theoretical arrival time: the next free slot; each event or effect let through takes one and moves it 1/rate on.';

ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS held_at timestamptz;
ALTER TABLE webhook_inbox ADD COLUMN IF NOT EXISTS rate_slot_at timestamptz;
COMMENT ON COLUMN webhook_inbox.held_at IS 'When a paused route or scope took this pending row off the claim (next_attempt_at far away); resume clears it and makes the row due. NULL otherwise.';
COMMENT ON COLUMN webhook_inbox.rate_slot_at IS 'The rate limit slot this pending row holds (its next_attempt_at): it runs then without taking another. NULL otherwise.';

-- Audit: pause and resume. Widened, never narrowed: the actions admitted now are kept and
-- the two added, so a file of another branch that admits more before or after this one keeps its own.
DO $$
DECLARE
    def  text;
    have text[];
BEGIN
    SELECT pg_get_constraintdef(oid) INTO def FROM pg_constraint
     WHERE conrelid = 'webhook_inbox_actions'::regclass AND conname = 'webhook_inbox_actions_action_check';
    IF def IS NOT NULL AND def LIKE '%''pause''%' AND def LIKE '%''resume''%' THEN
        RETURN;
    END IF;
    SELECT array_agg(DISTINCT m[1]) INTO have FROM regexp_matches(coalesce(def, ''), '''([a-z_]+)''', 'g') m;
    have := ARRAY(SELECT DISTINCT a FROM unnest(coalesce(have, '{}') || ARRAY['requeue', 'replay', 'pause', 'resume']) a ORDER BY a);
    ALTER TABLE webhook_inbox_actions DROP CONSTRAINT IF EXISTS webhook_inbox_actions_action_check;
    EXECUTE format('ALTER TABLE webhook_inbox_actions ADD CONSTRAINT webhook_inbox_actions_action_check CHECK (action IN (%s))',
                   (SELECT string_agg(quote_literal(a), ', ') FROM unnest(have) a));
END
$$;

COMMENT ON COLUMN webhook_inbox_actions.action IS
    'requeue: quarantined -> pending; replay: done -> pending (e.g. after fixing a handler); prune: done events emptied (and delivered effects deleted) by `webhook-inbox-sidecar prune` or rake webhook_inbox:prune; reverify: refused deliveries of an endpoint verified again, the ones that verify stored in the inbox; retire_handler (db/009): a Ruby handler''s registrations removed by an operator (filter handler, event_type, runs_retired; count: registrations removed); pause / resume (db/015): a route, scope or destination paused or resumed (filter kind, target, rate; count: pending held / made due).';
