/* jwt.h - a small, strict JWS compact (JWT) parser for webhook tokens (Vonage HS256, Plaid
 * ES256): base64url parts, the header's alg and kid, the claims decoded for the caller to
 * scan; and P-256 JWKs turned into the DER key pkey.c takes. Pure C, no allocation. */
#ifndef WI_JWT_H
#define WI_JWT_H

#include <stddef.h>
#include "sig_slice.h"
#include "wi_err.h"

enum {
    WI_JWT_E_MALFORMED = 140, /* not three base64url parts of a JSON header and claims */
    WI_JWT_E_ALG              /* the header's alg is not the one configured ("none" never is) */
};

#define WI_JWT_HEADER_MAX 512  /* decoded header bytes */
#define WI_JWT_CLAIMS_MAX 4096 /* decoded claims bytes */
#define WI_JWT_SIG_MAX 128     /* decoded signature bytes */
#define WI_JWT_KID_MAX 128

/* A parsed token. Invariant: header and claims are valid JSON objects; alg and kid are
 * slices of header without escapes; signing_input borrows the caller's token. */
struct wi_jwt {
    struct wi_slice signing_input; /* "<header>.<claims>" as received: what the signature covers */
    struct wi_slice alg;           /* header "alg" */
    struct wi_slice kid;           /* header "kid", or p == NULL */
    char header[WI_JWT_HEADER_MAX];
    size_t header_n;
    char claims[WI_JWT_CLAIMS_MAX];
    size_t claims_n;
    unsigned char sig[WI_JWT_SIG_MAX];
    size_t sig_n;
};

/* Parses token s[0..n) whose header must name alg (e.g. "HS256"). Refuses padding, any
 * character outside the base64url alphabet, non-zero trailing bits, a header with "crit",
 * escapes or a duplicate in alg/kid, a kid longer than WI_JWT_KID_MAX, and claims that are
 * not a JSON object. Returns 0, or -1 and fills *err (WI_JWT_E_*; the message never quotes
 * the token). Borrows s; out->signing_input points into it. */
int wi_jwt_parse(const char *s, size_t n, const char *alg, struct wi_jwt *out, struct wi_err *err);

/* Decodes base64url s[0..n) (no padding, zero trailing bits) into out (cap bytes). Returns
 * the length, or -1. */
long wi_b64url_decode(const char *s, size_t n, unsigned char *out, size_t cap);

/* The DER SubjectPublicKeyInfo (91 bytes) of an EC P-256 JWK s[0..n) ({"kty":"EC","crv":
 * "P-256","x":..,"y":..}, optional "kid", and "alg" ES256 when present) into der (cap >= 91),
 * its kid NUL-terminated into kid (WI_JWT_KID_MAX + 1 bytes; "" when none). Returns the DER
 * length, or -1 and fills *err (WI_ERR_ARG; never quotes the key). The point itself is
 * checked by OpenSSL when the key is loaded. */
long wi_jwt_jwk_p256(const char *s, size_t n, unsigned char *der, size_t cap, char *kid, struct wi_err *err);

#endif
