/* headers.c - the request_headers JSON object from Rack env entries (see headers.h). */
#include "headers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Appends n bytes; on failure marks h failed (later appends do nothing). */
static void put(struct wi_headers *h, const char *p, size_t n)
{
    if (h->failed)
        return;
    if (h->len + n + 1 > h->cap) {
        size_t cap = h->cap ? h->cap : 512;
        char *b;
        while (cap < h->len + n + 1)
            cap *= 2;
        if (!(b = realloc(h->buf, cap))) {
            h->failed = 1;
            return;
        }
        h->buf = b;
        h->cap = cap;
    }
    memcpy(h->buf + h->len, p, n);
    h->len += n;
    h->buf[h->len] = '\0';
}

/* Length of the valid UTF-8 sequence at p[0..n) (RFC 3629: no overlongs, no surrogates,
 * at most U+10FFFF), or 0 when p starts an invalid or truncated one. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len, i;
    uint32_t cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/* Appends s[0..n) as a JSON string's contents: '"' and '\' escaped, control characters as
 * \u00XX, NUL dropped, each byte of an invalid UTF-8 sequence as U+FFFD. */
static void put_escaped(struct wi_headers *h, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;

    while (i < n) {
        unsigned c = p[i];
        size_t seq;

        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            run++;
            continue;
        }
        if (c >= 0x80 && (seq = utf8_seq(p + i, n - i)) > 0) {
            i += seq;
            run += seq;
            continue;
        }
        put(h, s + i - run, run);
        run = 0;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(h, e, 2);
        } else if (c >= 0x80) {
            put(h, "\xef\xbf\xbd", 3); /* U+FFFD */
        } else if (c != 0) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(h, e, 6);
        }
        i++;
    }
    put(h, s + i - run, run);
}

/* Why words, not an allow-list: a delivery is told apart by headers each provider names its
 * own way (x-github-delivery, webhook-id, x-shopify-webhook-id, a custom :hmac scheme's
 * x-acme-event), so a list of known-safe names would drop what support needs for every
 * provider it does not know. A credential, though, is named after what it is: any name
 * holding one of these words is left out, a safe name that happens to hold one (an
 * idempotency-key) is the price. The signature headers stay (stripe-signature,
 * x-hub-signature-256, webhook-signature, x-shopify-hmac-sha256): they are kept on purpose,
 * and a signature covers one body, it admits no other request. */
#define W(s) {s, sizeof s - 1}
static const struct {
    const char *s;
    size_t len;
} credential_words[] = {
    W("auth"),       /* authorization, proxy-authorization, x-auth-key, x-oauth-... */
    W("key"),        /* x-api-key, x-functions-key, ocp-apim-subscription-key, x-signing-key */
    W("token"),      /* x-auth-token, x-gitlab-token, x-goog-channel-token */
    W("secret"),     /* x-webhook-secret, x-hook-secret */
    W("pass"),       /* password, passwd, x-webhook-passphrase */
    W("jwt"),        /* cf-access-jwt-assertion, x-goog-iap-jwt-assertion */
    W("assertion"),  /* x-saml-assertion */
    W("cookie"),     /* cookie, cookie2 */
    W("session"),    /* x-session-id */
    W("credential"), /* x-credentials */
};
#undef W

/* 1 when the lower-case name[0..n) holds a credential word. One pass: a word is compared
 * only where its first letter is (every receipt pays for this). */
static int credential_name(const char *name, size_t n)
{
    size_t i, w;

    for (i = 0; i < n; i++) {
        switch (name[i]) {
        case 'a': case 'c': case 'j': case 'k': case 'p': case 's': case 't':
            break;
        default:
            continue;
        }
        for (w = 0; w < sizeof credential_words / sizeof credential_words[0]; w++)
            if (credential_words[w].s[0] == name[i] && credential_words[w].len <= n - i &&
                !memcmp(name + i, credential_words[w].s, credential_words[w].len))
                return 1;
    }
    return 0;
}

/* 1 when the value looks like a credential whatever its name: an HTTP auth scheme and a
 * space first ("Bearer ...", "Basic ..."), or a JWT ("eyJ" and two dots, base64url). */
static int credential_value(const char *v, size_t n)
{
    static const char *const schemes[] = {"bearer ", "basic ", "digest ", "negotiate ", "token ", NULL};
    size_t i, dots = 0;
    int s;

    for (s = 0; schemes[s]; s++) {
        size_t k = strlen(schemes[s]);
        for (i = 0; i < k && i < n && (v[i] | 0x20) == schemes[s][i]; i++)
            ;
        if (i == k)
            return 1;
    }
    if (n < 3 || memcmp(v, "eyJ", 3))
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '.')
            dots++;
        else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                   c == '='))
            return 0;
    }
    return dots == 2;
}

/* 1 when the lower-case name or the value may be a credential. */
static int credential(const char *name, size_t n, const char *value, size_t value_len)
{
    return credential_name(name, n) || credential_value(value, value_len);
}

int wi_headers_credential(const char *name, size_t n, const char *value, size_t value_len)
{
    char lower[WI_HEADERS_MAX_NAME];
    size_t i;

    if (n > WI_HEADERS_MAX_NAME)
        return 1; /* never kept: nothing to tell apart, fail closed */
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        lower[i] = (char)(c == '_' ? '-' : c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    return credential(lower, n, value ? value : "", value ? value_len : 0);
}

/* Writes the header name of Rack key into out (lower case, '_' -> '-'); returns its length,
 * or 0 when the key is not a kept header. */
static size_t header_name(const char *key, size_t n, char *out)
{
    size_t i;

    if (n == 12 && !memcmp(key, "CONTENT_TYPE", 12)) {
        memcpy(out, "content-type", 12);
        return 12;
    }
    if (n == 14 && !memcmp(key, "CONTENT_LENGTH", 14)) {
        memcpy(out, "content-length", 14);
        return 14;
    }
    if (n <= 5 || n - 5 > WI_HEADERS_MAX_NAME || memcmp(key, "HTTP_", 5) || (n == 12 && !memcmp(key, "HTTP_VERSION", 12)))
        return 0;
    for (i = 5; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c == '_')
            c = '-';
        else if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        out[i - 5] = (char)c;
    }
    return n - 5;
}

int wi_headers_add(struct wi_headers *h, const char *key, size_t key_len, const char *value,
                   size_t value_len)
{
    char name[WI_HEADERS_MAX_NAME];
    size_t n;

    if (h->count >= WI_HEADERS_MAX)
        return 0;
    if (!(n = header_name(key, key_len, name)) || credential(name, n, value, value_len))
        return 1;
    put(h, h->count ? ",\"" : "{\"", 2);
    put_escaped(h, name, n);
    put(h, "\":\"", 3);
    put_escaped(h, value, value_len < WI_HEADERS_MAX_VALUE ? value_len : WI_HEADERS_MAX_VALUE);
    put(h, "\"", 1);
    return ++h->count < WI_HEADERS_MAX;
}

const char *wi_headers_json(struct wi_headers *h, size_t *len)
{
    if (!h->count || h->failed)
        return NULL;
    put(h, "}", 1);
    if (h->failed)
        return NULL;
    *len = h->len;
    return h->buf;
}

void wi_headers_free(struct wi_headers *h)
{
    free(h->buf);
    memset(h, 0, sizeof *h);
}
