/* pkey.h - public-key signature checks (Ed25519, ECDSA P-256/SHA-256) over OpenSSL EVP:
 * a key is parsed once, when the secret is added; each request only verifies. Pure C. */
#ifndef WI_PKEY_H
#define WI_PKEY_H

#include <stddef.h>
#include <stdint.h>
#include "sig_slice.h"
#include "wi_err.h"

enum wi_pkey_alg { WI_PKEY_ED25519, WI_PKEY_ECDSA_P256, WI_PKEY_RSA_SHA1, WI_PKEY_RSA_SHA256 };

struct wi_pkey; /* opaque: an EVP_PKEY and its algorithm */

/* Ed25519 from its 32 raw public-key bytes; ECDSA P-256 from a DER SubjectPublicKeyInfo
 * (SendGrid's "verification key", base64-decoded); RSA (PKCS#1 v1.5 with SHA-1, at least
 * 2048 bits) from a PEM "PUBLIC KEY" (Paddle Classic's public key). Returns a key, or NULL and fills *err
 * (WI_ERR_ARG: not such a key; the message never quotes it). Borrows der. */
struct wi_pkey *wi_pkey_new(enum wi_pkey_alg alg, const unsigned char *der, size_t n, struct wi_err *err);

/* RSA (PKCS#1 v1.5 with SHA-256, at least 2048 bits) from one PEM X.509 certificate (PayPal's
 * webhook signing certificate); *not_before and *not_after get its validity period as unix
 * seconds. Only the public key and the period are kept. Returns a key, or NULL and fills *err
 * (WI_ERR_ARG: not such a certificate; the message never quotes it). Borrows pem. */
struct wi_pkey *wi_pkey_from_cert(const char *pem, size_t n, int64_t *not_before, int64_t *not_after,
                                  struct wi_err *err);

/* Frees a key. Accepts NULL. */
void wi_pkey_free(struct wi_pkey *key);

/* Signature bytes the algorithm can take: 64 for Ed25519, a DER ECDSA signature (at most
 * WI_PKEY_SIG_MAX) for P-256, the modulus size for RSA. */
#define WI_PKEY_SIG_MAX 72

/* The DER form of a raw P-256 signature r||s (64 bytes, as JWS ES256 sends it) into der
 * (WI_PKEY_SIG_MAX bytes). Returns its length, or -1 (WI_ERR_NOMEM, WI_ERR_CRYPTO). */
long wi_pkey_p256_raw_to_der(const unsigned char rs[64], unsigned char *der, struct wi_err *err);

/* Verifies sig over the concatenation of parts[0..nparts) (absent parts count as empty).
 * Returns 1 (valid), 0 (not valid, including a signature of the wrong shape) or -1 and
 * fills *err (WI_ERR_NOMEM, WI_ERR_CRYPTO). Ed25519 signs the message in one pass, so
 * several parts are copied into one buffer first. Thread-safe: key is only read. */
int wi_pkey_verify(const struct wi_pkey *key, const struct wi_slice *parts, size_t nparts,
                   const unsigned char *sig, size_t siglen, struct wi_err *err);

#endif
