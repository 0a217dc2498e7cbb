/* form.c - form-urlencoded pairs and query strings: the iterator, the decoder, Twilio's
 * sorted name+value form, and HubSpot's partial URI unescaping. */
#include "form.h"

#include <stdlib.h>
#include <string.h>

void wi_form_init(struct wi_form_iter *it, const char *s, size_t n)
{
    it->p = s;
    it->end = s ? s + n : s;
}

int wi_form_next(struct wi_form_iter *it, struct wi_slice *name, struct wi_slice *value)
{
    while (it->p && it->p < it->end) {
        const char *start = it->p, *amp = memchr(start, '&', (size_t)(it->end - start));
        const char *stop = amp ? amp : it->end, *eq;
        it->p = amp ? amp + 1 : it->end;
        if (stop == start) continue;
        eq = memchr(start, '=', (size_t)(stop - start));
        *name = (struct wi_slice){start, (size_t)((eq ? eq : stop) - start)};
        *value = eq ? (struct wi_slice){eq + 1, (size_t)(stop - eq - 1)} : (struct wi_slice){stop, 0};
        return 1;
    }
    return 0;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

long wi_form_decode(struct wi_slice s, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            int hi = -1, lo = -1;
            if (s.n - i >= 3) hi = hexval((unsigned char)s.p[i + 1]), lo = hexval((unsigned char)s.p[i + 2]);
            if (hi < 0 || lo < 0) return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        out[o++] = c;
    }
    return (long)o;
}

struct wi_slice wi_form_find(const char *s, size_t n, const char *name)
{
    struct wi_form_iter it;
    struct wi_slice k, v;
    size_t want = strlen(name);
    char buf[64];
    wi_form_init(&it, s, n);
    while (wi_form_next(&it, &k, &v)) {
        if (k.n > sizeof buf || k.n < want) continue; /* decoding never lengthens */
        long dl = wi_form_decode(k, buf);
        if (dl == (long)want && !memcmp(buf, name, want)) return v;
    }
    return (struct wi_slice){NULL, 0};
}

static int cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static int cmp_pair(const void *x, const void *y)
{
    const struct wi_form_pair *a = x, *b = y;
    int c = cmp_bytes(a->name, a->nlen, b->name, b->nlen);
    return c ? c : cmp_bytes(a->value, a->vlen, b->value, b->vlen);
}

int wi_form_sorted_pairs(const char *s, size_t n, struct wi_form_pair **pairs, size_t *np, char **buf,
                         int bad_code, struct wi_err *err)
{
    struct wi_form_iter it;
    struct wi_slice k, v;
    size_t cap = 1, d = 0;

    *pairs = NULL, *np = 0, *buf = NULL;
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) cap += s[i] == '&';
    if (!(*pairs = malloc(cap * sizeof **pairs)) || !(*buf = malloc(n))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    wi_form_init(&it, s, n);
    while (wi_form_next(&it, &k, &v)) {
        char *dec = *buf;
        if (*np == WI_FORM_MAX_PAIRS) { /* before any sort: the pre-key cost stays linear */
            wi_err_set(err, bad_code, "form body has more than %d fields", WI_FORM_MAX_PAIRS);
            goto fail;
        }
        long kl = wi_form_decode(k, dec + d), vl = kl < 0 ? -1 : wi_form_decode(v, dec + d + (size_t)kl);
        if (kl < 0 || vl < 0) {
            wi_err_set(err, bad_code, "form body has a malformed %%-escape");
            goto fail;
        }
        (*pairs)[(*np)++] = (struct wi_form_pair){dec + d, dec + d + (size_t)kl, (size_t)kl, (size_t)vl};
        d += (size_t)kl + (size_t)vl;
    }
    qsort(*pairs, *np, sizeof **pairs, cmp_pair);
    return 0;
fail:
    free(*pairs);
    free(*buf);
    *pairs = NULL, *np = 0, *buf = NULL;
    return -1;
}

int wi_form_sorted(const char *s, size_t n, char **out, size_t *outn, int bad_code, struct wi_err *err)
{
    struct wi_form_pair *pairs;
    char *dec, *res = NULL;
    size_t np, o = 0;

    *out = NULL;
    *outn = 0;
    if (wi_form_sorted_pairs(s, n, &pairs, &np, &dec, bad_code, err)) return -1;
    if (!n) return 0;
    if (!(res = malloc(n))) {
        free(pairs);
        free(dec);
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < np; i++) {
        if (i && !cmp_pair(&pairs[i - 1], &pairs[i])) continue; /* a repeated name=value counts once */
        memcpy(res + o, pairs[i].name, pairs[i].nlen);
        memcpy(res + o + pairs[i].nlen, pairs[i].value, pairs[i].vlen);
        o += pairs[i].nlen + pairs[i].vlen;
    }
    free(pairs);
    free(dec);
    *out = res;
    *outn = o;
    return 0;
}

size_t wi_url_unescape(const char *url, size_t n, const char *keep, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (url[i] == '%' && n - i >= 3) {
            int hi = hexval((unsigned char)url[i + 1]), lo = hexval((unsigned char)url[i + 2]);
            char c = hi >= 0 && lo >= 0 ? (char)(hi << 4 | lo) : '\0';
            if (c && strchr(keep, c)) {
                out[o++] = c;
                i += 2;
                continue;
            }
        }
        out[o++] = url[i];
    }
    return o;
}
