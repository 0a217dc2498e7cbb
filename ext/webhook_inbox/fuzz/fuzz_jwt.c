/* fuzz_jwt.c - libFuzzer entry point for the JWT parser and the P-256 JWK reader (jwt.c):
 * the first byte picks the expected alg; the rest is parsed as a token and as a JWK. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../jwt.h"

static int inside(struct wi_slice s, const char *lo, const char *hi)
{
    return !s.p || (s.p >= lo && s.p + s.n <= hi);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct wi_jwt t; /* large: not on the stack */
    unsigned char der[128];
    char kid[WI_JWT_KID_MAX + 1];
    struct wi_err err;
    if (size < 1) return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (wi_jwt_parse(s, n, data[0] & 1 ? "ES256" : "HS256", &t, &err) == 0) {
        if (t.signing_input.p != s || t.signing_input.n >= n) abort();
        if (!inside(t.alg, t.header, t.header + t.header_n) || !inside(t.kid, t.header, t.header + t.header_n)) abort();
        if (t.kid.p && t.kid.n > WI_JWT_KID_MAX) abort();
        if (!t.sig_n || t.sig_n > sizeof t.sig || t.claims_n > sizeof t.claims) abort();
    } else if ((err.code != WI_JWT_E_MALFORMED && err.code != WI_JWT_E_ALG) || !err.msg[0]) {
        abort();
    }
    long r = wi_jwt_jwk_p256(s, n, der, sizeof der, kid, &err);
    if (r != -1 && r != 91) abort();
    if (r == -1 && (err.code != WI_ERR_ARG || !err.msg[0])) abort();
    if (strlen(kid) > WI_JWT_KID_MAX) abort();
    if (wi_b64url_decode(s, n, der, sizeof der) > (long)sizeof der) abort();
    return 0;
}
