/* jwt.c - strict JWS compact parsing (three base64url parts, header alg/kid, claims as JSON)
 * and EC P-256 JWKs as DER keys. Signatures are checked by the caller (sig_jwt.c). */
#include "jwt.h"

#include <string.h>
#include "hmac.h"
#include "json.h"

long wi_b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    /* wi_b64_decode takes both alphabets and optional padding; a JWS part has neither '+',
     * '/' nor '=' (RFC 7515 section 2), so that each token has one spelling */
    for (size_t i = 0; i < n; i++)
        if (s[i] == '+' || s[i] == '/' || s[i] == '=') return -1;
    return wi_b64_decode(s, n, out, cap);
}

/* 1 when text (after leading whitespace) starts an object. */
static int is_object(const char *p, size_t n)
{
    while (n && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++, n--;
    return n && *p == '{';
}

/* A plain (unescaped, unduplicated) string field, or absent; -1 when present otherwise. */
static int plain_string(const struct wi_json_field *f)
{
    if (f->kind == WI_JSON_ABSENT) return 0;
    return f->kind == WI_JSON_STRING && !f->escaped && !f->duplicate ? 1 : -1;
}

int wi_jwt_parse(const char *s, size_t n, const char *alg, struct wi_jwt *out, struct wi_err *err)
{
    const char *d1 = memchr(s, '.', n), *d2, *end = s + n;
    struct wi_json_field f[3] = {{.name = "alg"}, {.name = "kid"}, {.name = "crit"}};
    long hn, cn, sn;

    memset(out, 0, sizeof *out);
    if (!d1 || !(d2 = memchr(d1 + 1, '.', (size_t)(end - d1 - 1))) || memchr(d2 + 1, '.', (size_t)(end - d2 - 1)))
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token is not three dot-separated parts");
    if (d1 == s || d2 == d1 + 1 || d2 + 1 == end)
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token has an empty part");
    hn = wi_b64url_decode(s, (size_t)(d1 - s), (unsigned char *)out->header, sizeof out->header);
    cn = wi_b64url_decode(d1 + 1, (size_t)(d2 - d1 - 1), (unsigned char *)out->claims, sizeof out->claims);
    sn = wi_b64url_decode(d2 + 1, (size_t)(end - d2 - 1), out->sig, sizeof out->sig);
    if (hn <= 0 || cn <= 0 || sn <= 0)
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token part is not unpadded base64url (or too long)");
    out->header_n = (size_t)hn, out->claims_n = (size_t)cn, out->sig_n = (size_t)sn;
    if (!is_object(out->header, out->header_n) ||
        wi_json_scan(out->header, out->header_n, 0, f, 3, NULL, NULL))
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token header is not a JSON object");
    if (plain_string(&f[0]) != 1 || plain_string(&f[1]) < 0)
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token header needs one plain alg string (and at most one kid)");
    if (f[2].kind != WI_JSON_ABSENT)
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token header has crit: no extension is supported");
    if (f[1].kind && f[1].value.n > WI_JWT_KID_MAX)
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token kid is longer than %d bytes", WI_JWT_KID_MAX);
    out->alg = f[0].value;
    if (f[1].kind) out->kid = f[1].value;
    if (out->alg.n != strlen(alg) || memcmp(out->alg.p, alg, out->alg.n))
        return wi_err_set(err, WI_JWT_E_ALG, "token alg is not %s", alg);
    if (!is_object(out->claims, out->claims_n) || wi_json_scan(out->claims, out->claims_n, 0, NULL, 0, NULL, NULL))
        return wi_err_set(err, WI_JWT_E_MALFORMED, "token claims are not a JSON object");
    out->signing_input = (struct wi_slice){s, (size_t)(d2 - s)};
    return 0;
}

long wi_jwt_jwk_p256(const char *s, size_t n, unsigned char *der, size_t cap, char *kid, struct wi_err *err)
{
    /* SubjectPublicKeyInfo { id-ecPublicKey, prime256v1 } BIT STRING { 04 || x || y } */
    static const unsigned char spki[] = {0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01,
                                         0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04};
    struct wi_json_field f[6] = {{.name = "kty"}, {.name = "crv"}, {.name = "x"}, {.name = "y"}, {.name = "kid"}, {.name = "alg"}};
    static const char *const want[] = {"EC", "P-256"};
    unsigned char xy[64];

    kid[0] = '\0';
    if (cap < sizeof spki + 64 || !is_object(s, n) || wi_json_scan(s, n, 0, f, 6, NULL, NULL))
        return wi_err_set(err, WI_ERR_ARG, "not a JWK (a JSON object)");
    for (int i = 0; i < 6; i++)
        if (plain_string(&f[i]) < 0 || (i < 4 && plain_string(&f[i]) != 1))
            return wi_err_set(err, WI_ERR_ARG, "a P-256 JWK needs kty, crv, x and y strings (kid, alg optional)");
    for (int i = 0; i < 2; i++)
        if (f[i].value.n != strlen(want[i]) || memcmp(f[i].value.p, want[i], f[i].value.n))
            return wi_err_set(err, WI_ERR_ARG, "the JWK is not kty EC, crv P-256");
    if (f[5].kind && (f[5].value.n != 5 || memcmp(f[5].value.p, "ES256", 5)))
        return wi_err_set(err, WI_ERR_ARG, "the JWK's alg is not ES256");
    if (wi_b64url_decode(f[2].value.p, f[2].value.n, xy, 32) != 32 ||
        wi_b64url_decode(f[3].value.p, f[3].value.n, xy + 32, 32) != 32)
        return wi_err_set(err, WI_ERR_ARG, "the JWK's x and y are not 32 bytes of base64url each");
    if (f[4].kind) {
        if (!f[4].value.n || f[4].value.n > WI_JWT_KID_MAX)
            return wi_err_set(err, WI_ERR_ARG, "the JWK's kid is empty or longer than %d bytes", WI_JWT_KID_MAX);
        memcpy(kid, f[4].value.p, f[4].value.n);
        kid[f[4].value.n] = '\0';
    }
    memcpy(der, spki, sizeof spki);
    memcpy(der + sizeof spki, xy, 64);
    return (long)(sizeof spki + 64);
}
