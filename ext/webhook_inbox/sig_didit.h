/* sig_didit.h - Didit's custom scheme (struct wi_provider.custom of the "didit" entry). */
#ifndef WI_SIG_DIDIT_H
#define WI_SIG_DIDIT_H

#include "sig.h"

/* Verifies a Didit delivery (headers: x-signature, x-signature-v2, x-signature-simple);
 * the contract of wi_sig_verify, called after its size and secret checks. */
int wi_sig_didit(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                 struct wi_sig_event *ev, struct wi_err *err);

#endif
