-- receipts.sql - an external side effect done right, through the outbox (load after orders.sql;
-- needs schema v6, db/006_outbox.sql). When a payment is recorded, the same transaction emits
-- the business operation "send the receipt for payment pi_...", keyed by the payment, not by
-- the event: a second event for the same payment is the same operation. The sidecar delivers
-- it to the destination named 'receipts':
--
--   WEBHOOK_INBOX_DEST_RECEIPTS_TOKEN=sk_live_... \
--     webhook-inbox-sidecar run --destination receipts=https://api.example.com/v1/receipts
--
-- It POSTs the payload with Idempotency-Key: receipt:pi_... and saves the API's answer (its
-- receipt id lands in webhook_inbox_outbox.provider_id). If the sidecar dies after the API
-- succeeded but before saving, the next attempt repeats the call with the same key and the
-- API answers with the original result: one receipt, reconciled. Rolled back with the
-- payment when the handler fails. Idempotent.

CREATE OR REPLACE FUNCTION receipts_on_payment() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_inbox_emit('receipt:' || NEW.payment_id, 'receipts',
                               jsonb_build_object('payment_id', NEW.payment_id, 'tenant_id', NEW.tenant_id,
                                                  'order_id', NEW.order_id, 'amount', NEW.amount,
                                                  'currency', NEW.currency));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION receipts_on_payment() IS
    'Emits the receipt operation (destination ''receipts'', Idempotency-Key ''receipt:'' || payment_id) in the transaction that records the payment.';

DROP TRIGGER IF EXISTS receipts_on_payment ON payments;
CREATE TRIGGER receipts_on_payment AFTER INSERT ON payments
    FOR EACH ROW EXECUTE FUNCTION receipts_on_payment();

-- The pre-outbox version of this example kept its own table and sender: stop feeding it.
DROP TRIGGER IF EXISTS receipt_deliveries_on_payment ON payments;
DROP FUNCTION IF EXISTS receipt_deliveries_on_payment();
