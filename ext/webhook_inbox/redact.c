/* redact.c - finds a URL's password as its author meant it (not as libpq splits it) and
 * masks it, raw and percent-decoded, in messages. No libpq, no ruby.h, no allocation
 * beyond one buffer, wiped. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* explicit_bzero */
#endif
#include "redact.h"

#include <stdlib.h>
#include <string.h>

static const char *url_rest(const char *s)
{
    static const char *const schemes[] = {"postgresql://", "postgres://"};
    size_t i;

    for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (!strncmp(s, schemes[i], strlen(schemes[i])))
            return s + strlen(schemes[i]);
    return NULL;
}

int wi_redact_password_span(const char *conninfo, size_t *off, size_t *len)
{
    const char *rest, *at, *colon, *slash, *question, *end, *last;

    if (!conninfo || !(rest = url_rest(conninfo)) || !(at = strchr(rest, '@')))
        return 0;
    /* User info: an '@' before any '/' (libpq's rule), or before any '?' (a '/' in the
     * password). A user name has neither '/' nor '?': its ':' comes before both. */
    slash = strchr(rest, '/');
    question = strchr(rest, '?');
    if (slash && slash < at && question && question < at)
        return 0;
    colon = memchr(rest, ':', (size_t)(at - rest));
    if (!colon || (slash && slash < colon) || (question && question < colon))
        return 0;
    /* The password runs to the last '@' before the query that follows the first '@'. */
    end = strchr(at, '?');
    if (!end)
        end = at + strlen(at);
    for (last = end - 1; *last != '@'; last--)
        ;
    *off = (size_t)(colon + 1 - conninfo);
    *len = (size_t)(last - (colon + 1));
    return 1;
}

int wi_redact_url_split(const char *conninfo)
{
    size_t off, len;

    if (!wi_redact_password_span(conninfo, &off, &len))
        return 0;
    return memchr(conninfo + off, '@', len) || memchr(conninfo + off, '/', len);
}

static void mask(char *msg, const char *secret, size_t n)
{
    char *hit;

    if (!n)
        return;
    for (hit = msg; (hit = strstr(hit, secret)); hit += n)
        memset(hit, '*', n);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

void wi_redact_scrub(char *msg, const char *conninfo, const char *secret)
{
    size_t off, len, i, n = 0;
    char *buf;

    if (!msg)
        return;
    if (secret)
        mask(msg, secret, strlen(secret));
    if (!wi_redact_password_span(conninfo, &off, &len) || !len || !(buf = malloc(len + 1)))
        return;
    memcpy(buf, conninfo + off, len); /* as written */
    buf[len] = '\0';
    mask(msg, buf, len);
    for (i = 0; i < len; i++) {       /* as libpq decodes it */
        const char *p = conninfo + off + i;
        int hi, lo;
        if (*p == '%' && i + 2 < len && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0 && hi * 16 + lo) {
            buf[n++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            buf[n++] = *p;
        }
    }
    buf[n] = '\0';
    mask(msg, buf, n);
    explicit_bzero(buf, len);
    free(buf);
}
