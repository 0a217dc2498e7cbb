/* sig_header.c - signature header tokenizers: k=v lists, prefixes, unix timestamps. */
#include "sig_header.h"

#include <string.h>

static int is_blank(char c) { return c == ' ' || c == '\t'; }

void wi_kv_init(struct wi_kv_iter *it, const char *s, size_t n, char sep, char eq)
{
    it->p = s;
    it->end = s ? s + n : s;
    it->sep = sep;
    it->eq = eq;
}

struct wi_slice wi_slice_trim(struct wi_slice s)
{
    if (!s.p) return s;
    while (s.n && is_blank(s.p[0])) {
        s.p++;
        s.n--;
    }
    while (s.n && is_blank(s.p[s.n - 1])) s.n--;
    return s;
}

int wi_kv_next(struct wi_kv_iter *it, struct wi_slice *key, struct wi_slice *value)
{
    while (it->p && it->p < it->end) {
        const char *start = it->p, *stop = it->p;
        while (stop < it->end && *stop != it->sep) stop++;
        it->p = stop < it->end ? stop + 1 : it->end;

        struct wi_slice item = wi_slice_trim((struct wi_slice){start, (size_t)(stop - start)});
        if (item.n == 0) continue;
        const char *e = memchr(item.p, it->eq, item.n);
        if (!e) {
            *key = item;
            *value = (struct wi_slice){NULL, 0};
        } else {
            *key = wi_slice_trim((struct wi_slice){item.p, (size_t)(e - item.p)});
            *value = wi_slice_trim((struct wi_slice){e + 1, (size_t)(item.p + item.n - e - 1)});
        }
        return 1;
    }
    return 0;
}

int wi_slice_eq(struct wi_slice s, const char *lit)
{
    size_t n = strlen(lit);
    return s.p && s.n == n && memcmp(s.p, lit, n) == 0;
}

int wi_slice_strip_prefix(struct wi_slice s, const char *prefix, struct wi_slice *rest)
{
    size_t n = strlen(prefix);
    if (!s.p || s.n < n || memcmp(s.p, prefix, n) != 0) return 0;
    *rest = (struct wi_slice){s.p + n, s.n - n};
    return 1;
}

int wi_parse_unix_ts(struct wi_slice s, int64_t *out)
{
    int64_t v = 0;
    if (!s.p || s.n == 0 || s.n > 18) return -1;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9') return -1;
        v = v * 10 + (s.p[i] - '0');
    }
    *out = v;
    return 0;
}
