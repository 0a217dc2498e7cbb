/* sig_mailgun.h - Mailgun's scheme, its signature inside the JSON body (struct
 * wi_provider.custom of "mailgun"). */
#ifndef WI_SIG_MAILGUN_H
#define WI_SIG_MAILGUN_H

#include "sig.h"

/* Verifies a body {"signature":{"timestamp","token","signature"},"event-data":{...}}: the
 * HMAC-SHA256 hex of timestamp + token under the signing key. The event id is the token
 * (signed; Mailgun asks for tokens to be cached against replay), the time the timestamp;
 * event-data is not covered by the signature. The contract of wi_sig_verify, called after
 * its size and secret checks. */
int wi_sig_mailgun(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                   struct wi_sig_event *ev, struct wi_err *err);

#endif
