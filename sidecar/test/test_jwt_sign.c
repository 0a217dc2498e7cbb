/* test_jwt_sign.c - the GitHub App JWT: a known key's token decoded and its RS256 signature
 * verified here with OpenSSL and the public key, its exact header and claims, the cache
 * until near exp, and the keys refused (never quoted). The key is generated per run. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "minitest.h"
#include "reconcile/jwt_sign.h"

/* The key of the known-key checks, made at start (no key is committed): PKCS#1 ("BEGIN RSA
 * PRIVATE KEY", the form GitHub hands out) and its public half. */
static char *private_pem, *public_pem;

/* base64url (no padding) s[0..n) decoded by OpenSSL into out (NUL added); length or -1. */
static long unb64url(const char *s, size_t n, unsigned char *out, size_t cap)
{
    char std[2048];
    size_t k = 0, pad = (4 - n % 4) % 4;
    int len;
    if (n + pad >= sizeof std || pad == 3 || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") < n)
        return -1;
    for (; k < n; k++)
        std[k] = s[k] == '-' ? '+' : s[k] == '_' ? '/' : s[k];
    while (pad--)
        std[k++] = '=';
    if ((k / 4) * 3 >= cap || (len = EVP_DecodeBlock(out, (const unsigned char *)std, (int)k)) < 0)
        return -1;
    len -= (int)(k - n); /* EVP_DecodeBlock counts the padding's zero bytes */
    out[len] = '\0';
    return len;
}

/* Splits token into its parts, checks header and claims against want_*, and verifies the
 * signature with the public key. 1 when all hold. */
static int token_ok(const char *token, const char *want_header, const char *want_claims)
{
    const char *d1 = strchr(token, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
    unsigned char h[256], c[256], sig[1024];
    long hn, cn, sn;
    BIO *bio = BIO_new_mem_buf(public_pem, -1);
    EVP_PKEY *pub = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int ok = 0;

    if (!d1 || !d2 || strchr(d2 + 1, '.') || !pub || !md)
        goto out;
    hn = unb64url(token, (size_t)(d1 - token), h, sizeof h);
    cn = unb64url(d1 + 1, (size_t)(d2 - d1 - 1), c, sizeof c);
    sn = unb64url(d2 + 1, strlen(d2 + 1), sig, sizeof sig);
    if (hn < 0 || cn < 0 || sn != 256 || strcmp((char *)h, want_header) || strcmp((char *)c, want_claims))
        goto out;
    ok = EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, pub) == 1 &&
         EVP_DigestVerify(md, sig, (size_t)sn, (const unsigned char *)token, (size_t)(d2 - token)) == 1;
out:
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(pub);
    BIO_free(bio);
    return ok;
}

/* Text of bio's contents (malloc'd, NUL-terminated), or NULL. */
static char *bio_text(BIO *bio)
{
    char *data, *out = NULL;
    long n = BIO_get_mem_data(bio, &data);
    if (n > 0 && (out = malloc((size_t)n + 1))) {
        memcpy(out, data, (size_t)n);
        out[n] = '\0';
    }
    return out;
}

/* A fresh key as PEM (malloc'd): RSA of bits, or EC P-256 when bits is 0; encrypted with
 * a passphrase when enc. */
static char *pem_of(int bits, int enc)
{
    EVP_PKEY *k = bits ? EVP_RSA_gen((unsigned)bits) : EVP_EC_gen("P-256");
    BIO *bio = BIO_new(BIO_s_mem());
    char *out = NULL;
    if (k && bio &&
        PEM_write_bio_PrivateKey(bio, k, enc ? EVP_aes_128_cbc() : NULL, enc ? (unsigned char *)"pw" : NULL,
                                 enc ? 2 : 0, NULL, NULL) == 1)
        out = bio_text(bio);
    BIO_free(bio);
    EVP_PKEY_free(k);
    return out;
}

/* Makes private_pem (PKCS#1) and public_pem from a fresh RSA-2048 key. 0, or -1. */
static int make_known_key(void)
{
    EVP_PKEY *k = EVP_RSA_gen(2048);
    BIO *priv = BIO_new(BIO_s_mem()), *pub = BIO_new(BIO_s_mem());
    int ok = k && priv && pub && PEM_write_bio_PrivateKey_traditional(priv, k, NULL, NULL, 0, NULL, NULL) == 1 &&
             PEM_write_bio_PUBKEY(pub, k) == 1 && (private_pem = bio_text(priv)) && (public_pem = bio_text(pub));
    BIO_free(priv);
    BIO_free(pub);
    EVP_PKEY_free(k);
    return ok && strstr(private_pem, "BEGIN RSA PRIVATE KEY") ? 0 : -1;
}

static int refused(const char *pem, const char *iss, const char *why)
{
    struct wi_err err;
    struct wi_jwt_signer *s = wi_jwt_signer_new(pem, pem ? strlen(pem) : 0, iss, &err);
    int ok = !s && err.code == WI_ERR_ARG && strstr(err.msg, why) && !strstr(err.msg, "MII") && !strstr(err.msg, "BEGIN");
    wi_jwt_signer_free(s);
    return ok;
}

int main(void)
{
    static const char header[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";
    struct wi_err err;
    struct wi_jwt_signer *s;
    const char *t;
    char first[WI_JWT_TOKEN_MAX], tampered[WI_JWT_TOKEN_MAX], oneline[4096];
    int minted = -1;

    if (make_known_key() < 0) {
        fprintf(stderr, "test_jwt_sign: could not make the RSA key\n");
        return 1;
    }
    s = wi_jwt_signer_new(private_pem, strlen(private_pem), "123456", &err);

    CHECK(s != NULL);
    t = wi_jwt_signer_token(s, 1700000000, &minted, &err);
    CHECK(t && minted == 1 && strlen(t) < 512); /* fits the walk's Authorization line */
    CHECK(t && token_ok(t, header, "{\"iat\":1699999940,\"exp\":1700000540,\"iss\":\"123456\"}"));
    snprintf(first, sizeof first, "%s", t ? t : "");
    /* the check above can fail: a changed claim, or another issuer, does not verify */
    snprintf(tampered, sizeof tampered, "%s", first);
    tampered[strchr(tampered, '.') - tampered + 5] ^= 1;
    CHECK(!token_ok(tampered, header, "{\"iat\":1699999940,\"exp\":1700000540,\"iss\":\"123456\"}"));
    CHECK(!token_ok(first, header, "{\"iat\":1699999940,\"exp\":1700000540,\"iss\":\"654321\"}"));

    /* cached until less than WI_JWT_RENEW_S is left, then minted anew */
    t = wi_jwt_signer_token(s, 1700000000 + 479, &minted, &err);
    CHECK(t && minted == 0 && !strcmp(t, first));
    t = wi_jwt_signer_token(s, 1700000000 + 480, &minted, &err);
    CHECK(t && minted == 1 && token_ok(t, header, "{\"iat\":1700000420,\"exp\":1700001020,\"iss\":\"123456\"}"));
    t = wi_jwt_signer_token(s, 1700000000, &minted, &err); /* the clock went back: not a token from its future */
    CHECK(t && minted == 1 && !strcmp(t, first)); /* RSASSA-PKCS1-v1_5 is deterministic */
    wi_jwt_signer_free(s);

    /* the one-line form of an environment file: \n for each line break; a client id as iss */
    {
        size_t k = 0;
        for (const char *p = private_pem; *p && k + 2 < sizeof oneline; p++) {
            if (*p == '\n') {
                oneline[k++] = '\\';
                oneline[k++] = 'n';
            } else {
                oneline[k++] = *p;
            }
        }
        oneline[k] = '\0';
    }
    CHECK(!strchr(oneline, '\n'));
    s = wi_jwt_signer_new(oneline, strlen(oneline), "Iv23li.Ab-c_9", &err);
    CHECK(s && (t = wi_jwt_signer_token(s, 1800000000, &minted, &err)) &&
          token_ok(t, header, "{\"iat\":1799999940,\"exp\":1800000540,\"iss\":\"Iv23li.Ab-c_9\"}"));
    wi_jwt_signer_free(s);
    wi_jwt_signer_free(NULL);

    /* refused, and never quoted */
    CHECK(refused("not a key at all", "1", "not an unencrypted PEM private key"));
    CHECK(refused(public_pem, "1", "not an unencrypted PEM private key"));
    CHECK(refused(private_pem, "1\"}", "must be 1..64 bytes"));
    CHECK(refused(private_pem, "", "must be 1..64 bytes"));
    {
        char *ec = pem_of(0, 0), *small = pem_of(1024, 0), *enc = pem_of(2048, 1), *big = pem_of(4096, 0);
        CHECK(ec && refused(ec, "1", "must be RSA of 2048 to 4096 bits"));
        CHECK(small && refused(small, "1", "must be RSA of 2048 to 4096 bits"));
        CHECK(enc && strstr(enc, "ENCRYPTED") && refused(enc, "1", "not an unencrypted PEM private key"));
        CHECK(big && (s = wi_jwt_signer_new(big, strlen(big), "1", &err)) &&
              (t = wi_jwt_signer_token(s, 1700000000, &minted, &err)) && strlen(t) > 512);
        wi_jwt_signer_free(s);
        free(ec);
        free(small);
        free(enc);
        free(big);
    }
    free(private_pem);
    free(public_pem);
    DONE("test_jwt_sign");
}
