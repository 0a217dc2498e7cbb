/* canon.c - Didit V2 canonical JSON: parse into an arena tree, sort keys by code point,
 * print like Python's json.dumps(sort_keys=True, separators=(",",":"), ensure_ascii=False). */
#include "canon.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "num.h"

enum { N_NULL, N_TRUE, N_FALSE, N_INT, N_FLOAT, N_STR, N_ARR, N_OBJ };

/* Every value, 24 bytes, containers included (the pre-key cost of a body is its node count
 * times this: "[[],[],...]" and "[0,0,...]" each take at most 12 bytes of tree per body
 * byte). Invariant: for a scalar raw points into the input (strings: bytes between the
 * quotes, escapes kept; numbers: their text) and raw_n is its length; for a container child
 * is its first child and raw_n its number of children. Lengths and counts are 32-bit
 * (inputs are limited to 4 GiB). */
struct node {
    union {
        const char *raw;     /* scalars: string body or number text */
        struct node *child;  /* containers: first child */
    };
    struct node *next;       /* next sibling */
    uint32_t raw_n;          /* scalars: length of raw; containers: children */
    unsigned char type;
};

/* An object member: its value and its key (40 bytes). */
struct member {
    struct node n;       /* first: a struct member * is a struct node * */
    const char *key;     /* decoded member key (input or arena memory) */
    uint32_t key_n;
    uint32_t ord;        /* position among its siblings: stable order for duplicates */
};

#define MEMBER(nd) ((struct member *)(nd))
#define CMEMBER(nd) ((const struct member *)(nd))

struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

/* Invariant: out_n <= max_out. */
struct canon {
    const char *p, *end;
    struct block *blocks;
    char *out;
    size_t out_n, out_cap;
    size_t max_out;            /* output limit (WI_CANON_E_TOO_LARGE beyond) */
    const _Atomic int *cancel; /* polled every TICK_MASK + 1 nodes; may be NULL */
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

static void *arena_alloc(struct canon *c, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (!c->blocks || c->blocks->cap - c->blocks->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        struct block *b = malloc(sizeof *b + cap);
        if (!b) {
            c->code = WI_ERR_NOMEM;
            return NULL;
        }
        b->next = c->blocks;
        b->used = 0;
        b->cap = cap;
        c->blocks = b;
    }
    void *r = c->blocks->data + c->blocks->used;
    c->blocks->used += n;
    return r;
}

static void arena_free(struct canon *c)
{
    while (c->blocks) {
        struct block *b = c->blocks;
        c->blocks = b->next;
        free(b);
    }
}

static void skip_ws(struct canon *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static struct node *parse(struct canon *c, int depth, int member);

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

static struct node *parse_container(struct canon *c, struct node *nd, int depth)
{
    int is_obj = *c->p == '{';
    char close = is_obj ? '}' : ']';
    struct node **tail = &nd->child;
    nd->type = is_obj ? N_OBJ : N_ARR;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return nd;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_n = 0;
        skip_ws(c);
        if (is_obj) {
            int sf;
            if (c->p >= c->end || *c->p != '"') goto syntax;
            if ((sf = parse_string(c, &key, &key_n)) < 0) return NULL;
            if (sf & WI_JSON_S_ESCAPED) {
                char *k = arena_alloc(c, key_n ? key_n : 1);
                if (!k) return NULL;
                key_n = wi_json_unescape(key, key_n, k);
                key = k;
            }
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') goto syntax;
            c->p++;
        }
        struct node *ch = parse(c, depth + 1, is_obj);
        if (!ch) return NULL;
        if (is_obj) {
            MEMBER(ch)->key = key;
            MEMBER(ch)->key_n = (uint32_t)key_n;
            MEMBER(ch)->ord = nd->raw_n;
        }
        nd->raw_n++;
        *tail = ch;
        tail = &ch->next;
        skip_ws(c);
        if (c->p >= c->end) goto syntax;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == close) {
            c->p++;
            return nd;
        }
        goto syntax;
    }
syntax:
    c->code = WI_JSON_E_SYNTAX;
    return NULL;
}

static int literal(struct canon *c, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return -1;
    c->p += n;
    return 0;
}

/* Parses one value; member: it is an object member and needs a key (a struct member). */
static struct node *parse(struct canon *c, int depth, int member)
{
    struct node *nd;
    if (depth > WI_JSON_MAX_DEPTH) {
        c->code = WI_JSON_E_DEPTH;
        return NULL;
    }
    skip_ws(c);
    if (c->p >= c->end) {
        c->code = WI_JSON_E_SYNTAX;
        return NULL;
    }
    size_t size = member ? sizeof(struct member) : sizeof(struct node);
    if (tick(c) || !(nd = arena_alloc(c, size))) return NULL;
    memset(nd, 0, size);
    switch (*c->p) {
    case '{':
    case '[':
        return parse_container(c, nd, depth);
    case '"': {
        size_t len;
        nd->type = N_STR;
        if (parse_string(c, &nd->raw, &len) < 0) return NULL;
        nd->raw_n = (uint32_t)len;
        return nd;
    }
    case 't':
        nd->type = N_TRUE;
        break;
    case 'f':
        nd->type = N_FALSE;
        break;
    case 'n':
        nd->type = N_NULL;
        break;
    default: {
        int is_int;
        const char *e = wi_json_number_end(c->p, c->end, &is_int);
        if (!e) {
            c->code = WI_JSON_E_SYNTAX;
            return NULL;
        }
        nd->type = is_int ? N_INT : N_FLOAT;
        nd->raw = c->p;
        nd->raw_n = (uint32_t)(e - c->p);
        c->p = e;
        return nd;
    }
    }
    if (literal(c, nd->type == N_TRUE ? "true" : nd->type == N_FALSE ? "false" : "null")) {
        c->code = WI_JSON_E_SYNTAX;
        return NULL;
    }
    return nd;
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
    if (n >= sizeof small && !(buf = arena_alloc(c, n + 1))) return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    d = strtod(buf, NULL);
    if (isinf(d)) return d < 0 ? put(c, "-Infinity", 9) : put(c, "Infinity", 8);
    if (d == trunc(d)) return put(c, big, wi_num_integral(d, big)); /* shorten_floats: an int */
    return put(c, big, wi_num_repr(d, big));
}

static int cmp_members(const void *a, const void *b)
{
    const struct member *x = *(const struct member *const *)a, *y = *(const struct member *const *)b;
    size_t n = x->key_n < y->key_n ? x->key_n : y->key_n;
    int r = n ? memcmp(x->key, y->key, n) : 0;
    if (r) return r;
    if (x->key_n != y->key_n) return x->key_n < y->key_n ? -1 : 1;
    return x->ord < y->ord ? -1 : x->ord > y->ord;
}

static int emit(struct canon *c, const struct node *nd)
{
    if (tick(c)) return -1;
    switch (nd->type) {
    case N_NULL: return put(c, "null", 4);
    case N_TRUE: return put(c, "true", 4);
    case N_FALSE: return put(c, "false", 5);
    case N_INT: return put_int(c, nd->raw, nd->raw_n);
    case N_FLOAT: return put_float(c, nd->raw, nd->raw_n);
    case N_STR: return put_string(c, nd->raw, nd->raw_n, 0);
    case N_ARR:
        if (putc_(c, '[')) return -1;
        for (const struct node *ch = nd->child; ch; ch = ch->next) {
            if (ch != nd->child && putc_(c, ',')) return -1;
            if (emit(c, ch)) return -1;
        }
        return putc_(c, ']');
    default: {
        const struct member **m = NULL;
        size_t k = 0, count = nd->raw_n;
        int first = 1;
        if (count > 1) {
            if (!(m = arena_alloc(c, count * sizeof *m))) return -1;
            for (const struct node *ch = nd->child; ch; ch = ch->next) m[k++] = CMEMBER(ch);
            qsort(m, k, sizeof *m, cmp_members);
        }
        if (putc_(c, '{')) return -1;
        for (size_t i = 0; i < count; i++) {
            const struct member *ch = m ? m[i] : CMEMBER(nd->child);
            const struct member *nx = m && i + 1 < k ? m[i + 1] : NULL;
            if (nx && nx->key_n == ch->key_n && !memcmp(nx->key, ch->key, ch->key_n))
                continue; /* a later duplicate wins, like a Python dict */
            if (!first && putc_(c, ',')) return -1;
            first = 0;
            if (put_string(c, ch->key, ch->key_n, 1) || putc_(c, ':') || emit(c, &ch->n)) return -1;
        }
        return putc_(c, '}');
    }
    }
}

int wi_canon_didit(const char *p, size_t n, size_t max_out, const _Atomic int *cancel, char **out,
                   size_t *out_n, struct wi_err *err)
{
    static const char *const names[] = {"not valid JSON", "JSON nested too deeply",
                                        "invalid UTF-8 in a JSON string",
                                        "lone surrogate escape in a JSON string"};
    struct canon c = {.p = p, .end = p + n, .max_out = max_out, .cancel = cancel};
    struct node *root;

    *out = NULL;
    *out_n = 0;
    if (n > UINT32_MAX) /* node lengths are 32-bit */
        return wi_err_set(err, WI_CANON_E_TOO_LARGE, "bodies over 4 GiB are not canonicalized");
    root = parse(&c, 0, 0);
    if (root) {
        skip_ws(&c);
        if (c.p != c.end) {
            c.code = WI_JSON_E_SYNTAX;
            root = NULL;
        }
    }
    if (!root || reserve(&c, (n < max_out ? n : max_out) + 16) || emit(&c, root)) goto fail;
    arena_free(&c);
    *out = c.out;
    *out_n = c.out_n;
    return 0;
fail:
    arena_free(&c);
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
