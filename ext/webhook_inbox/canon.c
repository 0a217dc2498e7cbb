/* canon.c - Didit V2 canonical JSON: validate the body once, recording each object's members
 * (key and where its value starts); then print it again from the body, objects with their
 * members sorted by code point, like Python's json.dumps(sort_keys=True, separators=(",",":"),
 * ensure_ascii=False). Arrays and scalars cost no memory: an adversarial body's pre-key cost
 * stays near an ordinary one's. */
#include "canon.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "num.h"

#define NONE UINT32_MAX
#define KEY_DECODED 0x80000000u /* member.key_n: the key is in canon.keys (it had escapes) */

/* An object member (16 bytes): offsets into the body (or canon.keys). */
struct member {
    uint32_t key, key_n; /* key bytes, decoded; key_n may carry KEY_DECODED */
    uint32_t val;        /* where its value starts */
    uint32_t next;       /* the object's next member in body order, or NONE */
};

/* An object (12 bytes). objs[] is in body order, so sorted by off. */
struct object {
    uint32_t off, end; /* its '{' and one past its '}' */
    uint32_t first;    /* first member, or NONE */
};

/* Invariant: out_n <= max_out; every array only grows during a call (indices stay valid,
 * pointers into them do not). */
struct canon {
    const char *base, *p, *end;
    struct member *mem;
    struct object *obj;
    uint32_t *order;           /* pass 2: a stack of member indices being sorted or printed */
    size_t next_obj;           /* pass 2: the object after the one printed last */
    char *keys, *tmp;          /* decoded keys; a long number's NUL-terminated copy */
    size_t nmem, cap_mem, nobj, cap_obj, norder, cap_order, nkeys, cap_keys, tmp_cap;
    char *out;
    size_t out_n, out_cap;
    size_t max_out;            /* output limit (WI_CANON_E_TOO_LARGE beyond) */
    const _Atomic int *cancel; /* polled every TICK_MASK + 1 values; may be NULL */
    unsigned ticks;
    int code; /* WI_JSON_E_*, WI_CANON_E_* or WI_ERR_NOMEM on failure */
};

#define TICK_MASK 1023u

/* 0, or -1 with c->code set once another thread asked to stop. */
static int tick(struct canon *c)
{
    if ((++c->ticks & TICK_MASK) || !c->cancel || !atomic_load_explicit(c->cancel, memory_order_relaxed))
        return 0;
    c->code = WI_CANON_E_INTERRUPTED;
    return -1;
}

/* Room for want elements of size each in *arr (capacity *cap, doubled as needed). Returns
 * 0, or -1 (WI_ERR_NOMEM). */
static int grow(struct canon *c, void **arr, size_t *cap, size_t size, size_t want)
{
    if (want > *cap) {
        size_t n = *cap ? *cap : 64;
        while (n < want) n *= 2;
        void *p = realloc(*arr, n * size);
        if (!p) {
            c->code = WI_ERR_NOMEM;
            return -1;
        }
        *arr = p;
        *cap = n;
    }
    return 0;
}

static const char *skip(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static void skip_ws(struct canon *c) { c->p = skip(c->p, c->end); }

/* ---- pass 1: validate, record objects and members ---- */

/* Parses the string at c->p (a quote); sets raw/raw_n; returns its flags or -1. */
static int parse_string(struct canon *c, const char **raw, size_t *raw_n)
{
    unsigned sf = 0;
    int code;
    const char *start = c->p + 1, *q = wi_json_string_end(start, c->end, &sf, &code);
    if (!q) {
        c->code = code;
        return -1;
    }
    if (sf & WI_JSON_S_SURROGATE) {
        c->code = WI_JSON_E_SURROGATE;
        return -1;
    }
    *raw = start;
    *raw_n = (size_t)(q - start);
    c->p = q + 1;
    return (int)sf;
}

static int literal(struct canon *c, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return -1;
    c->p += n;
    return 0;
}

static int parse(struct canon *c, int depth);

/* The member whose key is the string at c->p, appended to object k after member *last. */
static int parse_member(struct canon *c, size_t k, uint32_t *last, int depth)
{
    const char *key;
    size_t key_n;
    int sf;
    struct member m = {.next = NONE};
    if (c->p >= c->end || *c->p != '"') return c->code = WI_JSON_E_SYNTAX, -1;
    if ((sf = parse_string(c, &key, &key_n)) < 0) return -1;
    if (sf & WI_JSON_S_ESCAPED) {
        if (grow(c, (void **)&c->keys, &c->cap_keys, 1, c->nkeys + key_n + 1)) return -1;
        m.key = (uint32_t)c->nkeys;
        m.key_n = (uint32_t)wi_json_unescape(key, key_n, c->keys + c->nkeys) | KEY_DECODED;
        c->nkeys += m.key_n & ~KEY_DECODED;
    } else {
        m.key = (uint32_t)(key - c->base);
        m.key_n = (uint32_t)key_n;
    }
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return c->code = WI_JSON_E_SYNTAX, -1;
    c->p++;
    skip_ws(c);
    m.val = (uint32_t)(c->p - c->base);
    if (grow(c, (void **)&c->mem, &c->cap_mem, sizeof *c->mem, c->nmem + 1)) return -1;
    c->mem[c->nmem] = m;
    if (*last == NONE) c->obj[k].first = (uint32_t)c->nmem;
    else c->mem[*last].next = (uint32_t)c->nmem;
    *last = (uint32_t)c->nmem++;
    return parse(c, depth + 1);
}

static int parse_container(struct canon *c, int depth)
{
    int is_obj = *c->p == '{';
    char close = is_obj ? '}' : ']';
    size_t k = c->nobj;
    uint32_t last = NONE;
    if (is_obj) {
        if (grow(c, (void **)&c->obj, &c->cap_obj, sizeof *c->obj, c->nobj + 1)) return -1;
        c->obj[c->nobj++] = (struct object){(uint32_t)(c->p - c->base), 0, NONE};
    }
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
    } else {
        for (;;) {
            skip_ws(c);
            if (is_obj ? parse_member(c, k, &last, depth) : parse(c, depth + 1)) return -1;
            skip_ws(c);
            if (c->p >= c->end) return c->code = WI_JSON_E_SYNTAX, -1;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p != close) return c->code = WI_JSON_E_SYNTAX, -1;
            c->p++;
            break;
        }
    }
    if (is_obj) c->obj[k].end = (uint32_t)(c->p - c->base);
    return 0;
}

/* Validates one value at c->p (after whitespace). */
static int parse(struct canon *c, int depth)
{
    const char *raw;
    size_t n;
    if (depth > WI_JSON_MAX_DEPTH) return c->code = WI_JSON_E_DEPTH, -1;
    skip_ws(c);
    if (c->p >= c->end) return c->code = WI_JSON_E_SYNTAX, -1;
    if (tick(c)) return -1;
    switch (*c->p) {
    case '{':
    case '[': return parse_container(c, depth);
    case '"': return parse_string(c, &raw, &n) < 0 ? -1 : 0;
    case 't': return literal(c, "true") ? (c->code = WI_JSON_E_SYNTAX, -1) : 0;
    case 'f': return literal(c, "false") ? (c->code = WI_JSON_E_SYNTAX, -1) : 0;
    case 'n': return literal(c, "null") ? (c->code = WI_JSON_E_SYNTAX, -1) : 0;
    default: {
        int is_int;
        const char *e = wi_json_number_end(c->p, c->end, &is_int);
        if (!e) return c->code = WI_JSON_E_SYNTAX, -1;
        c->p = e;
        return 0;
    }
    }
}

/* ---- output ---- */

static int reserve(struct canon *c, size_t n)
{
    if (c->out_cap - c->out_n >= n) return 0;
    size_t cap = c->out_cap ? c->out_cap : 256;
    while (cap - c->out_n < n) cap *= 2;
    char *p = realloc(c->out, cap);
    if (!p) {
        c->code = WI_ERR_NOMEM;
        return -1;
    }
    c->out = p;
    c->out_cap = cap;
    return 0;
}

static int put(struct canon *c, const char *s, size_t n)
{
    if (n > c->max_out - c->out_n) {
        c->code = WI_CANON_E_TOO_LARGE;
        return -1;
    }
    if (reserve(c, n)) return -1;
    memcpy(c->out + c->out_n, s, n);
    c->out_n += n;
    return 0;
}

static int putc_(struct canon *c, char ch) { return put(c, &ch, 1); }

/* Writes a decoded code point the way Python's ensure_ascii=False encoder does. */
static int put_cp(struct canon *c, unsigned cp)
{
    static const char hex[] = "0123456789abcdef";
    char b[6];
    switch (cp) {
    case '"': return put(c, "\\\"", 2);
    case '\\': return put(c, "\\\\", 2);
    case '\b': return put(c, "\\b", 2);
    case '\f': return put(c, "\\f", 2);
    case '\n': return put(c, "\\n", 2);
    case '\r': return put(c, "\\r", 2);
    case '\t': return put(c, "\\t", 2);
    }
    if (cp < 0x20) {
        b[0] = '\\', b[1] = 'u', b[2] = '0', b[3] = '0', b[4] = hex[cp >> 4], b[5] = hex[cp & 15];
        return put(c, b, 6);
    }
    if (cp < 0x80) return putc_(c, (char)cp);
    if (cp < 0x800) {
        b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F));
        return put(c, b, 2);
    }
    if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        return put(c, b, 3);
    }
    b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F));
    return put(c, b, 4);
}

static unsigned hex4(const char *p)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        v = v << 4 | (unsigned)(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
    }
    return v;
}

/* Prints a decoded string (key) or a raw string body (escapes still in place). */
static int put_string(struct canon *c, const char *s, size_t n, int decoded)
{
    if (putc_(c, '"')) return -1;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        if (decoded) {
            while (j < n && (unsigned char)s[j] >= 0x20 && s[j] != '"' && s[j] != '\\') j++;
        } else {
            while (j < n && s[j] != '\\') j++;
        }
        if (j > i && put(c, s + i, j - i)) return -1;
        if (j >= n) break;
        if (decoded) {
            if (put_cp(c, (unsigned char)s[j])) return -1;
            i = j + 1;
            continue;
        }
        char e = s[j + 1];
        unsigned cp;
        i = j + 2;
        switch (e) {
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            cp = hex4(s + i);
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* validated: a low surrogate follows */
                cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(s + i + 2) - 0xDC00);
                i += 6;
            }
            break;
        default: cp = (unsigned char)e; break; /* " \ / */
        }
        if (put_cp(c, cp)) return -1;
    }
    return putc_(c, '"');
}

static int put_int(struct canon *c, const char *s, size_t n)
{
    if (n == 2 && s[0] == '-' && s[1] == '0') return putc_(c, '0');
    return put(c, s, n);
}

static int put_digits(struct canon *c, int neg, const char *digits, int nd, int decpt)
{
    char out[WI_NUM_REPR_MAX];
    return put(c, out, wi_num_format(neg, digits, nd, decpt, out));
}

/* Fast path for the common case: a number text with at most 15 significant digits and a
 * moderate exponent. Any two such decimals map to distinct doubles (DBL_DIG is 15), so its
 * own digits are the shortest round-trip digits and no strtod/printf is needed. Returns 1
 * when it printed the number, 0 to fall back, -1 on error. */
static int put_float_fast(struct canon *c, const char *s, size_t n)
{
    char digits[16];
    int nd = 0, neg = 0, decpt = 0, seen_point = 0, leading = 1;
    long exp = 0;
    size_t i = 0;
    if (s[0] == '-') neg = 1, i = 1;
    for (; i < n && s[i] != 'e' && s[i] != 'E'; i++) {
        if (s[i] == '.') {
            seen_point = 1;
            continue;
        }
        if (leading && s[i] == '0') {
            if (seen_point) decpt--;
            continue;
        }
        leading = 0;
        if (nd == 15) {
            if (s[i] != '0') return 0; /* more than 15 significant digits */
            if (!seen_point) decpt++;
            continue;
        }
        digits[nd++] = s[i];
        if (!seen_point) decpt++;
    }
    if (i < n) { /* exponent */
        int eneg = 0;
        i++;
        if (s[i] == '+' || s[i] == '-') eneg = s[i++] == '-';
        for (; i < n; i++) {
            exp = exp * 10 + (s[i] - '0');
            if (exp > 10000) return 0;
        }
        if (eneg) exp = -exp;
    }
    while (nd > 0 && digits[nd - 1] == '0') nd--;
    if (nd == 0) return putc_(c, '0') == 0 ? 1 : -1; /* 0.0, -0.0, 0e5: int 0 */
    decpt += (int)exp;
    if (decpt < -290 || decpt > 15) return 0;      /* subnormal/huge: exact path */
    if (decpt >= nd) { /* integral and below 2^53: digits then zeros, as an int */
        char out[24];
        int o = 0;
        if (neg) out[o++] = '-';
        for (int k = 0; k < decpt; k++) out[o++] = k < nd ? digits[k] : '0';
        return put(c, out, (size_t)o) == 0 ? 1 : -1;
    }
    return put_digits(c, neg, digits, nd, decpt) == 0 ? 1 : -1;
}

/* Any other number: read by strtod (correctly rounded for any length), then printed in
 * time proportional to its digits; the output limit stops a run of huge integral values. */
static int put_float(struct canon *c, const char *s, size_t n)
{
    char small[64], *buf = small, big[WI_NUM_INTEGRAL_MAX];
    double d;
    int r = put_float_fast(c, s, n);
    if (r) return r < 0 ? -1 : 0;
    if (n >= sizeof small) {
        if (grow(c, (void **)&c->tmp, &c->tmp_cap, 1, n + 1)) return -1;
        buf = c->tmp;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    d = strtod(buf, NULL);
    if (isinf(d)) return d < 0 ? put(c, "-Infinity", 9) : put(c, "Infinity", 8);
    if (d == trunc(d)) return put(c, big, wi_num_integral(d, big)); /* shorten_floats: an int */
    return put(c, big, wi_num_repr(d, big));
}

/* ---- pass 2: print from the body ---- */

static const char *key_of(const struct canon *c, const struct member *m)
{
    return (m->key_n & KEY_DECODED ? c->keys : c->base) + m->key;
}

/* Code point order of two members' keys (bytewise on UTF-8); 0 when equal. */
static int cmp_keys(const struct canon *c, uint32_t a, uint32_t b)
{
    const struct member *x = &c->mem[a], *y = &c->mem[b];
    size_t xn = x->key_n & ~KEY_DECODED, yn = y->key_n & ~KEY_DECODED, n = xn < yn ? xn : yn;
    int r = n ? memcmp(key_of(c, x), key_of(c, y), n) : 0;
    return r ? r : (xn > yn) - (xn < yn);
}

/* Stable merge sort of v[0..n) by key, with t[0..n) as scratch; the result ends in v. Keys
 * already in order (Didit sends them sorted; duplicates) cost n - 1 comparisons, and two
 * runs already in order are not merged. */
static void sort_members(const struct canon *c, uint32_t *v, uint32_t *t, size_t n)
{
    size_t i = 1;
    while (i < n && cmp_keys(c, v[i - 1], v[i]) <= 0) i++;
    if (i >= n) return;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, j = mid, o = lo;
            i = lo;
            if (mid < hi && cmp_keys(c, v[mid - 1], v[mid]) > 0)
                while (i < mid && j < hi) t[o++] = cmp_keys(c, v[j], v[i]) < 0 ? v[j++] : v[i++];
            memcpy(t + o, v + i, (mid - i) * sizeof *v), o += mid - i;
            memcpy(t + o, v + j, (hi - j) * sizeof *v);
        }
        memcpy(v, t, n * sizeof *v);
    }
}

static const char *emit(struct canon *c, const char *p);

/* Prints the object at p (its record found by offset), members sorted, the last of
 * duplicate keys kept like a Python dict. Returns one past its '}', or NULL. */
static const char *emit_object(struct canon *c, const char *p)
{
    size_t lo = 0, hi = c->nobj, base = c->norder, n = 0;
    uint32_t off = (uint32_t)(p - c->base);
    if (c->next_obj < c->nobj && c->obj[c->next_obj].off == off) /* the one after the last: arrays */
        lo = c->next_obj;
    else
        while (lo < hi) { /* objs[] is sorted by off */
            size_t mid = lo + (hi - lo) / 2;
            if (c->obj[mid].off < off) lo = mid + 1;
            else hi = mid;
        }
    c->next_obj = lo + 1;
    const struct object o = c->obj[lo];
    for (uint32_t m = o.first; m != NONE; m = c->mem[m].next) n++;
    if (grow(c, (void **)&c->order, &c->cap_order, sizeof *c->order, base + 2 * n + 1)) return NULL;
    n = 0;
    for (uint32_t m = o.first; m != NONE; m = c->mem[m].next) c->order[base + n++] = m;
    c->norder = base + 2 * n;
    sort_members(c, c->order + base, c->order + base + n, n);
    if (putc_(c, '{')) return NULL;
    for (size_t i = 0, first = 1; i < n; i++) {
        uint32_t m = c->order[base + i]; /* c->order may move while a value prints */
        if (i + 1 < n && !cmp_keys(c, m, c->order[base + i + 1])) continue;
        if (!first && putc_(c, ',')) return NULL;
        first = 0;
        const struct member *x = &c->mem[m];
        if (put_string(c, key_of(c, x), x->key_n & ~KEY_DECODED, 1) || putc_(c, ':') ||
            !emit(c, c->base + c->mem[m].val))
            return NULL;
    }
    c->norder = base;
    return putc_(c, '}') ? NULL : c->base + o.end;
}

/* Prints the value pass 1 validated at p. Returns one past it, or NULL. */
static const char *emit(struct canon *c, const char *p)
{
    const char *e;
    unsigned sf = 0;
    int code, is_int;
    p = skip(p, c->end);
    if (tick(c)) return NULL;
    switch (*p) {
    case '{': return emit_object(c, p);
    case '[':
        if (putc_(c, '[')) return NULL;
        p = skip(p + 1, c->end);
        if (*p != ']')
            for (;;) {
                if (!(p = emit(c, p))) return NULL;
                p = skip(p, c->end);
                if (*p == ']') break;
                if (putc_(c, ',')) return NULL;
                p++;
            }
        return putc_(c, ']') ? NULL : p + 1;
    case '"':
        e = wi_json_string_end(p + 1, c->end, &sf, &code);
        return put_string(c, p + 1, (size_t)(e - p - 1), 0) ? NULL : e + 1;
    case 't': return put(c, "true", 4) ? NULL : p + 4;
    case 'f': return put(c, "false", 5) ? NULL : p + 5;
    case 'n': return put(c, "null", 4) ? NULL : p + 4;
    default:
        e = wi_json_number_end(p, c->end, &is_int);
        if (is_int ? put_int(c, p, (size_t)(e - p)) : put_float(c, p, (size_t)(e - p))) return NULL;
        return e;
    }
}

static void release(struct canon *c)
{
    free(c->mem);
    free(c->obj);
    free(c->order);
    free(c->keys);
    free(c->tmp);
}

int wi_canon_didit(const char *p, size_t n, size_t max_out, const _Atomic int *cancel, char **out,
                   size_t *out_n, struct wi_err *err)
{
    static const char *const names[] = {"not valid JSON", "JSON nested too deeply",
                                        "invalid UTF-8 in a JSON string",
                                        "lone surrogate escape in a JSON string"};
    struct canon c = {.base = p, .p = p, .end = p + n, .max_out = max_out, .cancel = cancel};
    int ok;

    *out = NULL;
    *out_n = 0;
    if (n >= KEY_DECODED) /* offsets are 32-bit, key lengths 31 */
        return wi_err_set(err, WI_CANON_E_TOO_LARGE, "bodies of 2 GiB or more are not canonicalized");
    ok = parse(&c, 0) == 0;
    if (ok) {
        skip_ws(&c);
        if (c.p != c.end) {
            c.code = WI_JSON_E_SYNTAX;
            ok = 0;
        }
    }
    if (!ok || reserve(&c, (n < max_out ? n : max_out) + 16) || !emit(&c, p)) goto fail;
    release(&c);
    *out = c.out;
    *out_n = c.out_n;
    return 0;
fail:
    release(&c);
    free(c.out);
    if (c.code == WI_ERR_NOMEM) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    if (c.code == WI_CANON_E_TOO_LARGE)
        return wi_err_set(err, c.code,
                          "the canonical JSON of this %zu-byte body would exceed %zu bytes "
                          "(%dx the body + %d); refused before any key check",
                          n, max_out, WI_CANON_GROWTH, WI_CANON_SLACK);
    if (c.code == WI_CANON_E_INTERRUPTED) return wi_err_set(err, c.code, "canonicalization interrupted");
    return wi_err_set(err, c.code, "%s at byte %zu", names[c.code - WI_JSON_E_SYNTAX],
                      (size_t)(c.p - p));
}

void wi_canon_free(char *buf)
{
    free(buf);
}
