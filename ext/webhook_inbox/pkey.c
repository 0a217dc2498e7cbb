/* pkey.c - Ed25519, ECDSA P-256 and RSA verification with OpenSSL EVP_DigestVerify; keys (and
 * PayPal's X.509 certificates) are parsed once per secret. */
#include "pkey.h"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct wi_pkey {
    enum wi_pkey_alg alg;
    EVP_PKEY *pk; /* owned */
};

/* An X.509 time as unix seconds. Returns 0, or -1 when OpenSSL cannot read it. */
static int asn1_unix(const ASN1_TIME *t, int64_t *out)
{
    struct tm tm;
    if (!t || ASN1_TIME_to_tm(t, &tm) != 1) return -1;
    *out = (int64_t)timegm(&tm);
    return 0;
}

struct wi_pkey *wi_pkey_from_cert(const char *pem, size_t n, int64_t *not_before, int64_t *not_after,
                                  struct wi_err *err)
{
    BIO *b = n <= 65536 ? BIO_new_mem_buf(pem, (int)n) : NULL;
    X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    EVP_PKEY *pk = x ? X509_get_pubkey(x) : NULL; /* a new reference */
    struct wi_pkey *k = NULL;

    BIO_free(b);
    if (!pk || EVP_PKEY_get_base_id(pk) != EVP_PKEY_RSA || EVP_PKEY_get_bits(pk) < 2048 ||
        asn1_unix(X509_get0_notBefore(x), not_before) || asn1_unix(X509_get0_notAfter(x), not_after)) {
        wi_err_set(err, WI_ERR_ARG, "not a PEM X.509 certificate with an RSA key of at least 2048 bits");
        goto out;
    }
    if (!(k = calloc(1, sizeof *k))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto out;
    }
    k->alg = WI_PKEY_RSA_SHA256;
    k->pk = pk;
    pk = NULL;
out:
    ERR_clear_error();
    EVP_PKEY_free(pk);
    X509_free(x);
    return k;
}

struct wi_pkey *wi_pkey_new(enum wi_pkey_alg alg, const unsigned char *der, size_t n, struct wi_err *err)
{
    EVP_PKEY *pk = NULL;
    struct wi_pkey *k;

    if (alg == WI_PKEY_ED25519) {
        if (n == 32) pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, der, n);
        if (!pk) {
            ERR_clear_error();
            wi_err_set(err, WI_ERR_ARG, "an Ed25519 public key is 32 bytes");
            return NULL;
        }
    } else if (alg == WI_PKEY_RSA_SHA1) {
        BIO *b = n <= 16384 ? BIO_new_mem_buf(der, (int)n) : NULL;
        pk = b ? PEM_read_bio_PUBKEY(b, NULL, NULL, NULL) : NULL;
        BIO_free(b);
        if (!pk || EVP_PKEY_get_base_id(pk) != EVP_PKEY_RSA || EVP_PKEY_get_bits(pk) < 2048) {
            EVP_PKEY_free(pk);
            ERR_clear_error();
            wi_err_set(err, WI_ERR_ARG, "not a PEM RSA public key of at least 2048 bits");
            return NULL;
        }
    } else {
        const unsigned char *p = der;
        pk = d2i_PUBKEY(NULL, &p, (long)n);
        if (!pk || p != der + n || EVP_PKEY_get_base_id(pk) != EVP_PKEY_EC ||
            EVP_PKEY_get_bits(pk) != 256) {
            EVP_PKEY_free(pk);
            ERR_clear_error();
            wi_err_set(err, WI_ERR_ARG, "not a DER P-256 public key (SubjectPublicKeyInfo)");
            return NULL;
        }
    }
    if (!(k = calloc(1, sizeof *k))) {
        EVP_PKEY_free(pk);
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    k->alg = alg;
    k->pk = pk;
    return k;
}

void wi_pkey_free(struct wi_pkey *k)
{
    if (!k) return;
    EVP_PKEY_free(k->pk);
    free(k);
}

int wi_pkey_verify(const struct wi_pkey *k, const struct wi_slice *parts, size_t nparts,
                   const unsigned char *sig, size_t siglen, struct wi_err *err)
{
    EVP_MD_CTX *c;
    int r = -1;
    char *joined = NULL;

    if (k->alg == WI_PKEY_ED25519 && siglen != 64) return 0;
    if (!(c = EVP_MD_CTX_new())) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    const EVP_MD *md = k->alg == WI_PKEY_ED25519 ? NULL : k->alg == WI_PKEY_RSA_SHA1 ? EVP_sha1() : EVP_sha256();
    if (EVP_DigestVerifyInit(c, NULL, md, NULL, k->pk) != 1) {
        wi_err_set(err, WI_ERR_CRYPTO, "signature verification setup failed");
        goto out;
    }
    if (k->alg == WI_PKEY_ED25519) { /* one shot: Ed25519 hashes the message twice */
        const unsigned char *m = (const unsigned char *)"";
        size_t total = 0, o = 0;
        for (size_t i = 0; i < nparts; i++) total += parts[i].n;
        if (nparts == 1 && parts[0].p) {
            m = (const unsigned char *)parts[0].p;
        } else if (total) {
            if (!(joined = malloc(total))) {
                wi_err_set(err, WI_ERR_NOMEM, "out of memory");
                goto out;
            }
            for (size_t i = 0; i < nparts; i++)
                if (parts[i].n) memcpy(joined + o, parts[i].p, parts[i].n), o += parts[i].n;
            m = (const unsigned char *)joined;
        }
        r = EVP_DigestVerify(c, sig, siglen, m, total) == 1;
    } else {
        for (size_t i = 0; i < nparts; i++)
            if (parts[i].n && EVP_DigestVerifyUpdate(c, parts[i].p, parts[i].n) != 1) {
                wi_err_set(err, WI_ERR_CRYPTO, "signature verification failed");
                goto out;
            }
        r = EVP_DigestVerifyFinal(c, sig, siglen) == 1; /* 0 or -1: a bad or malformed signature */
    }
out:
    if (r != 1) ERR_clear_error(); /* a refused signature leaves OpenSSL errors queued */
    free(joined);
    EVP_MD_CTX_free(c);
    return r;
}

long wi_pkey_p256_raw_to_der(const unsigned char rs[64], unsigned char *der, struct wi_err *err)
{
    ECDSA_SIG *s = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(rs, 32, NULL), *sv = BN_bin2bn(rs + 32, 32, NULL);
    unsigned char *p = der;
    long n = -1;

    if (!s || !r || !sv) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (ECDSA_SIG_set0(s, r, sv) != 1) {
        wi_err_set(err, WI_ERR_CRYPTO, "ECDSA signature conversion failed");
        goto out;
    }
    r = sv = NULL; /* owned by s */
    if (i2d_ECDSA_SIG(s, NULL) > WI_PKEY_SIG_MAX || (n = i2d_ECDSA_SIG(s, &p)) <= 0) {
        n = -1;
        wi_err_set(err, WI_ERR_CRYPTO, "ECDSA signature conversion failed");
    }
out:
    BN_free(r);
    BN_free(sv);
    ECDSA_SIG_free(s);
    return n;
}
