/* http.c - the request-head parser of the metrics listener: request line, header syntax,
 * the empty line; slices into the caller's buffer (picohttpparser's shape, much smaller). */
#include "observability/http.h"

#include <string.h>

/* RFC 9110 tchar: the characters of a method or a header name. */
static int tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* At buf[*i]: a line end (CRLF or LF). Returns 1 and moves past it, 0 if incomplete, -1
 * if something else is there. */
static int eol(const char *buf, size_t len, size_t *i)
{
    if (*i >= len)
        return 0;
    if (buf[*i] == '\n') {
        (*i)++;
        return 1;
    }
    if (buf[*i] != '\r')
        return -1;
    if (*i + 1 >= len)
        return 0;
    if (buf[*i + 1] != '\n')
        return -1;
    *i += 2;
    return 1;
}

long wi_http_parse(const char *buf, size_t len, struct wi_http_req *req)
{
    static const char version[] = "HTTP/1.";
    size_t i = 0, m0, t0, tlen, k;
    int r, minor;

    /* method SP */
    for (m0 = i; i < len && tchar((unsigned char)buf[i]); i++)
        ;
    if (i >= len)
        return 0;
    if (i == m0 || buf[i] != ' ')
        return -1;
    t0 = ++i;
    /* request-target SP: origin-form only */
    for (; i < len && (unsigned char)buf[i] > 0x20 && (unsigned char)buf[i] < 0x7f; i++)
        if (i == t0 && buf[i] != '/')
            return -1;
    if (i >= len)
        return 0;
    if (i == t0 || buf[i] != ' ')
        return -1;
    tlen = i - t0;
    i++;
    /* HTTP/1.d */
    for (k = 0; k < sizeof version - 1; k++, i++) {
        if (i >= len)
            return 0;
        if (buf[i] != version[k])
            return -1;
    }
    if (i >= len)
        return 0;
    if (buf[i] < '0' || buf[i] > '9')
        return -1;
    minor = buf[i++] - '0';
    if ((r = eol(buf, len, &i)) <= 0)
        return r;
    /* header-field lines: token ":" value (no control characters but HTAB), then an empty line */
    for (;;) {
        size_t n0 = i;
        if (i >= len)
            return 0;
        if (buf[i] == '\r' || buf[i] == '\n') {
            if ((r = eol(buf, len, &i)) <= 0)
                return r;
            break;
        }
        for (; i < len && tchar((unsigned char)buf[i]); i++)
            ;
        if (i >= len)
            return 0;
        if (i == n0 || buf[i] != ':') /* also refuses obsolete line folding (a leading SP/HTAB) */
            return -1;
        for (i++; i < len; i++) {
            unsigned char c = (unsigned char)buf[i];
            if (c == '\r' || c == '\n')
                break;
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return -1;
        }
        if ((r = eol(buf, len, &i)) <= 0)
            return r;
    }
    req->method = buf + m0;
    req->method_len = t0 - 1 - m0;
    req->target = buf + t0;
    req->target_len = tlen;
    req->minor = minor;
    return (long)i;
}

int wi_http_path_is(const struct wi_http_req *req, const char *path)
{
    size_t n = strlen(path);
    return req->target_len >= n && memcmp(req->target, path, n) == 0 &&
           (req->target_len == n || req->target[n] == '?');
}

int wi_http_method_is(const struct wi_http_req *req, const char *m)
{
    size_t n = strlen(m);
    return req->method_len == n && memcmp(req->method, m, n) == 0;
}
