-- db/examples/orders.sql - the documents' orders scenario as SQL handlers for the sidecar.
-- Idempotent: safe to re-run after db/001..003 (webhook-inbox-sidecar migrate).
--
-- Payload shapes (webhook_inbox.payload; the receiver stores the verified body as jsonb):
--
--   Stripe payment_intent.succeeded | payment_intent.processing | payment_intent.payment_failed
--     {"id": "evt_1", "type": "payment_intent.succeeded",
--      "data": {"object": {"id": "pi_1", "object": "payment_intent",
--                          "amount": 2000, "currency": "jpy", "status": "succeeded",
--                          "metadata": {"tenant_id": "t1", "order_id": "o1"}}}}
--     JSON paths: payment id  data.object.id          amount    data.object.amount (minor units)
--                 tenant      data.object.metadata.tenant_id      currency  data.object.currency
--                 order       data.object.metadata.order_id       (currency compared lower-case)
--
--   Stripe charge.refunded (full refunds only; a partial refund is quarantined for a human)
--     {"id": "evt_2", "type": "charge.refunded",
--      "data": {"object": {"id": "ch_1", "object": "charge", "payment_intent": "pi_1",
--                          "amount": 2000, "amount_refunded": 2000, "currency": "jpy",
--                          "refunded": true,
--                          "metadata": {"tenant_id": "t1", "order_id": "o1"}}}}
--
--   Didit status.updated (event_type = webhook_type)
--     {"session_id": "11111111-...", "status": "Approved", "webhook_type": "status.updated",
--      "vendor_data": "user-42", "created_at": 1700000000}
--     status: Not Started | In Progress | In Review | Approved | Declined | Abandoned | Expired
--
-- Routes (webhook_inbox_routes):
--   payment_intent.succeeded -> orders_on_payment_succeeded    (awaiting_payment -> paid)
--                               batch: orders_on_payment_succeeded_batch (schema v19)
--   payment_intent.*         -> orders_on_payment_intent_other (never moves an order; stale after paid)
--   charge.refunded          -> orders_on_charge_refunded      (paid -> refunded)
--   status.updated           -> identity_on_status_updated     (forward transitions only)
--
-- Handler outcomes: 'paid', 'duplicate', 'refunded', 'ignored: stale', 'noted: ...';
-- permanent problems call webhook_inbox_quarantine(reason) (SQLSTATE WIQ01);
-- "not yet" situations raise SQLSTATE WIR01 (any other SQLSTATE is transient too): retried.

CREATE TABLE IF NOT EXISTS orders (
    tenant_id   text        NOT NULL,
    order_id    text        NOT NULL,
    status      text        NOT NULL DEFAULT 'awaiting_payment'
                CONSTRAINT orders_status_check
                CHECK (status IN ('awaiting_payment', 'paid', 'refunded', 'canceled')),
    amount      bigint      NOT NULL,
    currency    text        NOT NULL,
    payment_id  text,
    paid_at     timestamptz,
    refunded_at timestamptz,
    PRIMARY KEY (tenant_id, order_id)
);
COMMENT ON TABLE orders IS 'Example business table: an order waits for exactly one payment of its amount and currency.';
COMMENT ON COLUMN orders.amount IS 'Expected amount in minor units; a payment must match it exactly.';
COMMENT ON COLUMN orders.payment_id IS 'The payment (Stripe PaymentIntent id) that paid this order.';
CREATE UNIQUE INDEX IF NOT EXISTS orders_payment_id_key ON orders (payment_id) WHERE payment_id IS NOT NULL;
COMMENT ON INDEX orders_payment_id_key IS 'One payment pays at most one order, whatever the event id says.';

CREATE TABLE IF NOT EXISTS payments (
    payment_id  text        PRIMARY KEY,
    tenant_id   text        NOT NULL,
    order_id    text        NOT NULL,
    amount      bigint      NOT NULL,
    currency    text        NOT NULL,
    event_id    text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE payments IS 'One row per accepted payment, keyed by the business operation id (not the event id).';

CREATE TABLE IF NOT EXISTS refunds (
    charge_id   text        PRIMARY KEY,
    payment_id  text        NOT NULL,
    tenant_id   text        NOT NULL,
    order_id    text        NOT NULL,
    amount      bigint      NOT NULL,
    currency    text        NOT NULL,
    event_id    text        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE refunds IS 'One row per applied refund, keyed by the refunded charge.';

CREATE TABLE IF NOT EXISTS order_transitions (
    id          bigserial   PRIMARY KEY,
    tenant_id   text        NOT NULL,
    order_id    text        NOT NULL,
    from_status text        NOT NULL,
    to_status   text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE order_transitions IS 'Audit: every status change of an order (filled by a trigger); tests count these.';

CREATE OR REPLACE FUNCTION orders_audit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_transitions (tenant_id, order_id, from_status, to_status)
    VALUES (NEW.tenant_id, NEW.order_id, OLD.status, NEW.status);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS orders_audit ON orders;
CREATE TRIGGER orders_audit AFTER UPDATE OF status ON orders
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION orders_audit();

-- A JSON amount as whole minor units: NULL unless a whole number below 1e18 (a numeric ->
-- bigint cast alone would round 1999.6 to 2000, and overflow on 1e30).
CREATE OR REPLACE FUNCTION orders_minor_units(v jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(v) = 'number' AND (v #>> '{}')::numeric = trunc((v #>> '{}')::numeric)
                     AND abs((v #>> '{}')::numeric) < 1e18
                THEN (v #>> '{}')::numeric::bigint END
$$;
COMMENT ON FUNCTION orders_minor_units(jsonb) IS 'Whole minor units of a JSON number, or NULL (fractional, out of range, not a number).';

-- Locks the order first: its latest committed version, and no concurrent change until the
-- caller commits. (Under READ COMMITTED an UPDATE whose snapshot saw another status would
-- simply match 0 rows; locking first makes the conditional UPDATE see the current row.)
-- Raises WIR01 (retried later) while the order does not exist yet.
CREATE OR REPLACE FUNCTION orders_lock(p_tenant text, p_order text) RETURNS orders
LANGUAGE plpgsql AS $$
DECLARE
    o orders;
BEGIN
    SELECT * INTO o FROM orders WHERE tenant_id = p_tenant AND order_id = p_order FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WIR01', MESSAGE = 'order not found yet';
    END IF;
    RETURN o;
END
$$;
COMMENT ON FUNCTION orders_lock(text, text) IS 'SELECT ... FOR UPDATE of one order; WIR01 (transient) when it does not exist yet.';

-- payment_intent.succeeded: awaiting_payment -> paid, every checked fact in the WHERE.
CREATE OR REPLACE FUNCTION orders_on_payment_succeeded(ev webhook_inbox) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    obj      jsonb  := ev.payload #> '{data,object}';
    tenant   text   := obj #>> '{metadata,tenant_id}';
    ord      text   := obj #>> '{metadata,order_id}';
    pay      text   := obj ->> 'id';
    amt      bigint;
    cur      text   := lower(obj ->> 'currency');
    o        orders;
BEGIN
    amt := orders_minor_units(obj -> 'amount');
    IF tenant IS NULL OR ord IS NULL OR pay IS NULL OR amt IS NULL OR cur IS NULL THEN
        PERFORM webhook_inbox_quarantine('malformed payment_intent: needs data.object.id, amount, currency, metadata.tenant_id, metadata.order_id');
    END IF;

    o := orders_lock(tenant, ord);

    UPDATE orders
       SET status = 'paid', payment_id = pay, paid_at = now()
     WHERE tenant_id = tenant AND order_id = ord
       AND status = 'awaiting_payment' AND amount = amt AND currency = cur
       AND NOT EXISTS (SELECT 1 FROM orders p WHERE p.payment_id = pay);
    IF FOUND THEN
        INSERT INTO payments (payment_id, tenant_id, order_id, amount, currency, event_id)
        VALUES (pay, tenant, ord, amt, cur, ev.event_id);
        RETURN 'paid';
    END IF;

    -- 0 rows is not success: decide from the locked row.
    IF o.payment_id = pay AND o.amount = amt AND o.currency = cur AND o.status IN ('paid', 'refunded') THEN
        RETURN 'duplicate';
    END IF;
    IF o.amount <> amt OR o.currency <> cur THEN
        PERFORM webhook_inbox_quarantine(format('amount/currency mismatch: order expects %s %s, payment %s has %s %s',
                                                o.amount, o.currency, pay, amt, cur));
    END IF;
    IF o.status <> 'awaiting_payment' THEN
        PERFORM webhook_inbox_quarantine(format('order is %s by payment %s; payment %s conflicts',
                                                o.status, coalesce(o.payment_id, '-'), pay));
    END IF;
    IF EXISTS (SELECT 1 FROM orders p WHERE p.payment_id = pay) THEN
        PERFORM webhook_inbox_quarantine(format('payment %s already paid another order', pay));
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'WIR01', MESSAGE = 'order changed concurrently';
END
$$;
COMMENT ON FUNCTION orders_on_payment_succeeded(webhook_inbox) IS
    'payment_intent.succeeded: paid | duplicate; quarantines mismatches; retries (WIR01) while the order does not exist.';

-- The same for a run of payment_intent.succeeded events at once (a batch handler, db/019):
-- only the common case, every event paying its awaiting order. Anything else (an order
-- missing or already paid, a mismatch, a duplicate, two events of one order or payment)
-- defers the whole run to orders_on_payment_succeeded, event by event, which decides.
-- Its plan: one index lookup per event (the order by its key, the payment's order by
-- payment_id), made once per sidecar session and right at any table size. With the default
-- settings PostgreSQL picks by the tables' size when it plans: while `orders` is small, a hash
-- join over a scan of every order, and a plan kept for the session keeps that scan as the table
-- grows (450 us per event in bench/pipeline instead of 22: the pipeline's sustained rate
-- halved). Planned at every call instead (force_custom_plan, until issue 36) it was right but
-- cost ~25 us per event in runs of 10 (the orders_audit trigger's INSERT planned per call with it).
-- So the scans and joins that read a whole table are off for its statements (a lookup by key
-- needs the index it uses: orders' primary key, orders_payment_id_key), and the one generic plan
-- is kept. These settings hold for everything it calls (the orders_audit trigger: an INSERT).
CREATE OR REPLACE FUNCTION orders_on_payment_succeeded_batch(evs webhook_inbox[]) RETURNS text[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
DECLARE
    paid integer;
BEGIN
    WITH e AS (
        SELECT x.event_id, o ->> 'id' AS pay, o #>> '{metadata,tenant_id}' AS tenant,
               o #>> '{metadata,order_id}' AS ord, orders_minor_units(o -> 'amount') AS amt,
               lower(o ->> 'currency') AS cur, count(*) OVER (PARTITION BY o ->> 'id') AS uses
          FROM unnest(evs) AS x, LATERAL (SELECT x.payload #> '{data,object}') AS p(o)),
    u AS (
        UPDATE orders SET status = 'paid', payment_id = e.pay, paid_at = now()
          FROM e
         WHERE orders.tenant_id = e.tenant AND orders.order_id = e.ord
           AND orders.status = 'awaiting_payment' AND orders.amount = e.amt AND orders.currency = e.cur
           AND NOT EXISTS (SELECT 1 FROM orders p WHERE p.payment_id = e.pay)
           AND e.uses = 1
        RETURNING e.event_id, e.pay, e.tenant, e.ord, e.amt, e.cur)
    INSERT INTO payments (payment_id, tenant_id, order_id, amount, currency, event_id)
    SELECT u.pay, u.tenant, u.ord, u.amt, u.cur, u.event_id FROM u;
    GET DIAGNOSTICS paid = ROW_COUNT;
    IF paid <> cardinality(evs) THEN
        PERFORM webhook_inbox_batch_defer('not every payment pays its awaiting order');
    END IF;
    RETURN array_fill('paid'::text, ARRAY[paid]);
END
$$;
COMMENT ON FUNCTION orders_on_payment_succeeded_batch(webhook_inbox[]) IS
    'Batch handler of payment_intent.succeeded: paid for every event, or defers them all (WIB01) to orders_on_payment_succeeded.';

-- Any other payment_intent.* (processing, payment_failed, canceled, ...): never moves an order.
CREATE OR REPLACE FUNCTION orders_on_payment_intent_other(ev webhook_inbox) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    obj    jsonb := ev.payload #> '{data,object}';
    o      orders;
BEGIN
    SELECT * INTO o FROM orders
     WHERE tenant_id = obj #>> '{metadata,tenant_id}' AND order_id = obj #>> '{metadata,order_id}';
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WIR01', MESSAGE = 'order not found yet';
    END IF;
    IF o.status <> 'awaiting_payment' THEN
        RETURN 'ignored: stale';   -- an old notification never moves state backwards
    END IF;
    RETURN 'noted: ' || ev.event_type;
END
$$;
COMMENT ON FUNCTION orders_on_payment_intent_other(webhook_inbox) IS
    'payment_intent.* other than succeeded: informational; ''ignored: stale'' once the order moved on.';

-- charge.refunded: paid -> refunded (full refund of the paying payment).
CREATE OR REPLACE FUNCTION orders_on_charge_refunded(ev webhook_inbox) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    obj      jsonb  := ev.payload #> '{data,object}';
    tenant   text   := obj #>> '{metadata,tenant_id}';
    ord      text   := obj #>> '{metadata,order_id}';
    charge   text   := obj ->> 'id';
    pay      text   := obj ->> 'payment_intent';
    refunded bigint;
    cur      text   := lower(obj ->> 'currency');
    o        orders;
BEGIN
    refunded := orders_minor_units(obj -> 'amount_refunded');
    IF tenant IS NULL OR ord IS NULL OR charge IS NULL OR pay IS NULL OR refunded IS NULL OR cur IS NULL THEN
        PERFORM webhook_inbox_quarantine('malformed charge: needs data.object.id, payment_intent, amount_refunded, currency, metadata.tenant_id, metadata.order_id');
    END IF;

    o := orders_lock(tenant, ord);

    UPDATE orders
       SET status = 'refunded', refunded_at = now()
     WHERE tenant_id = tenant AND order_id = ord
       AND status = 'paid' AND payment_id = pay AND amount = refunded AND currency = cur;
    IF FOUND THEN
        INSERT INTO refunds (charge_id, payment_id, tenant_id, order_id, amount, currency, event_id)
        VALUES (charge, pay, tenant, ord, refunded, cur, ev.event_id);
        RETURN 'refunded';
    END IF;

    IF o.status = 'refunded' AND o.payment_id = pay THEN
        RETURN 'duplicate';
    END IF;
    IF o.status = 'awaiting_payment' AND o.amount = refunded AND o.currency = cur THEN
        -- The refund overtook the payment's success event: wait for it.
        RAISE EXCEPTION USING ERRCODE = 'WIR01', MESSAGE = 'refund before payment: waiting for payment_intent.succeeded';
    END IF;
    PERFORM webhook_inbox_quarantine(format('refund of %s %s for payment %s does not match order (%s, %s %s, payment %s)',
                                            refunded, cur, pay, o.status, o.amount, o.currency, coalesce(o.payment_id, '-')));
    RETURN NULL; -- not reached
END
$$;
COMMENT ON FUNCTION orders_on_charge_refunded(webhook_inbox) IS
    'charge.refunded: refunded | duplicate; waits (WIR01) for a late payment; quarantines partial or mismatched refunds.';

-- Didit identity verification sessions.
CREATE TABLE IF NOT EXISTS identity_checks (
    session_id  text        PRIMARY KEY,
    vendor_data text,
    status      text        NOT NULL
                CONSTRAINT identity_checks_status_check
                CHECK (status IN ('Not Started', 'In Progress', 'In Review', 'Approved', 'Declined', 'Abandoned', 'Expired')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE identity_checks IS 'Example: Didit verification session state; moves forward only (identity_status_rank).';

CREATE OR REPLACE FUNCTION identity_status_rank(status text) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE status
        WHEN 'Not Started' THEN 0 WHEN 'In Progress' THEN 1 WHEN 'In Review' THEN 2
        WHEN 'Approved' THEN 3 WHEN 'Declined' THEN 3 WHEN 'Abandoned' THEN 3 WHEN 'Expired' THEN 3
    END
$$;
COMMENT ON FUNCTION identity_status_rank(text) IS 'Allowed transitions go to a strictly higher rank; rank 3 states are final.';

CREATE OR REPLACE FUNCTION identity_on_status_updated(ev webhook_inbox) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    sid    text := ev.payload ->> 'session_id';
    st     text := ev.payload ->> 'status';
    cur    text;
BEGIN
    IF coalesce(ev.payload ->> 'webhook_type', '') <> 'status.updated' THEN
        RETURN 'ignored: webhook_type';
    END IF;
    IF sid IS NULL OR identity_status_rank(st) IS NULL THEN
        PERFORM webhook_inbox_quarantine('malformed Didit status.updated: needs session_id and a known status');
    END IF;
    INSERT INTO identity_checks AS c (session_id, vendor_data, status)
    VALUES (sid, ev.payload ->> 'vendor_data', st)
    ON CONFLICT (session_id) DO UPDATE
        SET status = EXCLUDED.status, updated_at = now()
      WHERE identity_status_rank(c.status) < identity_status_rank(EXCLUDED.status)
    RETURNING c.status INTO cur;
    IF FOUND THEN
        RETURN 'status: ' || cur;
    END IF;
    SELECT status INTO cur FROM identity_checks WHERE session_id = sid;
    IF cur = st THEN
        RETURN 'duplicate';
    END IF;
    RETURN 'ignored: stale';
END
$$;
COMMENT ON FUNCTION identity_on_status_updated(webhook_inbox) IS
    'Didit status.updated: forward transitions only; the same status again is a duplicate, an older one is stale.';

INSERT INTO webhook_inbox_routes (event_type, handler) VALUES
    ('payment_intent.succeeded', 'orders_on_payment_succeeded'),
    ('payment_intent.*',         'orders_on_payment_intent_other'),
    ('charge.refunded',          'orders_on_charge_refunded'),
    ('status.updated',           'identity_on_status_updated')
ON CONFLICT (event_type) DO UPDATE SET handler = EXCLUDED.handler;
-- From schema v19 on: payment_intent.succeeded also has its batch handler.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'webhook_inbox_routes'::regclass
                                            AND attname = 'batch_handler' AND NOT attisdropped) THEN
        UPDATE webhook_inbox_routes SET batch_handler = 'orders_on_payment_succeeded_batch'
         WHERE event_type = 'payment_intent.succeeded';
    END IF;
END
$$;
