/* jwt_sign.c - RS256 JWTs for a GitHub App (RFC 7519, RFC 7515 compact form): the private
 * key loaded once, a token of iat/exp/iss signed with RSASSA-PKCS1-v1_5 SHA-256 and cached
 * until near its exp. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/jwt_sign.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#define SIG_MAX 512 /* a 4096-bit RSA signature; larger keys are refused */

/* Invariant: key is an RSA private key of 2048..4096 bits; iss is JSON- and URL-safe;
 * token is the token minted last, valid while exp > 0. */
struct wi_jwt_signer {
    EVP_PKEY *key;
    char iss[WI_JWT_ISS_MAX + 1];
    char token[WI_JWT_TOKEN_MAX]; /* a credential: wiped when replaced and on free */
    long long exp;                /* the token's exp claim; 0: none yet */
};

/* Refuses a passphrase prompt: an encrypted key fails to load instead of asking a tty. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

/* base64url of in[0..n) without padding into out (4 * ceil(n / 3) + 1 bytes); its length. */
static size_t b64url(const unsigned char *in, size_t n, char *out)
{
    size_t len = (size_t)EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    while (len && out[len - 1] == '=')
        len--;
    out[len] = '\0';
    for (size_t i = 0; i < len; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    return len;
}

static int iss_ok(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= WI_JWT_ISS_MAX &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* A copy of pem[0..n) with each two-character \n made a line break (*out malloc'd; its
 * length in *on). 0 or -1. */
static int unescape(const char *pem, size_t n, char **out, size_t *on)
{
    size_t k = 0;
    char *c = malloc(n + 1);
    if (!c)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (pem[i] == '\\' && i + 1 < n && pem[i + 1] == 'n') {
            c[k++] = '\n';
            i++;
        } else {
            c[k++] = pem[i];
        }
    }
    c[k] = '\0';
    *out = c;
    *on = k;
    return 0;
}

struct wi_jwt_signer *wi_jwt_signer_new(const char *pem, size_t n, const char *iss, struct wi_err *err)
{
    struct wi_jwt_signer *s = NULL;
    char *copy = NULL;
    size_t cn = 0;
    BIO *bio = NULL;
    EVP_PKEY *key = NULL;
    int bits;

    if (!iss_ok(iss)) {
        wi_err_set(err, WI_ERR_ARG, "the JWT issuer (an App id) must be 1..%d bytes of [A-Za-z0-9._-]", WI_JWT_ISS_MAX);
        goto fail;
    }
    if (n > 65536 || unescape(pem, n, &copy, &cn) < 0) {
        wi_err_set(err, n > 65536 ? WI_ERR_ARG : WI_ERR_NOMEM, n > 65536 ? "the private key is too long" : "out of memory");
        goto fail;
    }
    if (!(bio = BIO_new_mem_buf(copy, (int)cn))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (!(key = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL))) {
        wi_err_set(err, WI_ERR_ARG, "the private key is not an unencrypted PEM private key");
        goto fail;
    }
    bits = EVP_PKEY_bits(key);
    if (EVP_PKEY_base_id(key) != EVP_PKEY_RSA || bits < 2048 || EVP_PKEY_size(key) > SIG_MAX) {
        wi_err_set(err, WI_ERR_ARG, "the private key must be RSA of 2048 to 4096 bits (RS256)");
        goto fail;
    }
    if (!(s = calloc(1, sizeof *s))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s->key = key;
    snprintf(s->iss, sizeof s->iss, "%s", iss);
    BIO_free(bio);
    OPENSSL_cleanse(copy, cn);
    free(copy);
    return s;
fail:
    ERR_clear_error(); /* nothing of the key's parse left in the error queue */
    EVP_PKEY_free(key);
    BIO_free(bio);
    if (copy)
        OPENSSL_cleanse(copy, cn);
    free(copy);
    return NULL;
}

void wi_jwt_signer_free(struct wi_jwt_signer *s)
{
    if (!s)
        return;
    EVP_PKEY_free(s->key);
    OPENSSL_cleanse(s, sizeof *s);
    free(s);
}

/* header.claims.signature into s->token for iat and exp. 0 or -1 with *err. */
static int mint(struct wi_jwt_signer *s, long long iat, long long exp, struct wi_err *err)
{
    static const char header[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";
    char claims[160];
    unsigned char sig[SIG_MAX];
    size_t len, siglen = sizeof sig;
    EVP_MD_CTX *md;
    int cn = snprintf(claims, sizeof claims, "{\"iat\":%lld,\"exp\":%lld,\"iss\":\"%s\"}", iat, exp, s->iss);
    int rc = -1;

    if (cn < 0 || (size_t)cn >= sizeof claims) /* iss is bounded: cannot happen */
        return wi_err_set(err, WI_ERR_ARG, "the JWT claims do not fit");
    OPENSSL_cleanse(s->token, sizeof s->token);
    s->exp = 0;
    len = b64url((const unsigned char *)header, sizeof header - 1, s->token);
    s->token[len++] = '.';
    len += b64url((const unsigned char *)claims, (size_t)cn, s->token + len);
    if (!(md = EVP_MD_CTX_new()))
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    if (EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, s->key) != 1 ||
        EVP_DigestSign(md, sig, &siglen, (const unsigned char *)s->token, len) != 1) {
        wi_err_set(err, WI_ERR_CRYPTO, "RS256 signing failed");
        ERR_clear_error();
        OPENSSL_cleanse(s->token, sizeof s->token);
        goto out;
    }
    s->token[len++] = '.';
    b64url(sig, siglen, s->token + len); /* 24 + 4 * 54 + 1 + 683 + 1 < WI_JWT_TOKEN_MAX */
    s->exp = exp;
    rc = 0;
out:
    EVP_MD_CTX_free(md);
    return rc;
}

const char *wi_jwt_signer_token(struct wi_jwt_signer *s, long long now, int *minted, struct wi_err *err)
{
    *minted = 0;
    if (s->exp > 0 && now < s->exp - WI_JWT_RENEW_S && now >= s->exp - WI_JWT_LIFE_S)
        return s->token;
    if (mint(s, now - WI_JWT_SKEW_S, now + WI_JWT_LIFE_S, err) < 0)
        return NULL;
    *minted = 1;
    return s->token;
}
