/* event_id.h - the key an event id is stored under: the id as it is, up to WI_EVENT_ID_MAX
 * bytes; a longer one (signed, so the provider's own) as "sha256:" + the lowercase hex
 * SHA-256 of its bytes (WI_EVENT_ID_HASHED_LEN bytes), so the provider's retries of it are
 * duplicates. The one definition of that rule: the receiver (WebhookInbox::Inbox.
 * stored_event_id, Receiver#bound_signed_id) and the sidecar's reconcile (wi_rc_stored_ids)
 * both call it, so a recovered event and its delivery share one key. Pure C (libcrypto),
 * no ruby.h: shared with the sidecar. */
#ifndef WI_EVENT_ID_H
#define WI_EVENT_ID_H

#include <stddef.h>

#define WI_EVENT_ID_MAX 255 /* bytes of webhook_inbox.event_id kept as sent (Inbox::MAX_TEXT_BYTES) */
#define WI_EVENT_ID_STR_(x) #x
#define WI_EVENT_ID_STR(x) WI_EVENT_ID_STR_(x)
#define WI_EVENT_ID_MAX_TEXT WI_EVENT_ID_STR(WI_EVENT_ID_MAX) /* "255", for SQL text */
#define WI_EVENT_ID_PREFIX "sha256:"
#define WI_EVENT_ID_HASHED_LEN (sizeof WI_EVENT_ID_PREFIX - 1 + 64)

/* 1 when an id of n bytes is stored hashed (n > WI_EVENT_ID_MAX), else 0. */
int wi_event_id_hashed(size_t n);

/* The hashed form of id[0..n) (any bytes), NUL-terminated, into out
 * (WI_EVENT_ID_HASHED_LEN + 1 bytes). Returns 0, or -1 when libcrypto fails (out is then ""). */
int wi_event_id_hash(const char *id, size_t n, char *out);

#endif
