/* sig_adyen.h - Adyen's standard (payment) webhooks (struct wi_provider.custom of "adyen"). */
#ifndef WI_SIG_ADYEN_H
#define WI_SIG_ADYEN_H

#include "sig.h"

#define WI_SIG_ADYEN_MAX_ITEMS 64 /* notificationItems in one delivery; more: WI_SIG_E_TOO_MANY_ITEMS */

/* Verifies a JSON body {"live":"false","notificationItems":[{"NotificationRequestItem":{...}},
 * ...]}: every item's additionalData.hmacSignature (base64 HMAC-SHA256 under the hex HMAC key)
 * must sign pspReference:originalReference:merchantAccountCode:merchantReference:amount.value:
 * amount.currency:eventCode:success (a missing field signs as empty), or the delivery is
 * refused. No time is signed.
 *
 * Each item is its own event (ev->items, in delivery order; release with
 * wi_sig_event_release): its id "pspReference:eventCode:success" as signed (unescaped), or
 * with cfg.id_from_body the hex SHA-256 of its signed string; its type the eventCode; its
 * document {"live":<the body's live>,"notificationItems":[<the item's bytes>]} (no "live" when
 * the body has none), the shape of a one-item delivery. An item whose id an earlier item of
 * the delivery has is left out: [A,A] is one event. The delivery itself: with one distinct
 * item, that item's id and type; with several, ev->body_sha256 is the SHA-256 of the sorted
 * item ids (each followed by '\n') and the type the eventCode all share, else none - so
 * neither the items' order, repetition nor the body's spacing changes an id.
 *
 * Refused: more than WI_SIG_ADYEN_MAX_ITEMS items (WI_SIG_E_TOO_MANY_ITEMS, counted before
 * duplicates are left out), an empty array (WI_SIG_E_MISSING_SIGNATURE), a top-level key or
 * signed field twice (WI_SIG_E_DUPLICATE_KEY), a "live" that is not a string of at most 16
 * bytes or an array that is not JSON (WI_SIG_E_MALFORMED_PAYLOAD). The contract of
 * wi_sig_verify, called after its size and secret checks; on failure nothing is left to
 * release. */
int wi_sig_adyen(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                 struct wi_sig_event *ev, struct wi_err *err);

#endif
