/* headers.h - a delivery's request headers as the inbox keeps them (request_headers): one
 * JSON object {"lower-case-name": "value", ...} built from Rack env entries. Pure C (no
 * ruby.h); the Ruby binding feeds it the env. What is kept:
 *   - HTTP_* keys (not HTTP_VERSION, the server's protocol version) and CONTENT_TYPE,
 *     CONTENT_LENGTH; names lower-cased, '_' -> '-', at most WI_HEADERS_MAX_NAME bytes;
 *   - never a credential: a name holding auth, key, token, secret, pass, jwt, assertion,
 *     cookie, session or credential (headers.c says why words and not an allow-list), nor
 *     a value that starts with an HTTP auth scheme ("Bearer ", "Basic ", ...) or is a JWT;
 *     the signature headers (stripe-signature, x-hub-signature-256, ...) are kept;
 *   - at most WI_HEADERS_MAX headers; values cut to WI_HEADERS_MAX_VALUE bytes; bytes that
 *     are not UTF-8 become U+FFFD, NUL is dropped.
 * The result is always a JSON object PostgreSQL jsonb accepts. */
#ifndef WI_HEADERS_H
#define WI_HEADERS_H

#include <stddef.h>

#define WI_HEADERS_MAX 64
#define WI_HEADERS_MAX_VALUE 1024
#define WI_HEADERS_MAX_NAME 256

/* The object being built. Zero-initialize; wi_headers_free releases it. */
struct wi_headers {
    char *buf;
    size_t len, cap;
    int count;  /* headers kept so far */
    int failed; /* out of memory: the result is NULL */
};

/* Adds the Rack env entry key = value when it is a kept header (see above). Returns 1 while
 * more headers may be added, 0 once WI_HEADERS_MAX are kept (the caller may stop). */
int wi_headers_add(struct wi_headers *h, const char *key, size_t key_len, const char *value,
                   size_t value_len);

/* Closes the object and returns its text (NUL-terminated, *len without the NUL), owned by
 * h; NULL when no header was kept or memory ran out. Call once, after the last add. */
const char *wi_headers_json(struct wi_headers *h, size_t *len);

void wi_headers_free(struct wi_headers *h);

/* 1 when a header name (any case, '_' or '-') or its value (may be NULL) is a credential
 * by the rule above, so is never kept; also 1 for a name longer than WI_HEADERS_MAX_NAME.
 * For showing headers stored before the rule was this broad (the dashboard masks them). */
int wi_headers_credential(const char *name, size_t n, const char *value, size_t value_len);

#endif
