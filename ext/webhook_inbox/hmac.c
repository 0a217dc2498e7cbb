/* hmac.c - HMAC with per-secret precomputed inner/outer digest states, constant-time
 * compare, hex and base64 codecs. */
#include "hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

/* Invariant: inner/outer have absorbed (key ^ ipad) / (key ^ opad) and are never updated
 * again; every computation works on copies. */
struct wi_hmac_key {
    enum wi_hmac_alg alg;
    const EVP_MD *md;   /* static OpenSSL digest */
    EVP_MD_CTX *inner;  /* state after key ^ 0x36.. */
    EVP_MD_CTX *outer;  /* state after key ^ 0x5c.. */
};

static const EVP_MD *md_of(enum wi_hmac_alg alg)
{
    switch (alg) {
    case WI_HMAC_SHA1: return EVP_sha1();
    case WI_HMAC_SHA256: return EVP_sha256();
    case WI_HMAC_SHA512: return EVP_sha512();
    }
    return NULL;
}

size_t wi_hmac_size(enum wi_hmac_alg alg)
{
    return alg == WI_HMAC_SHA1 ? 20 : alg == WI_HMAC_SHA256 ? 32 : 64;
}

struct wi_hmac_key *wi_hmac_key_new(enum wi_hmac_alg alg, const void *secret, size_t len,
                                    struct wi_err *err)
{
    unsigned char block[128], pad[128];
    struct wi_hmac_key *k = NULL;
    const EVP_MD *md = md_of(alg);
    size_t bs;

    if (!md) {
        wi_err_set(err, WI_ERR_ARG, "unknown HMAC algorithm");
        return NULL;
    }
    bs = (size_t)EVP_MD_get_block_size(md);
    memset(block, 0, sizeof block);
    if (len > bs) {
        unsigned int dl = 0;
        if (!EVP_Digest(secret, len, block, &dl, md, NULL)) {
            wi_err_set(err, WI_ERR_CRYPTO, "digest of the secret failed");
            goto fail;
        }
    } else if (len) {
        memcpy(block, secret, len);
    }
    k = calloc(1, sizeof *k);
    if (!k) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    k->alg = alg;
    k->md = md;
    k->inner = EVP_MD_CTX_new();
    k->outer = EVP_MD_CTX_new();
    if (!k->inner || !k->outer) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < bs; i++) pad[i] = block[i] ^ 0x36;
    if (!EVP_DigestInit_ex(k->inner, md, NULL) || !EVP_DigestUpdate(k->inner, pad, bs)) {
        wi_err_set(err, WI_ERR_CRYPTO, "HMAC initialisation failed");
        goto fail;
    }
    for (size_t i = 0; i < bs; i++) pad[i] = block[i] ^ 0x5c;
    if (!EVP_DigestInit_ex(k->outer, md, NULL) || !EVP_DigestUpdate(k->outer, pad, bs)) {
        wi_err_set(err, WI_ERR_CRYPTO, "HMAC initialisation failed");
        goto fail;
    }
    OPENSSL_cleanse(block, sizeof block);
    OPENSSL_cleanse(pad, sizeof pad);
    return k;
fail:
    OPENSSL_cleanse(block, sizeof block);
    OPENSSL_cleanse(pad, sizeof pad);
    wi_hmac_key_free(k);
    return NULL;
}

void wi_hmac_key_free(struct wi_hmac_key *k)
{
    if (!k) return;
    EVP_MD_CTX_free(k->inner); /* EVP_MD_CTX_free cleanses the digest state */
    EVP_MD_CTX_free(k->outer);
    OPENSSL_cleanse(k, sizeof *k);
    free(k);
}

int wi_hmac_compute(const struct wi_hmac_key *k, const struct wi_slice *parts, size_t nparts,
                    unsigned char *out, struct wi_err *err)
{
    unsigned char ih[WI_HMAC_MAX];
    unsigned int il = 0, ol = 0;
    int rc = -1;
    EVP_MD_CTX *c = EVP_MD_CTX_new();

    if (!c) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    if (!EVP_MD_CTX_copy_ex(c, k->inner)) goto crypto;
    for (size_t i = 0; i < nparts; i++)
        if (parts[i].n && !EVP_DigestUpdate(c, parts[i].p, parts[i].n)) goto crypto;
    if (!EVP_DigestFinal_ex(c, ih, &il)) goto crypto;
    if (!EVP_MD_CTX_copy_ex(c, k->outer) || !EVP_DigestUpdate(c, ih, il) ||
        !EVP_DigestFinal_ex(c, out, &ol))
        goto crypto;
    rc = (int)ol;
    goto done;
crypto:
    wi_err_set(err, WI_ERR_CRYPTO, "HMAC computation failed");
done:
    OPENSSL_cleanse(ih, sizeof ih);
    EVP_MD_CTX_free(c);
    return rc;
}

int wi_ct_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

/* Value of each hex digit (either case) + 1; 0 for every other byte. */
static const unsigned char hexval[256] = {
    ['0'] = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
    ['A'] = 11, 12, 13, 14, 15, 16,
    ['a'] = 11, 12, 13, 14, 15, 16,
};

long wi_hex_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    unsigned bad = 0;
    if (n % 2 || n / 2 > cap) return -1;
    for (size_t i = 0; i < n; i += 2) { /* one check at the end: no branch per digit */
        unsigned hi = hexval[(unsigned char)s[i]], lo = hexval[(unsigned char)s[i + 1]];
        bad |= (hi - 1) | (lo - 1);
        out[i / 2] = (unsigned char)((hi - 1) << 4 | ((lo - 1) & 15));
    }
    return bad > 15 ? -1 : (long)(n / 2);
}

long wi_hex_decode_lower(const char *s, size_t n, unsigned char *out, size_t cap)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 'A' && s[i] <= 'F') return -1;
    return wi_hex_decode(s, n, out, cap);
}

void wi_hex_encode(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

long wi_b64_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    size_t pad = 0, o = 0;
    unsigned acc = 0;
    int bits = 0;

    while (pad < 2 && n > 0 && s[n - 1] == '=') {
        n--;
        pad++;
    }
    if (pad && (n + pad) % 4) return -1;
    if (n % 4 == 1) return -1;
    for (size_t i = 0; i < n; i++) {
        int v = b64val((unsigned char)s[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= cap) return -1;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    if (acc & ((1u << bits) - 1)) return -1; /* non-zero trailing bits: not canonical */
    return (long)o;
}

int wi_sha256(const void *data, size_t n, unsigned char out[32], struct wi_err *err)
{
    unsigned int l = 0;
    if (!EVP_Digest(data, n, out, &l, EVP_sha256(), NULL))
        return wi_err_set(err, WI_ERR_CRYPTO, "SHA-256 failed");
    return 0;
}
