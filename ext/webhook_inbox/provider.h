/* provider.h - providers as data: every webhook sender is one struct wi_provider entry
 * (providers.c) saying which headers it sends, what it signs, with which algorithm and key
 * form, where the event's id, type and time come from, its tolerance and the challenge it
 * expects answered. sig.c is the one engine that reads an entry. Pure C, no Ruby. */
#ifndef WI_PROVIDER_H
#define WI_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#define WI_SIG_MAX_HEADERS 10
#define WI_NO_SLOT (-1)

enum wi_sig_encoding { WI_SIG_HEX, WI_SIG_BASE64 };

enum wi_alg {
    WI_ALG_HMAC_SHA1, WI_ALG_HMAC_SHA256, WI_ALG_HMAC_SHA512, WI_ALG_ED25519, WI_ALG_ECDSA_P256,
    WI_ALG_HTTP_BASIC, /* no signature: HTTP Basic credentials (sig_basic.c) */
    WI_ALG_RSA_SHA1,   /* RSA PKCS#1 v1.5 over SHA-1 (Paddle Classic, sig_paddle.c) */
    WI_ALG_RSA_SHA256  /* RSA PKCS#1 v1.5 over SHA-256 (PayPal, sig_paypal.c) */
};

/* What a configured secret is. */
enum wi_key_form {
    WI_KEY_RAW,     /* its bytes are the HMAC key */
    WI_KEY_WHSEC,   /* base64 after an optional "whsec_" (Standard Webhooks) */
    WI_KEY_HEX,     /* hex of a raw public key (Discord's application public key), or of an
                       HMAC key (Adyen's) */
    WI_KEY_BASE64,  /* base64 of a raw public key (after key_prefix, e.g. "whpk_") */
    WI_KEY_B64_DER, /* base64 of a DER SubjectPublicKeyInfo (SendGrid's verification key) */
    WI_KEY_JWK,     /* an EC P-256 JWK (JSON), with its kid (Plaid's webhook verification keys) */
    WI_KEY_CREDENTIALS, /* "user:password" (HTTP Basic); only its SHA-256 is kept */
    WI_KEY_PEM,         /* a PEM public key, as is */
    WI_KEY_PAIR,        /* "public_key:private_key" (Braintree): the public key is kept as the
                           key's name, SHA-1(private_key) is the HMAC key */
    WI_KEY_CERT         /* "WEBHOOK_ID:CERT_ID:<PEM X.509 certificate>" (PayPal): the key is the
                           certificate's RSA key, named by CERT_ID, for that webhook id */
};

/* How the signature header is laid out. */
enum wi_layout {
    WI_LAYOUT_ONE,  /* one signature, after prefix */
    WI_LAYOUT_KV,   /* "t=<ts>,v1=<sig>,v1=<sig>": items split on kv_sep, '=' inside */
    WI_LAYOUT_LIST  /* "v1,<sig> v1a,<sig>": items split on ' ', ',' inside */
};

/* A request the provider expects answered instead of stored (see wi_sig_event.challenge). */
enum wi_challenge {
    WI_CHALLENGE_NONE,
    WI_CHALLENGE_DISCORD_PING, /* body "type":1 -> {"type":1} */
    WI_CHALLENGE_SLACK_URL,    /* "type":"url_verification" -> {"challenge":<its challenge>} */
    WI_CHALLENGE_ZOOM_URL,     /* "event":"endpoint.url_validation" -> {"plainToken":..,
                                  "encryptedToken": hex HMAC-SHA256(secret, plainToken)} */
    WI_CHALLENGE_BRAINTREE_GET /* a GET ?bt_challenge=<hex>, not a delivery: answered by the
                                  gem through wi_sig_braintree_challenge, never by wi_sig_verify */
};

/* One kind of signature a provider sends. A secret is for the first version whose
 * key_prefix it starts with, else for the first version without a key_prefix. */
struct wi_sig_version {
    const char *tag;        /* its name in a KV or LIST header ("v1", "h1"); NULL for ONE */
    enum wi_alg alg;
    enum wi_key_form key;
    const char *key_prefix; /* e.g. "whpk_", or NULL */
};

struct wi_sig_verifier;
struct wi_sig_request;
struct wi_sig_event;
struct wi_err;

/* One provider. Slots index headers[]; slot 0 of an entry without custom is not special:
 * sig_slot names the signature header. Invariants (checked by the unit tests for every
 * entry): tmpl signs {body} or {params} once; a ts_slot is signed by tmpl ({timestamp}) or kv_ts is
 * set; an id from a header is trusted only when tmpl signs {id} (else the default event
 * id is the body's SHA-256, see id_signed). */
struct wi_provider {
    const char *name;  /* Verifier.new(:name) */
    const char *title; /* shown in the README's provider table */
    const char *headers[WI_SIG_MAX_HEADERS]; /* slot names: lowercase, '-' separated */
    int alt_offset;    /* > 0: slots [alt_offset, 2*alt_offset) repeat [0, alt_offset) under
                          other names (svix-*), read when none of the first ones is present */
    int sig_slot;
    int alg_slot;         /* > 0: the header whose "algorithm=" item (','-separated "k=v")
                             names, in any case, the version that signs (Twilio's
                             X-Twilio-Webhooks-Signature-Settings); absent, empty or without the
                             item: versions[0]; a name no version has is refused. Each secret
                             is then a key of every version. 0: none */
    int sig_count;        /* > 1: slots [sig_slot, sig_slot + sig_count) are each a signature
                             header (DocuSign's X-DocuSign-Signature-1..N); any may match */
    enum wi_layout layout;
    char kv_sep;          /* KV: ',' or ';' */
    const char *kv_ts;    /* KV: key of the timestamp item ("t") */
    const char *prefix;   /* ONE: text before the signature ("sha256="), or NULL */
    int prefix_optional;  /* the prefix may be left out (Mollie's SDK strips it when present) */
    enum wi_sig_encoding enc;
    int hex_any_case;     /* HEX: upper-case digits are accepted too (Discord's SDK decodes the
                             hex); else only lowercase, as the SDKs that compare the string */
    struct wi_sig_version versions[2]; /* versions[1].tag == NULL: one version */
    const char *tmpl;     /* signed content: literal text with {timestamp}, {id}, {body}, and
                             {url} (the public URL called), {method} (the request method),
                             {params} (the form body as Twilio signs it: wi_form_sorted) */
    const char *url_hash_param; /* {params}: a query parameter of the signed URL that, when
                                   present, carries the hex SHA-256 of the body (Twilio's
                                   bodySHA256 for JSON bodies); {params} is then empty */
    int url_ports;        /* {url} is also tried with its scheme's default port added or
                             removed (Twilio signs either form) */
    const char *url_unescape; /* characters whose %XX escapes in {url} are decoded before
                                 signing (HubSpot v3) */
    int ts_slot;          /* header holding the timestamp, or WI_NO_SLOT */
    const char *ts_field; /* or the body's top-level field holding it (signed with the body) */
    int ts_ms;            /* the timestamp counts milliseconds */
    int id_slots[2];      /* headers the id may come from, the first present wins */
    int id_required;      /* a missing id header is WI_SIG_E_MISSING_ID (custom schemes: the
                             id field is required, there is no SHA-256 fallback) */
    int type_slot;        /* header holding the event type, or WI_NO_SLOT */
    const char *id_fields[3];   /* else the body's top-level fields, first present wins; a
                                   "a.b" path reads field b of object a */
    const char *type_fields[3];
    int type_numbers;     /* a number in a type field is the type too (Discord "type":1) */
    int64_t tolerance;    /* default seconds either way; -1: the provider sends no time */
    enum wi_challenge challenge;
    const char *sig_field; /* the signature is this body field ("a.b"), not a header (Mailgun) */
    const char *jwt_claim; /* JWT schemes (custom wi_sig_jwt): the claim carrying the hex
                              SHA-256 of the body; the token's iat is the time */
    const char *content;  /* README: the signed content in words, when tmpl does not say it */
    const char *order_key;  /* per-object ordering: the body paths naming the object an event is
                               about, "a.b" paths, ',' between parts, '|' between alternatives
                               (db/014: webhook_inbox_ordering_key); NULL: unordered */
    const char *order_time; /* the body path of the provider's event time (a number), or NULL */
    const char *identity; /* README: the event id / type in words, when the fields do not say it */
    /* A scheme too irregular for the fields above (Didit); NULL for the rest. Same
     * contract as wi_sig_verify, called after the size and secret checks. */
    int (*custom)(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                  struct wi_sig_event *ev, struct wi_err *err);
};

/* The entry named name (NUL-terminated), or NULL. */
const struct wi_provider *wi_provider_find(const char *name);

/* Entry i of the table (0 <= i < wi_provider_count()), in README order. */
const struct wi_provider *wi_provider_at(size_t i);
size_t wi_provider_count(void);

/* 1 when the entry's event id is covered by its signature: from a header tmpl signs as
 * {id}, or from the body; 0 when it comes from an unsigned header (GitHub, Shopify). */
int wi_provider_id_signed(const struct wi_provider *p);

#endif
