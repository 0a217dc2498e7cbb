/* sig_url.h - the parts of a signed content that come from the request rather than the
 * body: the public URL ({url}: its default-port variant, HubSpot's partial unescaping), the
 * method, Twilio's sorted form parameters ({params}) and its bodySHA256 check. Internal to
 * the engine (sig.c); pure C. */
#ifndef WI_SIG_URL_H
#define WI_SIG_URL_H

#include "sig_engine.h"

/* What one request signs besides the body. Slices point into the request or into own[],
 * which wi_sig_url_free releases. */
struct wi_sig_url_parts {
    struct wi_slice url;       /* {url} as signed */
    struct wi_slice alt;       /* the URL with its scheme's default port added or removed
                                  (entries with url_ports), or absent */
    struct wi_slice params;    /* {params}: the sorted form, or empty */
    struct wi_slice body_hash; /* the signed URL's url_hash_param value, or absent */
    char *own[3];
};

/* Fills *u for req from v's entry (all absent when the template signs no {url} or
 * {params}). Returns 0, or -1 and fills *err: WI_ERR_ARG when the template signs {url} or
 * {method} and req has none, WI_SIG_E_MALFORMED_PAYLOAD for a form body with a bad
 * %-escape, WI_ERR_NOMEM. Call wi_sig_url_free afterwards either way. */
int wi_sig_url_prepare(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                       struct wi_sig_url_parts *u, struct wi_err *err);

/* 0 when u has no body_hash or it is the hex SHA-256 of body (compared in constant time),
 * else -1 (WI_SIG_E_SIGNATURE_MISMATCH, or WI_ERR_CRYPTO). */
int wi_sig_url_check_body(const struct wi_sig_url_parts *u, struct wi_slice body, struct wi_err *err);

/* Releases u's buffers. */
void wi_sig_url_free(struct wi_sig_url_parts *u);

#endif
