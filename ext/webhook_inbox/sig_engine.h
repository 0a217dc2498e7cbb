/* sig_engine.h - what sig.c shares with a provider's custom scheme (sig_didit.c): the
 * verifier's layout and the engine's steps. Not part of the public API (sig.h is). */
#ifndef WI_SIG_ENGINE_H
#define WI_SIG_ENGINE_H

#include "hmac.h"
#include "jwt.h"
#include "pkey.h"
#include "sig.h"

#define WI_SIG_MAX_CANDIDATES 16 /* signatures considered per request; more are ignored */
#define WI_SIG_MAX_PK_CANDIDATES 4 /* of which public-key ones: each costs a verification */
#define WI_SIG_MAX_PARTS 16
#define WI_SIG_MAX_TOKENS 15
#define WI_SIG_SIG_MAX (WI_PKEY_SIG_MAX > WI_HMAC_MAX ? WI_PKEY_SIG_MAX : WI_HMAC_MAX)

enum wi_tok_kind { WI_TOK_LIT, WI_TOK_TS, WI_TOK_ID, WI_TOK_BODY, WI_TOK_URL, WI_TOK_METHOD, WI_TOK_PARAMS };

struct wi_tok {
    enum wi_tok_kind kind;
    struct wi_slice lit; /* WI_TOK_LIT: slice of the template */
};

/* One configured secret, reduced to what verifies: an HMAC key state or a public key. */
struct wi_sig_key {
    int version;              /* index into p.versions */
    struct wi_hmac_key *hmac; /* HMAC versions, else NULL */
    struct wi_pkey *pk;       /* public-key versions, else NULL */
    char kid[WI_JWT_KID_MAX + 1]; /* WI_KEY_JWK: the key's kid, WI_KEY_CERT: the certificate's
                                     id, WI_KEY_PAIR: the public key; or "" */
    char account[WI_JWT_KID_MAX + 1]; /* WI_KEY_CERT: PayPal's webhook id, or "" */
    int64_t not_before, not_after;    /* WI_KEY_CERT: the certificate's validity (unix s) */
    unsigned char digest[32]; /* WI_KEY_CREDENTIALS: SHA-256 of "user:password" (wiped on free) */
    int has_digest;
};

/* Invariant: p is the provider entry (for "hmac", a copy whose strings point at the owned
 * copies below); tokens[] is p.tmpl parsed; names[] the header slots read. */
struct wi_sig_verifier {
    struct wi_sig_config cfg;
    struct wi_provider p;
    char *prefix, *sig_header, *ts_header, *id_header, *tmpl; /* "hmac": owned copies */
    struct wi_tok tokens[WI_SIG_MAX_TOKENS];
    size_t ntokens;
    int signs_url, signs_method, signs_params; /* tokens[] holds {url}, {method}, {params} */
    struct wi_sig_key *keys;
    size_t nkeys, capkeys;
    size_t nsecrets; /* secrets added: one key each, or one per version with alg_slot */
    const char *names[WI_SIG_MAX_HEADERS];
    size_t nnames;
};

/* Signatures offered for one signed content, decoded to bytes. */
struct wi_sig_group {
    struct wi_slice parts[WI_SIG_MAX_PARTS];
    size_t nparts;
    unsigned char sig[WI_SIG_MAX_CANDIDATES][WI_SIG_SIG_MAX];
    size_t len[WI_SIG_MAX_CANDIDATES];
    int version[WI_SIG_MAX_CANDIDATES];
    size_t nsig, npk;
};

/* Decodes one offered signature of the given version into g; ignores it when it has the
 * wrong shape for the version's algorithm. Returns 1 when it was added. */
int wi_sig_offer(const struct wi_sig_verifier *v, struct wi_sig_group *g, struct wi_slice s,
                 enum wi_sig_encoding enc, int version);

/* 1 when some secret signs g's content as one of g's signatures (*key: the first such
 * secret's index; key may be NULL), 0 when none, -1 on a crypto failure. HMACs are
 * compared in constant time. */
int wi_sig_match(const struct wi_sig_verifier *v, const struct wi_sig_group *g, size_t *key,
                 struct wi_err *err);

/* 0 when ts is within the tolerance of req->now, else -1 (WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE). */
int wi_sig_check_time(const struct wi_sig_verifier *v, const struct wi_sig_request *req, int64_t ts,
                      struct wi_err *err);

/* -1 (WI_SIG_E_SIGNATURE_MISMATCH) with the usual message. */
int wi_sig_mismatch(struct wi_err *err);

/* 0 when no field of f[0..n) occurred twice at the top level, else -1 (WI_SIG_E_DUPLICATE_KEY):
 * the inbox would store the first value while jsonb, and so every handler, keeps the last. */
int wi_sig_unique(const struct wi_json_field *f, size_t n, struct wi_err *err);

/* A body field's value as unix seconds (a number, or a string decoded the way the signed
 * forms decode it). Returns 0, or -1 (WI_SIG_E_MALFORMED_TIMESTAMP). */
int wi_sig_body_ts(const struct wi_json_field *f, int64_t *ts, struct wi_err *err);

/* Fills ev's id (unless already set), type (unless the entry reads it from a header) and
 * *ts from the entry's body fields (id_fields, type_fields, ts_field; "a.b" paths). Returns
 * 0, or -1 (WI_SIG_E_DUPLICATE_KEY). */
int wi_sig_body_fields(const struct wi_sig_verifier *v, struct wi_slice body, struct wi_sig_event *ev,
                       struct wi_json_field *ts, struct wi_err *err);

/* Reads into *out the field at path ("a" or "a.b": field b of object a) of the JSON object in
 * text. Returns 0, or -1 (WI_SIG_E_DUPLICATE_KEY) when a key on the path occurs twice. */
int wi_sig_field_at(struct wi_slice text, const char *path, struct wi_json_field *out, struct wi_err *err);

/* Fills ev->body_sha256 with the hex SHA-256 of c. */
int wi_sig_signed_sha256(struct wi_slice c, struct wi_sig_event *ev, struct wi_err *err);

/* h trimmed, or absent when empty. */
struct wi_slice wi_sig_present(struct wi_slice h);

#endif
