/* sig.c - signature scheme dispatch and rules: body limit first, any secret may match,
 * constant-time comparison, timestamp tolerance, event id/type extraction. */
#include "sig.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include "canon.h"
#include "json.h"
#include "sig_header.h"

#define MAX_CANDIDATES 16 /* signatures considered per header; more are ignored */
#define MAX_PARTS 16
#define MAX_TOKENS 15

enum tok_kind { TOK_LIT, TOK_TS, TOK_ID, TOK_BODY };

struct tok {
    enum tok_kind kind;
    struct wi_slice lit; /* TOK_LIT: slice of v->tmpl */
};

/* Invariant: keys[0..nkeys) all use alg; names[] hold the header slots of the scheme. */
struct wi_sig_verifier {
    struct wi_sig_config cfg;     /* string fields point at the owned copies below */
    char *prefix, *sig_header, *ts_header, *id_header, *tmpl;
    struct tok tokens[MAX_TOKENS]; /* generic scheme: parsed template */
    size_t ntokens;
    enum wi_hmac_alg alg;
    size_t dlen;                   /* digest length */
    struct wi_hmac_key **keys;
    size_t nkeys, capkeys;
    const char *names[WI_SIG_MAX_HEADERS];
    size_t nnames;
};

/* Signatures offered for one signed content, decoded to bytes. */
struct group {
    struct wi_slice parts[MAX_PARTS];
    size_t nparts;
    unsigned char sig[MAX_CANDIDATES][WI_HMAC_MAX];
    size_t nsig;
};

static char *dup_or_null(const char *s, int *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

static int parse_template(struct wi_sig_verifier *v, struct wi_err *err)
{
    const char *p = v->tmpl, *end = v->tmpl + strlen(v->tmpl);
    int bodies = 0, signs_ts = 0;
    while (p < end) {
        if (v->ntokens >= MAX_TOKENS)
            return wi_err_set(err, WI_ERR_ARG, "signed-content template has too many parts");
        struct tok *t = &v->tokens[v->ntokens++];
        if (*p == '{') {
            const char *close = memchr(p, '}', (size_t)(end - p));
            size_t n = close ? (size_t)(close - p + 1) : 0;
            if (n == 11 && !memcmp(p, "{timestamp}", 11)) t->kind = TOK_TS;
            else if (n == 4 && !memcmp(p, "{id}", 4)) t->kind = TOK_ID;
            else if (n == 6 && !memcmp(p, "{body}", 6)) t->kind = TOK_BODY, bodies++;
            else
                return wi_err_set(err, WI_ERR_ARG,
                                  "signed-content template: unknown placeholder (use {timestamp}, {id}, {body})");
            p += n;
        } else {
            const char *brace = memchr(p, '{', (size_t)(end - p));
            const char *stop = brace ? brace : end;
            t->kind = TOK_LIT;
            t->lit = (struct wi_slice){p, (size_t)(stop - p)};
            p = stop;
        }
    }
    if (bodies != 1)
        return wi_err_set(err, WI_ERR_ARG, "signed-content template must contain {body} exactly once");
    for (size_t i = 0; i < v->ntokens; i++) {
        if (v->tokens[i].kind == TOK_TS && !v->ts_header)
            return wi_err_set(err, WI_ERR_ARG, "template uses {timestamp} but no timestamp header is set");
        if (v->tokens[i].kind == TOK_ID && !v->id_header)
            return wi_err_set(err, WI_ERR_ARG, "template uses {id} but no id header is set");
        signs_ts |= v->tokens[i].kind == TOK_TS;
    }
    /* A time check on a header the signature does not cover stops no replay: the sender of a
     * replay writes a fresh value. Refused rather than offered as protection. (An unsigned
     * id header is how GitHub and Shopify work; it stays allowed, and id_from_body offers
     * deduplication on the signed body instead.) */
    if (v->ts_header && !signs_ts)
        return wi_err_set(err, WI_ERR_ARG,
                          "timestamp header is set but the template does not sign {timestamp}: its time "
                          "check would not stop replays (add {timestamp} to the template, or drop the header)");
    return 0;
}

struct wi_sig_verifier *wi_sig_verifier_new(const struct wi_sig_config *cfg, struct wi_err *err)
{
    static const char *const sets[][WI_SIG_MAX_HEADERS] = {
        [WI_SCHEME_STRIPE] = {"stripe-signature"},
        [WI_SCHEME_STANDARD] = {"webhook-id", "webhook-timestamp", "webhook-signature", "svix-id",
                                "svix-timestamp", "svix-signature"},
        [WI_SCHEME_GITHUB] = {"x-hub-signature-256", "x-github-delivery", "x-github-event"},
        [WI_SCHEME_SHOPIFY] = {"x-shopify-hmac-sha256", "x-shopify-webhook-id",
                               "x-shopify-event-id", "x-shopify-topic"},
        [WI_SCHEME_SLACK] = {"x-slack-signature", "x-slack-request-timestamp"},
        [WI_SCHEME_PADDLE] = {"paddle-signature"},
        /* not X-Timestamp: no Didit signature covers it, so it is never read */
        [WI_SCHEME_DIDIT] = {"x-signature", "x-signature-v2", "x-signature-simple"},
        [WI_SCHEME_HMAC] = {NULL},
    };
    struct wi_sig_verifier *v;
    int oom = 0;

    if ((unsigned)cfg->scheme > WI_SCHEME_HMAC) {
        wi_err_set(err, WI_ERR_ARG, "unknown signature scheme");
        return NULL;
    }
    if (!(v = calloc(1, sizeof *v))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    v->cfg = *cfg;
    v->alg = cfg->scheme == WI_SCHEME_HMAC ? cfg->alg : WI_HMAC_SHA256;
    v->dlen = wi_hmac_size(v->alg);
    if (cfg->scheme != WI_SCHEME_HMAC) {
        for (size_t i = 0; i < WI_SIG_MAX_HEADERS; i++)
            if ((v->names[i] = sets[cfg->scheme][i])) v->nnames = i + 1;
        return v;
    }
    if ((unsigned)cfg->alg > WI_HMAC_SHA512 || (unsigned)cfg->encoding > WI_SIG_BASE64) {
        wi_err_set(err, WI_ERR_ARG, "unknown HMAC algorithm or encoding");
        goto fail;
    }
    if (!cfg->signature_header || !*cfg->signature_header) {
        wi_err_set(err, WI_ERR_ARG, "generic HMAC needs a signature header name");
        goto fail;
    }
    v->prefix = dup_or_null(cfg->prefix, &oom);
    v->sig_header = dup_or_null(cfg->signature_header, &oom);
    v->ts_header = dup_or_null(cfg->timestamp_header, &oom);
    v->id_header = dup_or_null(cfg->id_header, &oom);
    v->tmpl = dup_or_null(cfg->template ? cfg->template : "{body}", &oom);
    if (oom) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    v->names[0] = v->sig_header;
    v->names[1] = v->ts_header;
    v->names[2] = v->id_header;
    v->nnames = 3;
    if (parse_template(v, err)) goto fail;
    return v;
fail:
    wi_sig_verifier_free(v);
    return NULL;
}

void wi_sig_verifier_free(struct wi_sig_verifier *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->nkeys; i++) wi_hmac_key_free(v->keys[i]);
    free(v->keys);
    free(v->prefix);
    free(v->sig_header);
    free(v->ts_header);
    free(v->id_header);
    free(v->tmpl);
    free(v);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

int wi_sig_verifier_add_secret(struct wi_sig_verifier *v, const char *s, size_t n,
                               struct wi_err *err)
{
    unsigned char decoded[256];
    const void *key = s;
    size_t klen = n, idx = v->nkeys + 1;
    struct wi_hmac_key *k;

    if (n == 0) return wi_err_set(err, WI_ERR_ARG, "secret #%zu is empty", idx);
    if (is_space(s[0]) || is_space(s[n - 1]))
        return wi_err_set(err, WI_ERR_ARG,
                          "secret #%zu has leading or trailing whitespace (often a newline from a "
                          "file or ENV); strip it before passing it",
                          idx);
    if (v->cfg.scheme == WI_SCHEME_STANDARD) {
        struct wi_slice rest = {s, n};
        long dl;
        wi_slice_strip_prefix(rest, "whsec_", &rest);
        dl = wi_b64_decode(rest.p, rest.n, decoded, sizeof decoded);
        if (dl <= 0) {
            OPENSSL_cleanse(decoded, sizeof decoded);
            return wi_err_set(err, WI_ERR_ARG,
                              "secret #%zu is not base64 after the whsec_ prefix", idx);
        }
        key = decoded;
        klen = (size_t)dl;
    }
    if (v->nkeys == v->capkeys) {
        size_t cap = v->capkeys ? v->capkeys * 2 : 2;
        struct wi_hmac_key **nk = realloc(v->keys, cap * sizeof *nk);
        if (!nk) {
            OPENSSL_cleanse(decoded, sizeof decoded);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
        v->keys = nk;
        v->capkeys = cap;
    }
    k = wi_hmac_key_new(v->alg, key, klen, err);
    OPENSSL_cleanse(decoded, sizeof decoded);
    if (!k) return -1;
    v->keys[v->nkeys++] = k;
    return 0;
}

size_t wi_sig_verifier_secret_count(const struct wi_sig_verifier *v)
{
    return v->nkeys;
}

size_t wi_sig_verifier_headers(const struct wi_sig_verifier *v,
                               const char *names[WI_SIG_MAX_HEADERS])
{
    for (size_t i = 0; i < WI_SIG_MAX_HEADERS; i++) names[i] = v->names[i];
    return v->nnames;
}

/* Decodes one offered signature into g; ignores it when it has the wrong shape.
 * Returns 1 when it was added. */
static int offer(const struct wi_sig_verifier *v, struct group *g, struct wi_slice s,
                 enum wi_sig_encoding enc)
{
    long n;
    if (!s.p || g->nsig >= MAX_CANDIDATES) return 0;
    if (enc == WI_SIG_HEX) n = wi_hex_decode(s.p, s.n, g->sig[g->nsig], WI_HMAC_MAX);
    else n = wi_b64_decode(s.p, s.n, g->sig[g->nsig], WI_HMAC_MAX);
    if (n != (long)v->dlen) return 0;
    g->nsig++;
    return 1;
}

/* 1 when some secret signs g's content as one of g's signatures, 0 when none, -1 on a
 * crypto failure. Compares every candidate in constant time. */
static int match(const struct wi_sig_verifier *v, const struct group *g, struct wi_err *err)
{
    unsigned char mac[WI_HMAC_MAX];
    int found = 0;
    for (size_t k = 0; k < v->nkeys && !found; k++) {
        if (wi_hmac_compute(v->keys[k], g->parts, g->nparts, mac, err) < 0) return -1;
        for (size_t i = 0; i < g->nsig; i++) found |= wi_ct_equal(mac, g->sig[i], v->dlen);
    }
    OPENSSL_cleanse(mac, sizeof mac);
    return found;
}

static int check_time(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                      int64_t ts, struct wi_err *err)
{
    int64_t d = req->now - ts;
    if (v->cfg.tolerance >= 0 && (d > v->cfg.tolerance || -d > v->cfg.tolerance))
        return wi_err_set(err, WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE,
                          "timestamp is %lld s %s now; tolerance is %lld s",
                          (long long)(d < 0 ? -d : d), d < 0 ? "ahead of" : "behind",
                          (long long)v->cfg.tolerance);
    return 0;
}

static int header_ts(struct wi_slice h, int64_t *ts, struct wi_err *err)
{
    if (!h.p || !wi_slice_trim(h).n)
        return wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP, "timestamp header is missing");
    if (wi_parse_unix_ts(wi_slice_trim(h), ts))
        return wi_err_set(err, WI_SIG_E_MALFORMED_TIMESTAMP, "timestamp is not unix seconds");
    return 0;
}

/* Stripe "t=..,v1=.." and Paddle "ts=..;h1=..": the timestamp key and signature key. */
static int kv_scheme(const struct wi_sig_verifier *v, struct wi_slice h, char sep,
                     const char *tkey, const char *skey, const char *joiner, struct group *g,
                     int64_t *ts, struct wi_err *err)
{
    struct wi_kv_iter it;
    struct wi_slice k, val, t = {NULL, 0};
    size_t offered = 0;
    if (!h.p || !wi_slice_trim(h).n)
        return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "signature header is missing");
    wi_kv_init(&it, h.p, h.n, sep, '=');
    while (wi_kv_next(&it, &k, &val)) {
        if (wi_slice_eq(k, tkey) && val.p) t = val;
        else if (wi_slice_eq(k, skey)) offered++, offer(v, g, val, WI_SIG_HEX);
    }
    if (!t.p || wi_parse_unix_ts(t, ts))
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE,
                          "signature header has no valid %s= timestamp", tkey);
    if (!offered)
        return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "signature header has no %s= signature", skey);
    if (!g->nsig)
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "no %s= signature is well-formed hex", skey);
    g->parts[0] = t;
    g->parts[1] = (struct wi_slice){joiner, 1};
    g->nparts = 2; /* the caller appends the body */
    return 0;
}

static int one_signature(const struct wi_sig_verifier *v, struct wi_slice h, const char *prefix,
                         enum wi_sig_encoding enc, struct group *g, struct wi_err *err)
{
    struct wi_slice s = wi_slice_trim(h);
    if (!h.p || !s.n) return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "signature header is missing");
    if (prefix && *prefix && !wi_slice_strip_prefix(s, prefix, &s))
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "signature lacks the %s prefix", prefix);
    if (!offer(v, g, s, enc))
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "signature is not a well-formed %s digest",
                          enc == WI_SIG_HEX ? "hex" : "base64");
    return 0;
}

static int mismatch(struct wi_err *err)
{
    return wi_err_set(err, WI_SIG_E_SIGNATURE_MISMATCH, "no secret produced a matching signature");
}

/* 0 when no key of f[0..n) occurs twice at the top level, else -1 with
 * WI_SIG_E_DUPLICATE_KEY: the inbox would store the first value as the event's id (type,
 * time) while jsonb, and so every handler, keeps the last. */
static int unique(const struct wi_json_field *f, size_t n, struct wi_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (f[i].duplicate)
            return wi_err_set(err, WI_SIG_E_DUPLICATE_KEY,
                              "body has the top-level key \"%s\" more than once", f[i].name);
    return 0;
}

/* Fills ev->id/type from top-level JSON fields; first existing name in each list wins.
 * Returns 0, or -1 (WI_SIG_E_DUPLICATE_KEY) when one of the names occurs twice. */
static int body_fields(struct wi_slice body, const char *const *ids, const char *const *types,
                       struct wi_sig_event *ev, struct wi_json_field *f, size_t *nf, struct wi_err *err)
{
    size_t n = 0, i;
    for (i = 0; ids && ids[i]; i++) f[n++].name = ids[i];
    size_t nids = n;
    for (i = 0; types && types[i]; i++) f[n++].name = types[i];
    *nf = n;
    if (!n) return 0;
    const char *p = body.p;
    size_t len = body.n;
    while (len && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++, len--;
    if (!len || *p != '{') return 0;
    wi_json_scan(body.p, body.n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, f, n, NULL, NULL);
    if (unique(f, n, err)) return -1;
    for (i = 0; i < n; i++) {
        if (f[i].kind != WI_JSON_STRING || !f[i].value.n) continue;
        if (i < nids && !ev->id.p) ev->id = f[i].value, ev->id_escaped = f[i].escaped;
        if (i >= nids && !ev->type.p) ev->type = f[i].value, ev->type_escaped = f[i].escaped;
    }
    return 0;
}

static struct wi_slice present(struct wi_slice h)
{
    struct wi_slice t = wi_slice_trim(h);
    return t.p && t.n ? t : (struct wi_slice){NULL, 0};
}

/* 1 when a and b (fields scanned from two JSON texts) hold the same value: strings
 * compared after unescaping, numbers by their text; 0 when not; -1 out of memory. */
static int same_field(const struct wi_json_field *a, const struct wi_json_field *b)
{
    char *da, *db;
    size_t na, nb;
    int same;
    if (a->kind != b->kind) return 0;
    if (a->kind == WI_JSON_NUMBER)
        return a->value.n == b->value.n && !memcmp(a->value.p, b->value.p, a->value.n);
    if (a->kind != WI_JSON_STRING) return 1;
    if (!a->escaped && !b->escaped)
        return a->value.n == b->value.n && !memcmp(a->value.p, b->value.p, a->value.n);
    if (!(da = malloc(a->value.n + b->value.n + 1))) return -1;
    db = da + a->value.n;
    na = wi_json_unescape(a->value.p, a->value.n, da);
    nb = wi_json_unescape(b->value.p, b->value.n, db);
    same = na == nb && !memcmp(da, db, na);
    free(da);
    return same;
}

/* V2 signs the canonical form, where the last of duplicate keys wins and escaped keys are
 * decoded; f[] comes from the raw body (first unescaped key wins). Returns 0 when the raw
 * body's event_id, webhook_type and timestamp are the ones the canonical form holds, else
 * -1 with *err filled: a replayed body must not bring its own id or a fresh timestamp. */
static int v2_fields_signed(const char *canon, size_t cn, const struct wi_json_field *f,
                            struct wi_err *err)
{
    struct wi_json_field c[3] = {{.name = f[0].name}, {.name = f[1].name}, {.name = f[2].name}};
    wi_json_scan(canon, cn, WI_JSON_STOP_EARLY, c, 3, NULL, NULL);
    for (int i = 0; i < 3; i++) {
        int s = same_field(&f[i], &c[i]);
        if (s < 0) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        if (!s)
            return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD,
                              "body has a duplicate or escaped %s key: not the value X-Signature-V2 signs",
                              f[i].name);
    }
    return 0;
}

/* The body's timestamp field as unix seconds: a number, or a string decoded the way the
 * signed forms decode it (Simple, V2), so "\u0031..." is the same time as "1...". */
static int body_ts(const struct wi_json_field *f, int64_t *ts, struct wi_err *err)
{
    char buf[128]; /* 18 digits, each at most a 6-byte \uXXXX escape */
    struct wi_slice s = f->value;
    if (f->kind == WI_JSON_STRING && f->escaped) {
        if (f->value.n > sizeof buf) s.p = NULL;
        else s = (struct wi_slice){buf, wi_json_unescape(f->value.p, f->value.n, buf)};
    } else if (f->kind != WI_JSON_STRING && f->kind != WI_JSON_NUMBER) {
        s.p = NULL;
    }
    if (!s.p || wi_parse_unix_ts(s, ts))
        return wi_err_set(err, WI_SIG_E_MALFORMED_TIMESTAMP, "body timestamp is not unix seconds");
    return 0;
}

/* Fills ev->body_sha256 with the hex SHA-256 of the signed content c. */
static int signed_sha256(struct wi_slice c, struct wi_sig_event *ev, struct wi_err *err)
{
    unsigned char d[32];
    if (wi_sha256(c.p, c.n, d, err)) return -1;
    wi_hex_encode(d, 32, ev->body_sha256);
    return 0;
}

/* Didit: X-Signature (raw body), X-Signature-V2 (canonical JSON), X-Signature-Simple (opt-in).
 * The raw signature is tried first and is cheapest; a raw mismatch does not stop V2, which
 * exists for bodies that something re-serialized on the way (providers.md). V2's pre-key
 * cost is bounded by wi_canon_didit's output limit instead. Without a string event_id the
 * fallback id is the SHA-256 of the content the matching signature covers (the canonical
 * form for V2), so a replay that only re-spaces the body keeps its id.
 * Simple signs timestamp, session_id, status and webhook_type only: its event id is always
 * the SHA-256 of that four-field string (never the unsigned event_id), so a body re-sent
 * with another event_id or decision is a duplicate, and ev->simple tells the caller that
 * nothing else in the body is verified.
 * The time is the body's timestamp field, which every Didit signature covers; X-Timestamp
 * is covered by none and never read: without the field the event is refused as
 * WI_SIG_E_MISSING_TIMESTAMP (unless the time check is off), as a captured delivery would
 * otherwise verify again whenever it is sent with a fresh header. */
static int didit(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                 struct wi_sig_event *ev, struct wi_err *err)
{
    static const char *const names[] = {"event_id", "webhook_type", "timestamp", "session_id", "status"};
    struct wi_json_field f[5];
    struct group g;
    struct wi_slice raw = present(req->hdr[0]), v2 = present(req->hdr[1]),
                    simple = present(req->hdr[2]);
    int usable = 0, compared = 0, r = 0, bad_json = 0, rc = -1, simple_matched = 0;
    char *canon = NULL, *buf = NULL;
    struct wi_err cerr = {0};

    for (int i = 0; i < 5; i++) f[i].name = names[i];
    if (!raw.p && !v2.p && !(simple.p && v->cfg.allow_simple))
        return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE,
                          simple.p ? "only X-Signature-Simple was sent and allow_simple is off"
                                   : "no X-Signature or X-Signature-V2 header");
    wi_json_scan(req->body.p, req->body.n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, f, 5, NULL, NULL);

    if (raw.p) {
        memset(&g, 0, sizeof g);
        if (offer(v, &g, raw, WI_SIG_HEX)) {
            usable = compared = 1;
            g.parts[0] = req->body;
            g.nparts = 1;
            if ((r = match(v, &g, err)) != 0) goto matched;
        }
    }
    if (v2.p) {
        memset(&g, 0, sizeof g);
        if (offer(v, &g, v2, WI_SIG_HEX)) {
            size_t cn;
            usable = 1;
            if (wi_canon_didit(req->body.p, req->body.n, WI_CANON_MAX_OUT(req->body.n), req->cancel,
                               &canon, &cn, &cerr)) {
                if (cerr.code == WI_ERR_NOMEM) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
                if (cerr.code == WI_CANON_E_INTERRUPTED) {
                    *err = cerr;
                    return -1;
                }
                bad_json = 1;
            } else {
                compared = 1;
                g.parts[0] = (struct wi_slice){canon, cn};
                g.nparts = 1;
                r = match(v, &g, err);
                if (r > 0 && (unique(f, 5, err) || v2_fields_signed(canon, cn, f, err))) r = -1;
                if (r) goto matched;
                wi_canon_free(canon);
                canon = NULL;
            }
        }
    }
    if (simple.p && v->cfg.allow_simple) {
        memset(&g, 0, sizeof g);
        if (offer(v, &g, simple, WI_SIG_HEX)) {
            /* "<timestamp>:<session_id>:<status>:<webhook_type>", missing fields empty */
            static const int order[] = {2, 3, 4, 1};
            size_t total = 0;
            usable = compared = 1;
            for (int i = 0; i < 4; i++) total += f[order[i]].value.n;
            if (!(buf = malloc(total + 4))) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            char *o = buf;
            for (int i = 0; i < 4; i++) {
                const struct wi_json_field *x = &f[order[i]];
                size_t n = 0;
                if (x->kind == WI_JSON_STRING && x->escaped) n = wi_json_unescape(x->value.p, x->value.n, o);
                else if (x->kind == WI_JSON_STRING || x->kind == WI_JSON_NUMBER) memcpy(o, x->value.p, n = x->value.n);
                o += n;
                if (i < 3) *o++ = ':';
            }
            g.parts[0] = (struct wi_slice){buf, (size_t)(o - buf)};
            g.nparts = 1;
            simple_matched = 1;
            if ((r = match(v, &g, err)) != 0) goto matched;
            simple_matched = 0;
            free(buf);
            buf = NULL;
        }
    }
    if (!usable) return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "no Didit signature is well-formed hex");
    if (bad_json && cerr.code == WI_CANON_E_TOO_LARGE) {
        *err = cerr;
        err->code = WI_SIG_E_PAYLOAD_TOO_LARGE;
        return -1;
    }
    if (!compared && bad_json)
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "X-Signature-V2 needs a JSON body; the body is not valid JSON");
    return mismatch(err);
matched:
    if (r < 0 || unique(f, 5, err)) goto out;
    if (simple_matched) {
        static const int signed_order[] = {3, 4, 2, 1}; /* session_id, status, timestamp, webhook_type */
        ev->simple = 1;
        for (int i = 0; i < 4; i++) ev->simple_fields[i] = f[signed_order[i]];
    } else if (f[0].kind == WI_JSON_STRING && f[0].value.n) {
        ev->id = f[0].value, ev->id_escaped = f[0].escaped;
    }
    if (f[1].kind == WI_JSON_STRING && f[1].value.n) ev->type = f[1].value, ev->type_escaped = f[1].escaped;
    if (f[2].kind != WI_JSON_ABSENT) {
        if (body_ts(&f[2], &ev->timestamp, err)) goto out;
        ev->has_timestamp = 1;
    }
    if (v->cfg.tolerance >= 0) {
        if (!ev->has_timestamp) {
            wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP,
                       "no timestamp field in the body (X-Timestamp is covered by no Didit signature)");
            goto out;
        }
        if (check_time(v, req, ev->timestamp, err)) goto out;
    }
    if ((!ev->id.p || v->cfg.id_from_body) && signed_sha256(g.parts[0], ev, err)) goto out;
    rc = 0;
out:
    wi_canon_free(canon);
    free(buf);
    return rc;
}

int wi_sig_verify(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                  struct wi_sig_event *ev, struct wi_err *err)
{
    static const char *const id_stripe[] = {"id", NULL}, *const type_std[] = {"type", NULL},
                             *const id_paddle[] = {"event_id", NULL},
                             *const type_paddle[] = {"event_type", NULL},
                             *const id_any[] = {"event_id", "id", NULL},
                             *const type_any[] = {"type", "event_type", NULL};
    struct group g;
    struct wi_json_field f[4];
    size_t nf = 0;
    int64_t ts = 0;
    int has_ts = 0, r;
    const char *const *ids = NULL, *const *types = NULL;
    const struct wi_slice *h = req->hdr;

    memset(ev, 0, sizeof *ev);
    if (req->body.n > v->cfg.max_body)
        return wi_err_set(err, WI_SIG_E_PAYLOAD_TOO_LARGE, "body is %zu bytes; the limit is %zu",
                          req->body.n, v->cfg.max_body);
    if (!v->nkeys) return wi_err_set(err, WI_SIG_E_NO_SECRET, "the verifier has no secret");
    memset(&g, 0, sizeof g);

    switch (v->cfg.scheme) {
    case WI_SCHEME_STRIPE:
        if (kv_scheme(v, h[0], ',', "t", "v1", ".", &g, &ts, err)) return -1;
        has_ts = 1, ids = id_stripe, types = type_std;
        break;
    case WI_SCHEME_PADDLE:
        if (kv_scheme(v, h[0], ';', "ts", "h1", ":", &g, &ts, err)) return -1;
        has_ts = 1, ids = id_paddle, types = type_paddle;
        break;
    case WI_SCHEME_STANDARD: {
        int base = present(h[2]).p || present(h[0]).p || present(h[1]).p ? 0 : 3;
        struct wi_slice id = present(h[base]), sig = present(h[base + 2]);
        struct wi_kv_iter it;
        struct wi_slice k, val;
        size_t offered = 0;
        if (!sig.p) return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "webhook-signature header is missing");
        if (!id.p) return wi_err_set(err, WI_SIG_E_MISSING_ID, "webhook-id header is missing");
        if (header_ts(h[base + 1], &ts, err)) return -1;
        wi_kv_init(&it, sig.p, sig.n, ' ', ',');
        while (wi_kv_next(&it, &k, &val))
            if (wi_slice_eq(k, "v1")) offered++, offer(v, &g, val, WI_SIG_BASE64);
        if (!g.nsig)
            return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE,
                              offered ? "no v1 signature is well-formed base64" : "no v1 signature in webhook-signature");
        g.parts[0] = id;
        g.parts[1] = (struct wi_slice){".", 1};
        g.parts[2] = wi_slice_trim(h[base + 1]);
        g.parts[3] = (struct wi_slice){".", 1};
        g.nparts = 4;
        ev->id = id;
        has_ts = 1, types = type_std;
        break;
    }
    case WI_SCHEME_GITHUB:
        if (one_signature(v, h[0], "sha256=", WI_SIG_HEX, &g, err)) return -1;
        ev->id = present(h[1]);
        ev->type = present(h[2]);
        break;
    case WI_SCHEME_SHOPIFY:
        if (one_signature(v, h[0], NULL, WI_SIG_BASE64, &g, err)) return -1;
        ev->id = present(h[1]).p ? present(h[1]) : present(h[2]);
        ev->type = present(h[3]);
        break;
    case WI_SCHEME_SLACK:
        if (one_signature(v, h[0], "v0=", WI_SIG_HEX, &g, err)) return -1;
        if (header_ts(h[1], &ts, err)) return -1;
        g.parts[0] = (struct wi_slice){"v0:", 3};
        g.parts[1] = wi_slice_trim(h[1]);
        g.parts[2] = (struct wi_slice){":", 1};
        g.nparts = 3;
        has_ts = 1, ids = id_paddle, types = type_std;
        break;
    case WI_SCHEME_DIDIT:
        if (didit(v, req, ev, err)) return -1;
        goto fallback_id;
    case WI_SCHEME_HMAC: {
        struct wi_slice id = present(h[2]);
        if (one_signature(v, h[0], v->prefix, v->cfg.encoding, &g, err)) return -1;
        if (v->ts_header) {
            if (header_ts(h[1], &ts, err)) return -1;
            has_ts = 1;
        }
        if (v->id_header) {
            if (!id.p) return wi_err_set(err, WI_SIG_E_MISSING_ID, "id header is missing");
            ev->id = id;
        }
        for (size_t i = 0; i < v->ntokens; i++) {
            const struct tok *t = &v->tokens[i];
            g.parts[g.nparts++] = t->kind == TOK_LIT  ? t->lit
                                  : t->kind == TOK_TS ? wi_slice_trim(h[1])
                                  : t->kind == TOK_ID ? id
                                                      : req->body;
        }
        ids = id_any, types = type_any;
        goto compare;
    }
    }
    g.parts[g.nparts++] = req->body;
compare:
    if ((r = match(v, &g, err)) < 0) return -1;
    if (!r) return mismatch(err);
    if (has_ts) {
        if (check_time(v, req, ts, err)) return -1;
        ev->has_timestamp = 1;
        ev->timestamp = ts;
    }
    if (ev->id.p) ids = NULL;
    if (body_fields(req->body, ids, types, ev, f, &nf, err)) return -1;
fallback_id:
    if (v->cfg.id_from_body) ev->id = (struct wi_slice){NULL, 0}, ev->id_escaped = 0;
    if (!ev->id.p && !ev->body_sha256[0] && signed_sha256(req->body, ev, err)) return -1;
    return 0;
}
