/* traceparent.c - the W3C traceparent (version 00): parse, print, a child's new or derived span id. */
#include "observability/traceparent.h"

#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* upper case too: W3C version 00 is lower case */
}

/* Decodes 2n hex chars of s into out; -1 on a non-hex char. */
static int unhex(const char *s, unsigned char *out, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

static int all_zero(const unsigned char *b, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

int wi_traceparent_parse(const char *s, size_t len, struct wi_traceparent *out)
{
    if (!s || len != WI_TRACEPARENT_LEN || s[0] != '0' || s[1] != '0' || s[2] != '-' || s[35] != '-' || s[52] != '-')
        return -1;
    if (unhex(s + 3, out->trace_id, 16) < 0 || unhex(s + 36, out->span_id, 8) < 0 || unhex(s + 53, &out->flags, 1) < 0)
        return -1;
    return all_zero(out->trace_id, 16) || all_zero(out->span_id, 8) ? -1 : 0;
}

void wi_traceparent_hex(const unsigned char *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

void wi_traceparent_format(const struct wi_traceparent *tp, char *out)
{
    memcpy(out, "00-", 3);
    wi_traceparent_hex(tp->trace_id, 16, out + 3);
    out[35] = '-';
    wi_traceparent_hex(tp->span_id, 8, out + 36);
    out[52] = '-';
    wi_traceparent_hex(&tp->flags, 1, out + 53);
}

int wi_traceparent_child(const struct wi_traceparent *parent, struct wi_traceparent *child)
{
    memcpy(child->trace_id, parent->trace_id, sizeof child->trace_id);
    child->flags = parent->flags;
    do {
        if (RAND_bytes(child->span_id, (int)sizeof child->span_id) != 1)
            return -1;
    } while (all_zero(child->span_id, sizeof child->span_id));
    return 0;
}

int wi_traceparent_handle(const struct wi_traceparent *receipt, const char *scope, const char *event_id, int attempts,
                          struct wi_traceparent *handle)
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    char span[17], head[64], tail[16];
    unsigned int dlen = 0;
    EVP_MD_CTX *md;
    int n, ok;

    wi_traceparent_hex(receipt->span_id, sizeof receipt->span_id, span);
    n = snprintf(head, sizeof head, "%s:%zu:", span, strlen(scope));
    if (n < 0 || (size_t)n >= sizeof head || !(md = EVP_MD_CTX_new()))
        return -1;
    snprintf(tail, sizeof tail, ":%d", attempts);
    ok = EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(md, head, (size_t)n) == 1 &&
         EVP_DigestUpdate(md, scope, strlen(scope)) == 1 && EVP_DigestUpdate(md, event_id, strlen(event_id)) == 1 &&
         EVP_DigestUpdate(md, tail, strlen(tail)) == 1 && EVP_DigestFinal_ex(md, digest, &dlen) == 1 &&
         dlen >= sizeof handle->span_id;
    EVP_MD_CTX_free(md);
    if (!ok)
        return -1;
    memcpy(handle->trace_id, receipt->trace_id, sizeof handle->trace_id);
    handle->flags = receipt->flags;
    memcpy(handle->span_id, digest, sizeof handle->span_id);
    if (all_zero(handle->span_id, sizeof handle->span_id))
        handle->span_id[sizeof handle->span_id - 1] = 1;
    return 0;
}
