/* json.c - RFC 8259 validator and top-level field extractor; string/number tokenizers
 * and escape decoding shared with canon.c. Never allocates. */
#include "json.h"
#include "json_skip.h"

#include <limits.h>
#include <string.h>

struct scan {
    const char *p, *end;
    unsigned flags;
    struct wi_json_field *fields;
    size_t nfields, found;
    int unsafe;  /* jsonb would reject the document */
    int code;    /* WI_JSON_E_* on failure */
};

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = (unsigned char)p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0 when invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no UTF-8-encoded surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

const char *wi_json_string_end(const char *p, const char *end, unsigned *sflags, int *code)
{
    const unsigned char *s = (const unsigned char *)p, *e = (const unsigned char *)end;
    *code = WI_JSON_E_SYNTAX;
    while (s < e) {
        unsigned char c = *s;
        if (c == '"') return (const char *)s;
        if (c == '\\') {
            *sflags |= WI_JSON_S_ESCAPED;
            if (e - s < 2) return NULL;
            switch (s[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                s += 2;
                break;
            case 'u': {
                unsigned u, u2;
                if (e - s < 6 || hex4((const char *)s + 2, &u)) return NULL;
                s += 6;
                if (u == 0) *sflags |= WI_JSON_S_NUL;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (e - s >= 6 && s[0] == '\\' && s[1] == 'u' &&
                        !hex4((const char *)s + 2, &u2) && u2 >= 0xDC00 && u2 <= 0xDFFF)
                        s += 6;
                    else
                        *sflags |= WI_JSON_S_SURROGATE;
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    *sflags |= WI_JSON_S_SURROGATE;
                }
                break;
            }
            default:
                return NULL;
            }
        } else if (c < 0x20) {
            return NULL;
        } else if (c < 0x80) {
            s++;
        } else {
            size_t l = utf8_len(s, e);
            if (!l) {
                *code = WI_JSON_E_UTF8;
                return NULL;
            }
            s += l;
        }
    }
    return NULL;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

const char *wi_json_number_end(const char *p, const char *end, int *is_int)
{
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && is_digit(*p)) p++;
    else
        return NULL;
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
    }
    return p;
}

/* Whether PostgreSQL's numeric input (PostgreSQL 14+, which jsonb uses) takes the JSON
 * number p[0..end): exponent magnitude below INT_MAX / 2; at most 16383 digits after the
 * point once the exponent is applied; and, unless the value is zero, its first significant
 * digit worth at most 10^131071. Older servers refuse more; the store then quarantines on
 * the server's answer (SQLSTATE class 22). */
static int number_fits_numeric(const char *p, const char *end)
{
    long long nint = 0, nfrac = 0, lead = 0, exp = 0;
    int nonzero = 0, neg = 0;

    if (p < end && *p == '-') p++;
    for (; p < end && is_digit(*p); p++, nint++)
        if (!nonzero && !(nonzero = *p != '0')) lead++;
    if (p < end && *p == '.')
        for (p++; p < end && is_digit(*p); p++, nfrac++)
            if (!nonzero && !(nonzero = *p != '0')) lead++;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) neg = *p++ == '-';
        for (; p < end; p++)
            if ((exp = exp * 10 + (*p - '0')) >= INT_MAX / 2) return 0;
        if (neg) exp = -exp;
    }
    if (nfrac - exp > 16383) return 0;
    return !nonzero || nint - 1 - lead + exp <= 131071;
}

static void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int fail(struct scan *s, int code)
{
    s->code = code;
    return -1;
}

static int literal(struct scan *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return fail(s, WI_JSON_E_SYNTAX);
    s->p += n;
    return 0;
}

static int string(struct scan *s, struct wi_slice *out, unsigned *sflags)
{
    int code;
    const char *start = ++s->p; /* past the quote */
    const char *q = wi_json_string_end(start, s->end, sflags, &code);
    if (!q) return fail(s, code);
    if (*sflags & (WI_JSON_S_NUL | WI_JSON_S_SURROGATE)) s->unsafe = 1;
    if (out) *out = (struct wi_slice){start, (size_t)(q - start)};
    s->p = q + 1;
    return 0;
}

/* Value at depth; at depth 1 (members of the top-level object) key names a member. */
static int value(struct scan *s, int depth, struct wi_json_field *match);

/* The field named key (escapes decoded), or NULL. A key met again marks its field
 * duplicate and returns NULL: the first value stays. Field names are short, so an escaped
 * key longer than 6 bytes per character of the longest name cannot match. */
static struct wi_json_field *find_field(struct scan *s, struct wi_slice key, unsigned kflags)
{
    char buf[128];
    if (kflags & WI_JSON_S_ESCAPED) {
        if (key.n > sizeof buf) return NULL;
        key = (struct wi_slice){buf, wi_json_unescape(key.p, key.n, buf)};
    }
    for (size_t i = 0; i < s->nfields; i++) {
        struct wi_json_field *f = &s->fields[i];
        if (strlen(f->name) != key.n || memcmp(f->name, key.p, key.n) != 0) continue;
        if (f->kind == WI_JSON_ABSENT) return f;
        f->duplicate = 1;
        return NULL;
    }
    return NULL;
}

static int object(struct scan *s, int depth)
{
    s->p++; /* '{' */
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        struct wi_slice key;
        unsigned kflags = 0;
        struct wi_json_field *f = NULL;
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"') return fail(s, WI_JSON_E_SYNTAX);
        if (string(s, &key, &kflags)) return -1;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') return fail(s, WI_JSON_E_SYNTAX);
        s->p++;
        if (depth == 0) f = find_field(s, key, kflags);
        if (value(s, depth + 1, f)) return -1;
        if (f && s->flags == WI_JSON_STOP_EARLY && s->found == s->nfields) return 0;
        skip_ws(s);
        if (s->p >= s->end) return fail(s, WI_JSON_E_SYNTAX);
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p == '}') {
            s->p++;
            return 0;
        }
        return fail(s, WI_JSON_E_SYNTAX);
    }
}

static int array(struct scan *s, int depth)
{
    s->p++; /* '[' */
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        if (value(s, depth + 1, NULL)) return -1;
        skip_ws(s);
        if (s->p >= s->end) return fail(s, WI_JSON_E_SYNTAX);
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p == ']') {
            s->p++;
            return 0;
        }
        return fail(s, WI_JSON_E_SYNTAX);
    }
}

/* STOP_EARLY mode: skips a nested container without validating it (json_skip.c). */
static int skip_container(struct scan *s)
{
    const char *e = wi_json_skip_container(s->p, s->end);
    if (!e) return fail(s, WI_JSON_E_SYNTAX);
    s->p = e;
    return 0;
}

static int value(struct scan *s, int depth, struct wi_json_field *f)
{
    if (depth > WI_JSON_MAX_DEPTH) return fail(s, WI_JSON_E_DEPTH);
    skip_ws(s);
    if (s->p >= s->end) return fail(s, WI_JSON_E_SYNTAX);
    if (f) {
        f->kind = WI_JSON_OTHER;
        s->found++;
    }
    switch (*s->p) {
    case '{':
    case '[': {
        const char *start = s->p;
        int r = (s->flags & WI_JSON_STOP_EARLY) && depth > 0 ? skip_container(s)
                : *s->p == '{'                               ? object(s, depth)
                                                             : array(s, depth);
        if (!r && f) f->value = (struct wi_slice){start, (size_t)(s->p - start)};
        return r;
    }
    case '"': {
        unsigned sflags = 0;
        struct wi_slice v;
        if (string(s, &v, &sflags)) return -1;
        if (f) {
            f->kind = WI_JSON_STRING;
            f->value = v;
            f->escaped = (sflags & WI_JSON_S_ESCAPED) != 0;
        }
        return 0;
    }
    case 't': return literal(s, "true");
    case 'f': return literal(s, "false");
    case 'n': return literal(s, "null");
    default: {
        int is_int;
        const char *start = s->p, *e = wi_json_number_end(s->p, s->end, &is_int);
        if (!e) return fail(s, WI_JSON_E_SYNTAX);
        if (!number_fits_numeric(start, e)) s->unsafe = 1;
        s->p = e;
        if (f) {
            f->kind = WI_JSON_NUMBER;
            f->value = (struct wi_slice){start, (size_t)(e - start)};
        }
        return 0;
    }
    }
}

int wi_json_scan(const char *p, size_t n, unsigned flags, struct wi_json_field *fields,
                 size_t nfields, int *jsonb_unsafe, struct wi_err *err)
{
    static const char *const names[] = {"", "not valid JSON", "JSON nested too deeply",
                                        "invalid UTF-8 in a JSON string",
                                        "lone surrogate escape in a JSON string"};
    struct scan s = {p, p + n, flags, fields, nfields, 0, 0, 0};
    for (size_t i = 0; i < nfields; i++) {
        fields[i].kind = WI_JSON_ABSENT;
        fields[i].value = (struct wi_slice){NULL, 0};
        fields[i].escaped = 0;
        fields[i].duplicate = 0;
    }
    if (jsonb_unsafe) *jsonb_unsafe = 0;
    skip_ws(&s);
    if (s.p < s.end && *s.p == '{') {
        if (object(&s, 0)) goto bad;
        if (flags == WI_JSON_STOP_EARLY && nfields && s.found == nfields) goto ok;
    } else if (value(&s, 0, NULL)) {
        goto bad;
    }
    skip_ws(&s);
    if (s.p != s.end) {
        s.code = WI_JSON_E_SYNTAX;
        goto bad;
    }
ok:
    if (jsonb_unsafe) *jsonb_unsafe = s.unsafe;
    return 0;
bad:
    return wi_err_set(err, s.code, "%s at byte %zu", names[s.code - WI_JSON_E_SYNTAX + 1],
                      (size_t)(s.p - p));
}

const char *wi_json_value_end(const char *p, const char *end)
{
    struct scan s = {p, end, 0, NULL, 0, 0, 0, 0};
    skip_ws(&s);
    return value(&s, 1, NULL) ? NULL : s.p;
}

int wi_json_jsonb_safe(const char *p, size_t n)
{
    int unsafe = 0;
    if (wi_json_scan(p, n, 0, NULL, 0, &unsafe, NULL)) return 0;
    return !unsafe;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t wi_json_unescape(const char *s, size_t n, char *out)
{
    size_t o = 0, i = 0;
    while (i < n) {
        const char *bs = memchr(s + i, '\\', n - i);
        size_t run = bs ? (size_t)(bs - (s + i)) : n - i;
        memmove(out + o, s + i, run);
        o += run;
        i += run;
        if (i >= n) break;
        char c = s[i + 1];
        i += 2;
        switch (c) {
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            unsigned u = 0, u2 = 0;
            hex4(s + i, &u);
            i += 4;
            if (u >= 0xD800 && u <= 0xDBFF && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u' &&
                !hex4(s + i + 2, &u2) && u2 >= 0xDC00 && u2 <= 0xDFFF) {
                u = 0x10000 + ((u - 0xD800) << 10) + (u2 - 0xDC00);
                i += 6;
            }
            o += put_utf8(out + o, u);
            break;
        }
        default: out[o++] = c; break; /* " \ / */
        }
    }
    return o;
}
