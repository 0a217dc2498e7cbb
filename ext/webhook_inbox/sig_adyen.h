/* sig_adyen.h - Adyen's standard (payment) webhooks (struct wi_provider.custom of "adyen"). */
#ifndef WI_SIG_ADYEN_H
#define WI_SIG_ADYEN_H

#include "sig.h"

/* Verifies a JSON body {"notificationItems":[{"NotificationRequestItem":{...}}, ...]}: every
 * item's additionalData.hmacSignature (base64 HMAC-SHA256 under the hex HMAC key) must sign
 * pspReference:originalReference:merchantAccountCode:merchantReference:amount.value:
 * amount.currency:eventCode:success (a missing field signs as empty), or the delivery is
 * refused. The delivery is one event: with one item its id is
 * "pspReference:eventCode:success" (ev->id_copy), else the body's SHA-256; the type is the
 * eventCode all items share (ev->type_copy), else none. No time is signed. The contract of
 * wi_sig_verify, called after its size and secret checks. */
int wi_sig_adyen(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                 struct wi_sig_event *ev, struct wi_err *err);

#endif
