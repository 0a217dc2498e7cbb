/* jwt_sign.h - RS256 JSON Web Tokens (RFC 7519) minted the way a GitHub App authenticates
 * as itself: an RSA private key (PEM), claims iat/exp/iss, base64url without padding; the
 * token cached until it is near its exp. Pure C over OpenSSL EVP. */
#ifndef WI_JWT_SIGN_H
#define WI_JWT_SIGN_H

#include <stddef.h>
#include "wi_err.h"

#define WI_JWT_SKEW_S 60    /* iat = now - this: a provider's clock a little behind still takes it */
#define WI_JWT_LIFE_S 540   /* exp = now + this: exp - iat = 600, GitHub's most */
#define WI_JWT_RENEW_S 60   /* a token with less life than this left is minted anew */
#define WI_JWT_ISS_MAX 64
#define WI_JWT_TOKEN_MAX 2048 /* fits a 4096-bit key's signature */

struct wi_jwt_signer; /* opaque: an RSA private key, the issuer and the token last minted */

/* A signer for issuer iss (1..WI_JWT_ISS_MAX bytes of [A-Za-z0-9._-]: an App id or client
 * id) from pem[0..n): an RSA private key of at least 2048 bits, PKCS#1 or PKCS#8, its line
 * breaks real or written as the two characters \n (a one-line environment variable).
 * Returns NULL with *err (WI_ERR_ARG; the message never quotes the key). Borrows pem; a
 * copy made to undo \n is wiped before it is freed. */
struct wi_jwt_signer *wi_jwt_signer_new(const char *pem, size_t n, const char *iss, struct wi_err *err);

/* Wipes the cached token and frees; accepts NULL. */
void wi_jwt_signer_free(struct wi_jwt_signer *s);

/* The token to send at unix time now: the cached one while now < its exp - WI_JWT_RENEW_S,
 * else a new one (iat now - WI_JWT_SKEW_S, exp now + WI_JWT_LIFE_S; *minted set to 1).
 * Returns the token (NUL-terminated, owned by s, valid until the next call or the free), or
 * NULL with *err (WI_ERR_CRYPTO, WI_ERR_NOMEM). */
const char *wi_jwt_signer_token(struct wi_jwt_signer *s, long long now, int *minted, struct wi_err *err);

#endif
