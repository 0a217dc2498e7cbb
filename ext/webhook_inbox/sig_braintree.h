/* sig_braintree.h - Braintree's form webhooks (struct wi_provider.custom of "braintree"). */
#ifndef WI_SIG_BRAINTREE_H
#define WI_SIG_BRAINTREE_H

#include "jwt.h"
#include "sig.h"

/* Verifies a form body with bt_signature ("public_key|hex HMAC-SHA1" pairs joined by '&')
 * over bt_payload (base64 of the notification's XML, signed as sent, or with a newline
 * added, as Braintree's SDKs accept). A pair counts only for the secret whose public key it
 * names; the HMAC key is SHA-1(private key). The event id is the SHA-256 of the payload,
 * the type the notification's <kind> (copied into ev->type_copy). The contract of
 * wi_sig_verify, called after its size and secret checks. */
int wi_sig_braintree(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                     struct wi_sig_event *ev, struct wi_err *err);

#define WI_BT_CHALLENGE_MIN 20
#define WI_BT_CHALLENGE_MAX 32
#define WI_BT_ANSWER_MAX (WI_JWT_KID_MAX + 1 + 40 + 1) /* "public_key|hex" and its NUL */

/* The answer to the bt_challenge of Braintree's webhook URL check: "public_key|hex(HMAC-SHA1
 * of the challenge under SHA-1(private key))" for the first secret (the current pair), as the
 * SDKs' WebhookNotification.verify answers, into out (cap >= WI_BT_ANSWER_MAX, NUL-terminated).
 * challenge (borrowed, not NUL-terminated) must be WI_BT_CHALLENGE_MIN..MAX lowercase hex
 * digits, the SDKs' rule. Returns the answer's length, or -1 and fills *err
 * (WI_SIG_E_MALFORMED_PAYLOAD, WI_SIG_E_NO_SECRET; WI_ERR_ARG for another provider). */
long wi_sig_braintree_challenge(const struct wi_sig_verifier *v, struct wi_slice challenge, char *out, size_t cap,
                                struct wi_err *err);

#endif
