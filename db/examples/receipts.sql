-- receipts.sql - an external side effect done right (load after orders.sql).
-- When a payment is recorded, the same transaction records a business operation
-- ("send the receipt for payment pi_..."), keyed by the payment, not by the event. A separate
-- sender (spec/support/receipt_sender.rb is a reference) leases it, calls the external API with
-- the operation id as its idempotency key, and saves the API's answer. If the sender dies
-- after the API succeeded but before saving, the next attempt repeats the call with the same
-- key and the API answers with the original result: one receipt, reconciled. Idempotent.

CREATE TABLE IF NOT EXISTS receipt_deliveries (
    operation_id text        PRIMARY KEY,
    payment_id   text        NOT NULL,
    tenant_id    text        NOT NULL,
    order_id     text        NOT NULL,
    status       text        NOT NULL DEFAULT 'pending'
                 CONSTRAINT receipt_deliveries_status_check CHECK (status IN ('pending', 'sent')),
    attempts     integer     NOT NULL DEFAULT 0,
    leased_until timestamptz,
    leased_by    text,
    external_id  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz
);
COMMENT ON TABLE receipt_deliveries IS
    'Receipts to send through an external API, one per payment; operation_id is the API idempotency key.';
COMMENT ON COLUMN receipt_deliveries.operation_id IS '''receipt:'' || payment_id: the same payment can never produce a second receipt.';
COMMENT ON COLUMN receipt_deliveries.leased_until IS
    'A sender owns the row until then (no row lock is held while the external API is called); an expired lease may be taken again.';
COMMENT ON COLUMN receipt_deliveries.leased_by IS 'Random id of the sender holding the lease; the save checks it.';
COMMENT ON COLUMN receipt_deliveries.external_id IS 'The API''s id for the receipt, saved after the call.';

CREATE OR REPLACE FUNCTION receipt_deliveries_on_payment() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO receipt_deliveries (operation_id, payment_id, tenant_id, order_id)
    VALUES ('receipt:' || NEW.payment_id, NEW.payment_id, NEW.tenant_id, NEW.order_id)
    ON CONFLICT (operation_id) DO NOTHING;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION receipt_deliveries_on_payment() IS 'Records the receipt operation in the transaction that records the payment.';

DROP TRIGGER IF EXISTS receipt_deliveries_on_payment ON payments;
CREATE TRIGGER receipt_deliveries_on_payment AFTER INSERT ON payments
    FOR EACH ROW EXECUTE FUNCTION receipt_deliveries_on_payment();
