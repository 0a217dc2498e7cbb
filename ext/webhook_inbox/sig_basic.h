/* sig_basic.h - HTTP Basic credentials instead of a signature (struct wi_provider.custom of
 * "postmark"). */
#ifndef WI_SIG_BASIC_H
#define WI_SIG_BASIC_H

#include "sig.h"

/* Accepts a request whose header (slot 0) is "Basic <base64 user:password>" with credentials
 * among the configured ones, compared as SHA-256 digests in constant time. This
 * authenticates the sender, not the body. The contract of wi_sig_verify, called after its
 * size and secret checks. */
int wi_sig_basic(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                 struct wi_sig_event *ev, struct wi_err *err);

#endif
