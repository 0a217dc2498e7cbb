/* ordering.c - the ordering key and event time of a payload, read from its JSON text the way
 * webhook_inbox_ordering_key/_time read the stored jsonb (db/functions/ordering.sql), or left
 * to them. Walks only the objects on a path; skips everything else by bracket matching. */
#include "ordering.h"

#include <string.h>

#include "json.h"
#include "json_skip.h"

enum walk { FOUND, MISSING, UNSURE };

static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static const char *literal_end(const char *p, const char *end, const char *word, size_t n)
{
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

/* p at a value: one past its end, or NULL when it is not one. Containers are only bracket
 * matched (json_skip.h): text PostgreSQL refuses is stored raw, and then nothing derived here
 * is used (store.c derives nothing for a raw payload). */
static const char *value_end(const char *p, const char *end)
{
    unsigned sflags = 0;
    int code, is_int;
    const char *q;

    if (p >= end)
        return NULL;
    switch (*p) {
    case '{':
    case '[':
        return wi_json_skip_container(p, end);
    case '"':
        q = wi_json_string_end(p + 1, end, &sflags, &code);
        return q ? q + 1 : NULL;
    case 't': return literal_end(p, end, "true", 4);
    case 'f': return literal_end(p, end, "false", 5);
    case 'n': return literal_end(p, end, "null", 4);
    default: return wi_json_number_end(p, end, &is_int);
    }
}

/* Whether the key body k[0..kn) (string flags sflags) is name[0..len) once its escapes are
 * decoded, as jsonb compares keys. Each decoded byte takes at most 6 escaped ones, so a
 * longer body cannot match. *unsure is set for a body too long to decode here. */
static int key_is(const char *k, size_t kn, unsigned sflags, const char *name, size_t len, int *unsure)
{
    char decoded[1024];

    if (!(sflags & WI_JSON_S_ESCAPED))
        return kn == len && memcmp(k, name, len) == 0;
    if (kn / 6 > len)
        return 0;
    if (kn > sizeof decoded) {
        *unsure = 1;
        return 0;
    }
    return wi_json_unescape(k, kn, decoded) == len && memcmp(decoded, name, len) == 0;
}

/* p at '{': the value of its last member named name[0..len) (jsonb keeps the last of
 * duplicate keys) in *val. */
static enum walk member(const char *p, const char *end, const char *name, size_t len, const char **val)
{
    int found = 0, unsure = 0;

    p = ws(p + 1, end);
    if (p < end && *p == '}')
        return MISSING;
    for (;;) {
        unsigned sflags = 0;
        int code, hit;
        const char *key, *q, *v;

        if (p >= end || *p != '"' || !(q = wi_json_string_end(key = p + 1, end, &sflags, &code)))
            return UNSURE;
        hit = key_is(key, (size_t)(q - key), sflags, name, len, &unsure);
        if (unsure)
            return UNSURE;
        p = ws(q + 1, end);
        if (p >= end || *p != ':')
            return UNSURE;
        v = ws(p + 1, end);
        if (!(p = value_end(v, end)))
            return UNSURE;
        if (hit) {
            *val = v;
            found = 1;
        }
        p = ws(p, end);
        if (p < end && *p == ',') {
            p = ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}')
            return found ? FOUND : MISSING;
        return UNSURE;
    }
}

/* The value at path[0..plen) (members split by '.', as string_to_array does) below the
 * value at p: MISSING when a member is absent or a scalar has members left (jsonb's #> gives
 * NULL); UNSURE through an array (jsonb reads a member as an index there) or for an empty
 * path (string_to_array('', '.') is {}: the whole document). */
static enum walk walk(const char *p, const char *end, const char *path, size_t plen, const char **val)
{
    const char *seg = path, *pend = path + plen;

    if (plen == 0)
        return UNSURE;
    for (;;) {
        const char *dot = memchr(seg, '.', (size_t)(pend - seg));
        size_t n = dot ? (size_t)(dot - seg) : (size_t)(pend - seg);
        enum walk w;

        if (p >= end || *p == '[')
            return UNSURE;
        if (*p != '{')
            return MISSING;
        if ((w = member(p, end, seg, n, &p)) != FOUND)
            return w;
        if (!dot) {
            *val = p;
            return FOUND;
        }
        seg = dot + 1;
    }
}

/* The text jsonb's #>> gives for the value at v, into buf (at most cap bytes): FOUND, MISSING
 * for null, UNSURE for what only jsonb can print (objects, arrays, numbers that are not plain
 * integers) or what does not fit. */
static enum walk value_text(const char *v, const char *end, char *buf, size_t cap, size_t *len)
{
    unsigned sflags = 0;
    int code, is_int;
    const char *q;
    size_t n;

    switch (*v) {
    case '"':
        if (!(q = wi_json_string_end(v + 1, end, &sflags, &code)) ||
            (sflags & (WI_JSON_S_NUL | WI_JSON_S_SURROGATE)) || (n = (size_t)(q - v - 1)) > cap)
            return UNSURE;
        if (sflags & WI_JSON_S_ESCAPED) {
            *len = wi_json_unescape(v + 1, n, buf);
        } else {
            memcpy(buf, v + 1, n);
            *len = n;
        }
        return FOUND;
    case 't':
    case 'f':
        n = *v == 't' ? 4 : 5;
        if (!literal_end(v, end, *v == 't' ? "true" : "false", n))
            return UNSURE;
        memcpy(buf, v, n);
        *len = n;
        return FOUND;
    case 'n':
        return literal_end(v, end, "null", 4) ? MISSING : UNSURE;
    case '{':
    case '[':
        return UNSURE;
    default:
        if (!(q = wi_json_number_end(v, end, &is_int)) || !is_int || (n = (size_t)(q - v)) > cap)
            return UNSURE;
        if (n == 2 && v[0] == '-' && v[1] == '0') { /* numeric prints -0 as 0 */
            v++;
            n = 1;
        }
        memcpy(buf, v, n);
        *len = n;
        return FOUND;
    }
}

/* One part of a spec: its alternatives split by '|', the first that is present wins
 * (string_to_array('', '|') is {}: an empty part has none). */
static enum walk part_text(const char *root, const char *end, const char *part, size_t plen,
                           char *buf, size_t cap, size_t *len)
{
    const char *alt = part, *pend = part + plen;

    while (plen > 0) {
        const char *bar = memchr(alt, '|', (size_t)(pend - alt));
        size_t n = bar ? (size_t)(bar - alt) : (size_t)(pend - alt);
        const char *v;
        enum walk w = walk(root, end, alt, n, &v);

        if (w == FOUND)
            w = value_text(v, end, buf, cap, len);
        if (w != MISSING)
            return w;
        if (!bar)
            break;
        alt = bar + 1;
    }
    return MISSING;
}

/* Whether escape_json (jsonb's output) would write text[0..n) as it is between quotes. */
static int plain_json_string(const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] < 0x20 || text[i] == '"' || text[i] == '\\')
            return 0;
    return 1;
}

/* The key: one part's text, or for several the JSON array jsonb_agg prints, ["a", "b"]. Any
 * part missing makes the key NULL, whatever the others are. */
static int derive_key(const char *root, const char *end, const char *spec, size_t spec_len,
                      struct wi_ordering *out)
{
    char text[WI_ORDERING_KEY_MAX];
    const char *part = spec, *send = spec + spec_len;
    size_t o = 0, nparts = 0, len = 0;
    int unsure = 0;

    if (spec_len == 0)
        return WI_ORDERING_NONE;
    for (;;) {
        const char *comma = memchr(part, ',', (size_t)(send - part));
        size_t n = comma ? (size_t)(comma - part) : (size_t)(send - part);
        enum walk w = part_text(root, end, part, n, text, sizeof text, &len);

        if (w == MISSING)
            return WI_ORDERING_NONE;
        if (w == UNSURE || unsure) {
            unsure = 1;
        } else if (nparts == 0 && !comma) {
            memcpy(out->key_text, text, len);
            o = len;
        } else if (!plain_json_string(text, len) || o + len + 4 > sizeof out->key_text) {
            unsure = 1; /* escaping, or past the length the SQL function hashes */
        } else {
            out->key_text[o++] = nparts == 0 ? '[' : ',';
            if (nparts > 0)
                out->key_text[o++] = ' ';
            out->key_text[o++] = '"';
            memcpy(out->key_text + o, text, len);
            o += len;
            out->key_text[o++] = '"';
        }
        nparts++;
        if (!comma)
            break;
        part = comma + 1;
    }
    if (unsure)
        return WI_ORDERING_SQL;
    if (nparts > 1) {
        if (o + 1 > sizeof out->key_text)
            return WI_ORDERING_SQL;
        out->key_text[o++] = ']';
    }
    out->key_len = o;
    return WI_ORDERING_VALUE;
}

/* The time: a JSON number at the path, seconds, or milliseconds from 1e11; NULL below 0,
 * from 1e14, or for anything but a number. A number with a fraction or an exponent is left
 * to SQL (numeric's arithmetic decides its float8). */
static int derive_time(const char *root, const char *end, const char *path, size_t plen,
                       struct wi_ordering *out)
{
    const char *v, *q;
    int is_int, neg;
    size_t n;

    if (!path)
        return WI_ORDERING_NONE;
    switch (walk(root, end, path, plen, &v)) {
    case MISSING: return WI_ORDERING_NONE;
    case UNSURE: return WI_ORDERING_SQL;
    case FOUND: break;
    }
    if (*v != '-' && (*v < '0' || *v > '9'))
        return WI_ORDERING_NONE; /* jsonb_typeof is not 'number' */
    if (!(q = wi_json_number_end(v, end, &is_int)) || !is_int)
        return WI_ORDERING_SQL;
    neg = *v == '-';
    v += neg;
    n = (size_t)(q - v);
    if (neg && !(n == 1 && *v == '0'))
        return WI_ORDERING_NONE;
    if (n >= 15)
        return WI_ORDERING_NONE; /* 1e14 or more */
    if (n >= 12) {               /* milliseconds: the exact quotient by 1000 */
        memcpy(out->time_text, v, n - 3);
        out->time_text[n - 3] = '.';
        memcpy(out->time_text + n - 2, v + n - 3, 3);
        out->time_len = n + 1;
    } else {
        memcpy(out->time_text, v, n);
        out->time_len = n;
    }
    return WI_ORDERING_VALUE;
}

void wi_ordering_derive(const char *json, size_t n, const char *spec, size_t spec_len,
                        const char *time_path, size_t time_path_len, struct wi_ordering *out)
{
    const char *end = json + n, *root = ws(json, end);

    out->key_len = out->time_len = 0;
    out->time = WI_ORDERING_NONE;
    if (root >= end || *root != '{') {
        out->key = spec_len == 0 ? WI_ORDERING_NONE : WI_ORDERING_SQL;
        if (out->key == WI_ORDERING_SQL)
            out->time = WI_ORDERING_SQL;
        return;
    }
    out->key = derive_key(root, end, spec, spec_len, out);
    if (out->key != WI_ORDERING_NONE)
        out->time = derive_time(root, end, time_path, time_path_len, out);
}
