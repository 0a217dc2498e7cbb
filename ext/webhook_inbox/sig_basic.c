/* sig_basic.c - Postmark's webhooks carry no signature: the endpoint's HTTP Basic credentials
 * are checked instead (constant time, over SHA-256 digests so that lengths leak nothing). */
#include "sig_basic.h"

#include <openssl/crypto.h>
#include <string.h>
#include <strings.h>
#include "sig_engine.h"

int wi_sig_basic(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                 struct wi_sig_event *ev, struct wi_err *err)
{
    struct wi_slice h = wi_sig_present(req->hdr[0]);
    unsigned char cred[512], d[32];
    struct wi_json_field tsf;
    int found = 0;
    long n;

    if (!h.p) return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "%s header is missing", v->p.headers[0]);
    if (h.n <= 6 || strncasecmp(h.p, "Basic ", 6))
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "%s header is not Basic credentials", v->p.headers[0]);
    h = wi_sig_present((struct wi_slice){h.p + 6, h.n - 6});
    if (!h.p || (n = wi_b64_decode(h.p, h.n, cred, sizeof cred)) <= 0 || !memchr(cred, ':', (size_t)n)) {
        OPENSSL_cleanse(cred, sizeof cred);
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "Basic credentials are not base64 of user:password");
    }
    int rc = wi_sha256(cred, (size_t)n, d, err);
    OPENSSL_cleanse(cred, sizeof cred);
    if (rc) return -1;
    for (size_t k = 0; k < v->nkeys; k++) /* every key compared: no early exit */
        found |= v->keys[k].has_digest && CRYPTO_memcmp(d, v->keys[k].digest, 32) == 0;
    OPENSSL_cleanse(d, sizeof d);
    if (!found) return wi_err_set(err, WI_SIG_E_SIGNATURE_MISMATCH, "the Basic credentials are not this endpoint's");
    return wi_sig_body_fields(v, req->body, ev, &tsf, err);
}
