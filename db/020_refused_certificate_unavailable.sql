-- 020_refused_certificate_unavailable.sql - schema version 20: a kept refused delivery can say
-- certificate_unavailable. A :paypal endpoint with fetch_certificates: answers a delivery
-- whose certificate it could not fetch 503 + Retry-After (reason certificate_unavailable);
-- keep_refused kept it as unknown_key, the only near reason 011's CHECK allowed. The CHECK
-- now takes certificate_unavailable too, and the gem keeps the true reason on a schema at 20
-- or later (on an older one still unknown_key: WebhookInbox::Refused). Reverify treats it as
-- any kept row: verified again, with the certificate fetched then.
-- Idempotent: safe to re-run. Applied after 001..019; it depends on none of 012..019.
--
-- Redefines no function. Additive: webhook_inbox_schema_min_worker() stays 4 (the sidecar
-- never reads this table).
-- 1.0: the functions this file defined are in db/functions/ (their current form only).

-- Widened, never narrowed: a constraint that takes certificate_unavailable already (this file
-- re-run, or a later one widened it further) is left alone. Dropped and added in one ALTER
-- TABLE, NOT VALID: the ACCESS EXCLUSIVE lock lasts no longer than the catalog change, with
-- no scan of the table (the file is one transaction, so a VALIDATE here would scan under that
-- lock, holding the keeper's writes). Every row it holds met 011's narrower CHECK, so none
-- breaks this one; new and updated rows are checked as with any constraint. To mark it
-- validated (a scan under SHARE UPDATE EXCLUSIVE: writes go on), run at any time:
--   ALTER TABLE webhook_inbox_refused VALIDATE CONSTRAINT webhook_inbox_refused_reason_check;
-- webhook_inbox_refused stays a local table on a Citus coordinator (db/citus leaves it alone).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'webhook_inbox_refused'::regclass
                      AND conname = 'webhook_inbox_refused_reason_check'
                      AND pg_get_constraintdef(oid) LIKE '%''certificate_unavailable''%') THEN
        ALTER TABLE webhook_inbox_refused
            DROP CONSTRAINT IF EXISTS webhook_inbox_refused_reason_check,
            ADD CONSTRAINT webhook_inbox_refused_reason_check
                CHECK (reason IN ('signature_mismatch', 'no_secret', 'unknown_key', 'certificate_unavailable')) NOT VALID;
    END IF;
END
$$;

COMMENT ON TABLE webhook_inbox_refused IS
    'Deliveries an endpoint with keep_refused refused for a signature or secret mismatch (401), or for a PayPal certificate it could not fetch (503): unverified bytes, never processed. Bounded per endpoint (webhook_inbox_keep_refused); reverify moves the ones that verify with the current secrets, checked at received_at, into webhook_inbox.';
COMMENT ON COLUMN webhook_inbox_refused.reason IS
    'Why it was refused: signature_mismatch (no secret signs it), no_secret (none configured), unknown_key (a key id not configured, or PayPal has no certificate at its URL), certificate_unavailable (db/020: PayPal''s certificate could not be fetched; answered 503, PayPal retries; kept as unknown_key before v20). Reverify verifies every reason again.';
