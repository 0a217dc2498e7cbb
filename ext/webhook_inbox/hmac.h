/* hmac.h - HMAC-SHA1/256/512 with per-secret precomputed pads, constant-time compare,
 * hex and base64 codecs. Pure C over OpenSSL libcrypto; no Ruby. */
#ifndef WI_HMAC_H
#define WI_HMAC_H

#include <stddef.h>
#include "sig_slice.h"
#include "wi_err.h"

enum wi_hmac_alg { WI_HMAC_SHA1, WI_HMAC_SHA256, WI_HMAC_SHA512 };

#define WI_HMAC_MAX 64 /* largest digest size (SHA-512) */

struct wi_hmac_key; /* opaque: a secret reduced to inner/outer digest states */

/* Returns a key holding HMAC state for secret[0..len), or NULL and fills *err. The
 * secret is not retained: only the keyed digest states are, and they are wiped on free. */
struct wi_hmac_key *wi_hmac_key_new(enum wi_hmac_alg alg, const void *secret, size_t len,
                                    struct wi_err *err);

/* Wipes and frees a key. Accepts NULL. */
void wi_hmac_key_free(struct wi_hmac_key *key);

/* Digest size in bytes of alg (20, 32 or 64). */
size_t wi_hmac_size(enum wi_hmac_alg alg);

/* HMAC of the concatenation of parts[0..nparts) (absent parts count as empty) written to
 * out (WI_HMAC_MAX bytes). Returns the digest size, or -1 and fills *err. Thread-safe:
 * key is only read. Borrows parts; never copies them. */
int wi_hmac_compute(const struct wi_hmac_key *key, const struct wi_slice *parts,
                    size_t nparts, unsigned char *out, struct wi_err *err);

/* 1 when a[0..n) == b[0..n), else 0; time depends only on n. */
int wi_ct_equal(const void *a, const void *b, size_t n);

/* Decodes hex (either case) s[0..n) into out (cap bytes). Returns the decoded length, or
 * -1 on an odd length, a non-hex character or not enough room. */
long wi_hex_decode(const char *s, size_t n, unsigned char *out, size_t cap);

/* wi_hex_decode for lowercase hex only (the form the providers' SDKs compare as a string):
 * -1 on an 'A'-'F' as well. */
long wi_hex_decode_lower(const char *s, size_t n, unsigned char *out, size_t cap);

/* Writes 2*n lowercase hex characters plus a NUL to out. */
void wi_hex_encode(const unsigned char *in, size_t n, char *out);

/* Decodes base64 (RFC 4648; "=" padding optional but, when present, complete; the URL-safe
 * '-' and '_' accepted) into out (cap bytes). Returns the decoded length, or -1 on an
 * invalid character, bad padding, non-zero trailing bits or not enough room. */
long wi_b64_decode(const char *s, size_t n, unsigned char *out, size_t cap);

/* SHA-256 of data[0..n) written to out (32 bytes). Returns 0, or -1 and fills *err. */
int wi_sha256(const void *data, size_t n, unsigned char out[32], struct wi_err *err);

#endif
