/* sig.h - webhook signature verification: one verifier per endpoint (scheme + secrets +
 * rules), checked against a raw body and the header values the scheme names. Pure C. */
#ifndef WI_SIG_H
#define WI_SIG_H

#include <stddef.h>
#include <stdint.h>
#include "hmac.h"
#include "json.h"
#include "provider.h"
#include "sig_slice.h"
#include "wi_err.h"

/* Verification failure codes (struct wi_err.code). */
enum {
    WI_SIG_E_MISSING_SIGNATURE = 100,
    WI_SIG_E_MALFORMED_SIGNATURE,
    WI_SIG_E_SIGNATURE_MISMATCH,
    WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE,
    WI_SIG_E_PAYLOAD_TOO_LARGE,
    WI_SIG_E_NO_SECRET,
    WI_SIG_E_MISSING_TIMESTAMP,
    WI_SIG_E_MALFORMED_TIMESTAMP,
    WI_SIG_E_MISSING_ID,
    WI_SIG_E_MALFORMED_PAYLOAD,
    WI_SIG_E_DUPLICATE_KEY, /* a top-level key the event's id, type or time is read from
                               occurs twice: jsonb keeps the last, the scan the first */
    WI_SIG_E_UNKNOWN_KEY, /* the request names a key (PayPal's certificate id) no secret holds */
    WI_SIG_E_TOO_MANY_ITEMS /* a batch delivery (Adyen) holds more items than the scheme takes */
};

#define WI_SIG_DEFAULT_TOLERANCE 300
#define WI_SIG_DEFAULT_MAX_BODY (1u << 20)

/* Construction parameters; strings are copied by wi_sig_verifier_new. */
struct wi_sig_config {
    const char *provider;     /* a wi_provider_find name: "stripe", "github", "hmac", ... */
    int64_t tolerance;        /* seconds, both directions; < 0 disables the time check */
    size_t max_body;          /* larger bodies fail with WI_SIG_E_PAYLOAD_TOO_LARGE */
    int allow_simple;         /* Didit: accept X-Signature-Simple (it signs four fields, not
                                 the body: see wi_sig_event.simple) */
    int id_from_body;         /* ignore provider ids (headers, body fields): the event id is
                                 the SHA-256 of the signed body (see wi_sig_event) */
    /* "hmac" only: */
    enum wi_hmac_alg alg;
    enum wi_sig_encoding encoding;
    const char *prefix;           /* signature prefix such as "sha256=", or NULL */
    const char *signature_header; /* header name, lowercase with '-' */
    const char *timestamp_header; /* or NULL; then template must sign {timestamp} */
    const char *id_header;        /* or NULL */
    const char *template;         /* signed content, e.g. "{timestamp}.{body}"; NULL = "{body}" */
};

/* One request: the body and the values of the headers wi_sig_verifier_headers names
 * (hdr[i].p == NULL when header i is absent). Borrowed for the duration of the call. */
struct wi_sig_request {
    struct wi_slice body;
    struct wi_slice hdr[WI_SIG_MAX_HEADERS];
    struct wi_slice url;    /* the public URL the provider called (scheme://host[:port]/path
                               [?query]) when the template signs {url}; absent: WI_ERR_ARG */
    struct wi_slice method; /* the request method when the template signs {method} */
    int64_t now; /* unix seconds */
    const _Atomic int *cancel; /* or NULL; set nonzero by another thread to abandon long work
                                  (Didit V2 canonicalization) with WI_CANON_E_INTERRUPTED */
};

/* One event of a delivery that carries several signed items (Adyen's notificationItems).
 * Slices point into the request body (text) or the event's own item block (the rest). */
struct wi_sig_item {
    struct wi_slice text; /* the item's JSON value as the body holds it */
    struct wi_slice doc;  /* the JSON document the event is stored as (sig_adyen.h) */
    struct wi_slice id;   /* its id, from its signed fields only (unescaped, not NUL-terminated) */
    struct wi_slice type; /* its type (unescaped), or n == 0: none */
};

/* What a verified request says about itself. Slices point into the body or a header, or
 * (Adyen) into the event's item block. */
struct wi_sig_event {
    struct wi_slice id;   /* event id; p == NULL: use body_sha256 */
    int id_escaped;       /* id is a JSON string body with escapes (wi_json_unescape it) */
    struct wi_slice type; /* event type, or p == NULL */
    int type_escaped;
    int has_timestamp;
    int64_t timestamp;      /* signed timestamp when has_timestamp */
    char body_sha256[65];   /* when id.p == NULL: lowercase hex SHA-256 of the signed content
                               that covers the body: the raw body, or for Didit the canonical
                               form (V2) or the four-field string (Simple) that matched;
                               for a batch of items (Adyen) the SHA-256 of its sorted item ids */
    int simple;             /* Didit: only X-Signature-Simple matched. It covers no more than
                               simple_fields: the id is then always body_sha256 (of the four-
                               field string) and the rest of the body is unverified */
    struct wi_json_field simple_fields[4]; /* when simple: session_id, status, timestamp,
                                              webhook_type as the body holds them (kind
                                              ABSENT or OTHER: signed as empty) */
    enum wi_challenge challenge; /* not NONE: a verified challenge to answer, not an event */
    struct wi_slice challenge_value; /* Slack's challenge, Zoom's plainToken: a JSON string
                                        body (escapes kept) */
    char challenge_hmac[65]; /* Zoom: hex HMAC-SHA256 of the unescaped plainToken under the
                                secret that verified the request */
    char type_copy[64]; /* a type the body holds encoded (Braintree's <kind> inside base64):
                           type then points here, never into the request */
    char id_copy[160];  /* an id composed of body fields: id then points here */
    struct wi_sig_item *items; /* a batch scheme (Adyen): the delivery's distinct items, in
                                  order (nitems >= 1), each its own event; NULL for the rest.
                                  Owned by the event: wi_sig_event_release */
    size_t nitems;
};

struct wi_sig_verifier;

/* Returns a verifier without secrets for cfg->provider, or NULL and fills *err
 * (WI_ERR_ARG for an unknown provider or a bad configuration, WI_ERR_NOMEM). */
struct wi_sig_verifier *wi_sig_verifier_new(const struct wi_sig_config *cfg, struct wi_err *err);

/* Wipes every key and frees the verifier. Accepts NULL. */
void wi_sig_verifier_free(struct wi_sig_verifier *v);

/* Adds a secret (any may match: rotation), parsed here once in the form its provider entry
 * names: an HMAC key, or a public key (Ed25519, P-256). Returns 0, or -1 and fills *err
 * (WI_ERR_ARG: empty, surrounding whitespace, bad base64 or hex, not such a public key).
 * The secret bytes are not retained; only HMAC key states (wiped on free) or public keys.
 * Messages never quote the secret. */
int wi_sig_verifier_add_secret(struct wi_sig_verifier *v, const char *secret, size_t n,
                               struct wi_err *err);

/* The provider entry the verifier runs (for "hmac", the configured copy). */
const struct wi_provider *wi_sig_verifier_provider(const struct wi_sig_verifier *v);

/* Number of secrets added. */
size_t wi_sig_verifier_secret_count(const struct wi_sig_verifier *v);

/* Fills names[0..WI_SIG_MAX_HEADERS) with the lowercase, '-'-separated header names whose
 * values wi_sig_verify reads, by slot (NULL for unused slots). Returns the slot count. */
size_t wi_sig_verifier_headers(const struct wi_sig_verifier *v,
                               const char *names[WI_SIG_MAX_HEADERS]);

/* Verifies req. Returns 0 and fills *ev, or -1 and fills *err with a WI_SIG_E_* code
 * (or WI_ERR_NOMEM / WI_ERR_CRYPTO / WI_CANON_E_INTERRUPTED when req->cancel was set). The body size is checked first. Thread-safe for a
 * verifier no longer being configured. */
int wi_sig_verify(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                  struct wi_sig_event *ev, struct wi_err *err);

/* Frees what a verified event owns (its items; see wi_sig_event.items) and clears them.
 * Call it after every wi_sig_verify that returned 0; harmless on an event without items, or
 * twice. (A failed wi_sig_verify leaves nothing to release.) */
void wi_sig_event_release(struct wi_sig_event *ev);

#endif
