/* sig_braintree.h - Braintree's form webhooks (struct wi_provider.custom of "braintree"). */
#ifndef WI_SIG_BRAINTREE_H
#define WI_SIG_BRAINTREE_H

#include "sig.h"

/* Verifies a form body with bt_signature ("public_key|hex HMAC-SHA1" pairs joined by '&')
 * over bt_payload (base64 of the notification's XML, signed as sent, or with a newline
 * added, as Braintree's SDKs accept). A pair counts only for the secret whose public key it
 * names; the HMAC key is SHA-1(private key). The event id is the SHA-256 of the payload,
 * the type the notification's <kind> (copied into ev->type_copy). The contract of
 * wi_sig_verify, called after its size and secret checks. */
int wi_sig_braintree(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                     struct wi_sig_event *ev, struct wi_err *err);

#endif
