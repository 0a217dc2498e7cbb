/* sig.c - the verification engine: reads a provider entry (provider.h) and applies the same
 * rules to every provider - body limit first, any secret may match, constant-time HMAC
 * comparison or an EVP public-key check, timestamp tolerance, id/type/time extraction,
 * challenges. Secrets are parsed once, when added. */
#include "sig.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "json.h"
#include "sig_engine.h"
#include "sig_header.h"
#include "sig_paypal.h"
#include "sig_url.h"

static char *dup_or_null(const char *s, int *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

static int is_hmac(enum wi_alg a) { return a <= WI_ALG_HMAC_SHA512; }

static enum wi_hmac_alg hmac_alg(enum wi_alg a)
{
    return a == WI_ALG_HMAC_SHA1 ? WI_HMAC_SHA1 : a == WI_ALG_HMAC_SHA512 ? WI_HMAC_SHA512 : WI_HMAC_SHA256;
}

/* Parses v->p.tmpl into v->tokens and checks it against the entry's headers. */
static int parse_template(struct wi_sig_verifier *v, struct wi_err *err)
{
    const char *p = v->p.tmpl, *end = p + strlen(p);
    int bodies = 0, signs_ts = 0;
    int has_ts = v->p.ts_slot != WI_NO_SLOT || v->p.kv_ts, has_id = v->p.id_slots[0] != WI_NO_SLOT;
    while (p < end) {
        if (v->ntokens >= WI_SIG_MAX_TOKENS)
            return wi_err_set(err, WI_ERR_ARG, "signed-content template has too many parts");
        struct wi_tok *t = &v->tokens[v->ntokens++];
        if (*p == '{') {
            const char *close = memchr(p, '}', (size_t)(end - p));
            size_t n = close ? (size_t)(close - p + 1) : 0;
            if (n == 11 && !memcmp(p, "{timestamp}", 11)) t->kind = WI_TOK_TS;
            else if (n == 4 && !memcmp(p, "{id}", 4)) t->kind = WI_TOK_ID;
            else if (n == 6 && !memcmp(p, "{body}", 6)) t->kind = WI_TOK_BODY, bodies++;
            else if (n == 5 && !memcmp(p, "{url}", 5)) t->kind = WI_TOK_URL, v->signs_url = 1;
            else if (n == 8 && !memcmp(p, "{method}", 8)) t->kind = WI_TOK_METHOD, v->signs_method = 1;
            else if (n == 8 && !memcmp(p, "{params}", 8)) t->kind = WI_TOK_PARAMS, v->signs_params = 1, bodies++;
            else
                return wi_err_set(err, WI_ERR_ARG, "signed-content template: unknown placeholder (use {timestamp}, "
                                                   "{id}, {body}, {url}, {method}, {params})");
            p += n;
        } else {
            const char *brace = memchr(p, '{', (size_t)(end - p));
            const char *stop = brace ? brace : end;
            t->kind = WI_TOK_LIT;
            t->lit = (struct wi_slice){p, (size_t)(stop - p)};
            p = stop;
        }
    }
    if (bodies != 1) /* {params} signs the form body as Twilio does */
        return wi_err_set(err, WI_ERR_ARG, "signed-content template must contain {body} (or {params}) exactly once");
    for (size_t i = 0; i < v->ntokens; i++) {
        if (v->tokens[i].kind == WI_TOK_TS && !has_ts)
            return wi_err_set(err, WI_ERR_ARG, "template uses {timestamp} but no timestamp header is set");
        if (v->tokens[i].kind == WI_TOK_ID && !has_id)
            return wi_err_set(err, WI_ERR_ARG, "template uses {id} but no id header is set");
        signs_ts |= v->tokens[i].kind == WI_TOK_TS;
    }
    /* A time check on a header the signature does not cover stops no replay: the sender of a
     * replay writes a fresh value. Refused rather than offered as protection. (An unsigned
     * id header is how GitHub and Shopify work; it stays allowed, and id_from_body offers
     * deduplication on the signed body instead.) */
    if (v->p.ts_slot != WI_NO_SLOT && !signs_ts)
        return wi_err_set(err, WI_ERR_ARG,
                          "timestamp header is set but the template does not sign {timestamp}: its time "
                          "check would not stop replays (add {timestamp} to the template, or drop the header)");
    return 0;
}

/* "hmac": the entry's headers, algorithm and template come from the configuration. */
static int configure_generic(struct wi_sig_verifier *v, const struct wi_sig_config *cfg, struct wi_err *err)
{
    int oom = 0;
    if ((unsigned)cfg->alg > WI_HMAC_SHA512 || (unsigned)cfg->encoding > WI_SIG_BASE64)
        return wi_err_set(err, WI_ERR_ARG, "unknown HMAC algorithm or encoding");
    if (!cfg->signature_header || !*cfg->signature_header)
        return wi_err_set(err, WI_ERR_ARG, "generic HMAC needs a signature header name");
    v->prefix = dup_or_null(cfg->prefix, &oom);
    v->sig_header = dup_or_null(cfg->signature_header, &oom);
    v->ts_header = dup_or_null(cfg->timestamp_header, &oom);
    v->id_header = dup_or_null(cfg->id_header, &oom);
    v->tmpl = dup_or_null(cfg->template ? cfg->template : "{body}", &oom);
    if (oom) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    v->p.headers[0] = v->sig_header;
    v->p.headers[1] = v->ts_header;
    v->p.headers[2] = v->id_header;
    v->p.sig_slot = 0;
    v->p.ts_slot = v->ts_header ? 1 : WI_NO_SLOT;
    v->p.id_slots[0] = v->id_header ? 2 : WI_NO_SLOT;
    v->p.id_required = v->id_header != NULL;
    v->p.prefix = v->prefix && *v->prefix ? v->prefix : NULL;
    v->p.enc = cfg->encoding;
    v->p.versions[0].alg = cfg->alg == WI_HMAC_SHA1 ? WI_ALG_HMAC_SHA1
                           : cfg->alg == WI_HMAC_SHA512 ? WI_ALG_HMAC_SHA512 : WI_ALG_HMAC_SHA256;
    v->p.tmpl = v->tmpl;
    v->nnames = 3;
    return 0;
}

struct wi_sig_verifier *wi_sig_verifier_new(const struct wi_sig_config *cfg, struct wi_err *err)
{
    const struct wi_provider *p = wi_provider_find(cfg->provider);
    struct wi_sig_verifier *v;

    if (!p) {
        wi_err_set(err, WI_ERR_ARG, "unknown signature scheme");
        return NULL;
    }
    if (!(v = calloc(1, sizeof *v))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    v->cfg = *cfg;
    v->p = *p;
    if (!strcmp(p->name, "hmac") && configure_generic(v, cfg, err)) goto fail;
    for (size_t i = 0; i < WI_SIG_MAX_HEADERS; i++)
        if ((v->names[i] = v->p.headers[i])) v->nnames = i + 1;
    if (!v->p.custom && parse_template(v, err)) goto fail;
    return v;
fail:
    wi_sig_verifier_free(v);
    return NULL;
}

void wi_sig_verifier_free(struct wi_sig_verifier *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->nkeys; i++) {
        wi_hmac_key_free(v->keys[i].hmac);
        wi_pkey_free(v->keys[i].pk);
        OPENSSL_cleanse(v->keys[i].digest, sizeof v->keys[i].digest);
    }
    free(v->keys);
    free(v->prefix);
    free(v->sig_header);
    free(v->ts_header);
    free(v->id_header);
    free(v->tmpl);
    free(v);
}

const struct wi_provider *wi_sig_verifier_provider(const struct wi_sig_verifier *v)
{
    return &v->p;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

/* The version a secret is for: the first whose key_prefix it starts with, else the first
 * without one; -1 when none takes it. */
static int version_of(const struct wi_provider *p, const char *s, size_t n)
{
    for (int i = 0; i < 2 && (i == 0 || p->versions[i].tag); i++) {
        const char *kp = p->versions[i].key_prefix;
        if (kp && n >= strlen(kp) && !memcmp(s, kp, strlen(kp))) return i;
    }
    for (int i = 0; i < 2 && (i == 0 || p->versions[i].tag); i++)
        if (!p->versions[i].key_prefix) return i;
    return -1;
}

/* Decodes secret s[0..n) in the version's key form into out (cap bytes). Returns its length,
 * or -1 and fills *err. */
static long decode_key(const struct wi_sig_version *ver, const char *s, size_t n, unsigned char *out,
                       size_t cap, size_t idx, char *kid, struct wi_err *err)
{
    struct wi_slice rest = {s, n};
    long dl;
    if (ver->key_prefix) wi_slice_strip_prefix(rest, ver->key_prefix, &rest);
    switch (ver->key) {
    case WI_KEY_RAW:
    case WI_KEY_PEM:
        return -2; /* the secret itself */
    case WI_KEY_CERT:
        break; /* wi_sig_paypal_key */
    case WI_KEY_WHSEC:
        wi_slice_strip_prefix(rest, "whsec_", &rest);
        if ((dl = wi_b64_decode(rest.p, rest.n, out, cap)) <= 0)
            return wi_err_set(err, WI_ERR_ARG, "secret #%zu is not base64 after the whsec_ prefix", idx);
        return dl;
    case WI_KEY_HEX:
        if ((dl = wi_hex_decode(rest.p, rest.n, out, cap)) <= 0)
            return wi_err_set(err, WI_ERR_ARG, "secret #%zu is not a hex public key", idx);
        return dl;
    case WI_KEY_BASE64:
    case WI_KEY_B64_DER:
        if ((dl = wi_b64_decode(rest.p, rest.n, out, cap)) <= 0)
            return wi_err_set(err, WI_ERR_ARG, "secret #%zu is not a base64 public key", idx);
        return dl;
    case WI_KEY_JWK:
        return wi_jwt_jwk_p256(rest.p, rest.n, out, cap, kid, err);
    case WI_KEY_PAIR: {
        const char *colon = memchr(rest.p, ':', rest.n);
        size_t pub = colon ? (size_t)(colon - rest.p) : 0;
        if (!pub || pub > WI_JWT_KID_MAX || memchr(rest.p, '|', pub) || memchr(rest.p, '&', pub) || pub + 1 == rest.n)
            return wi_err_set(err, WI_ERR_ARG, "secret #%zu is not public_key:private_key", idx);
        memcpy(kid, rest.p, pub);
        kid[pub] = '\0';
        if (!EVP_Digest(colon + 1, rest.n - pub - 1, out, NULL, EVP_sha1(), NULL))
            return wi_err_set(err, WI_ERR_CRYPTO, "SHA-1 failed");
        return 20;
    }
    case WI_KEY_CREDENTIALS:
        if (!memchr(rest.p, ':', rest.n))
            return wi_err_set(err, WI_ERR_ARG, "secret #%zu is not user:password", idx);
        if (wi_sha256(rest.p, rest.n, out, err)) return -1;
        return 32;
    }
    return wi_err_set(err, WI_ERR_ARG, "unknown key form");
}

/* Prefixes a key parser's WI_ERR_ARG message with the secret's number. */
static void name_secret(struct wi_err *err, size_t idx)
{
    if (err && err->code == WI_ERR_ARG) {
        char why[WI_ERR_MSG_MAX];
        memcpy(why, err->msg, sizeof why);
        wi_err_set(err, WI_ERR_ARG, "secret #%zu: %s", idx, why);
    }
}

/* Adds secret number idx as a key of the given version. */
static int add_key(struct wi_sig_verifier *v, const char *s, size_t n, int version, size_t idx, struct wi_err *err);

int wi_sig_verifier_add_secret(struct wi_sig_verifier *v, const char *s, size_t n,
                               struct wi_err *err)
{
    size_t idx = v->nsecrets + 1, before = v->nkeys;
    int version;

    if (n == 0) return wi_err_set(err, WI_ERR_ARG, "secret #%zu is empty", idx);
    if (is_space(s[0]) || is_space(s[n - 1]))
        return wi_err_set(err, WI_ERR_ARG,
                          "secret #%zu has leading or trailing whitespace (often a newline from a "
                          "file or ENV); strip it before passing it",
                          idx);
    if ((version = version_of(&v->p, s, n)) < 0)
        return wi_err_set(err, WI_ERR_ARG, "secret #%zu has none of the key prefixes this provider takes", idx);
    if (add_key(v, s, n, version, idx, err)) return -1;
    /* the request names the algorithm (alg_slot): the secret is a key of each version */
    if (v->p.alg_slot > 0 && v->p.versions[1].tag && add_key(v, s, n, 1, idx, err)) {
        for (; v->nkeys > before; v->nkeys--) {
            wi_hmac_key_free(v->keys[v->nkeys - 1].hmac);
            wi_pkey_free(v->keys[v->nkeys - 1].pk);
        }
        return -1;
    }
    v->nsecrets++;
    return 0;
}

static int add_key(struct wi_sig_verifier *v, const char *s, size_t n, int version, size_t idx, struct wi_err *err)
{
    unsigned char decoded[512];
    struct wi_sig_key k = {.version = version};
    long dl;
    int rc = -1;

    const struct wi_sig_version *ver = &v->p.versions[k.version];
    if (ver->key == WI_KEY_CERT) {
        if (wi_sig_paypal_key(s, n, &k, err)) {
            name_secret(err, idx);
            goto out;
        }
        dl = 0;
    } else if ((dl = decode_key(ver, s, n, decoded, sizeof decoded, idx, k.kid, err)) == -1) {
        if (ver->key == WI_KEY_JWK) name_secret(err, idx);
        goto out;
    }
    if (v->nkeys == v->capkeys) {
        size_t cap = v->capkeys ? v->capkeys * 2 : 2;
        struct wi_sig_key *nk = realloc(v->keys, cap * sizeof *nk);
        if (!nk) {
            wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            goto out;
        }
        v->keys = nk;
        v->capkeys = cap;
    }
    if (ver->key == WI_KEY_CERT) {
        /* k.pk: the certificate's key */
    } else if (ver->key == WI_KEY_CREDENTIALS) {
        memcpy(k.digest, decoded, 32);
        k.has_digest = 1;
    } else if (is_hmac(ver->alg))
        k.hmac = dl == -2 ? wi_hmac_key_new(hmac_alg(ver->alg), s, n, err)
                          : wi_hmac_key_new(hmac_alg(ver->alg), decoded, (size_t)dl, err);
    else
        k.pk = dl == -2 ? wi_pkey_new(WI_PKEY_RSA_SHA1, (const unsigned char *)s, n, err)
                        : wi_pkey_new(ver->alg == WI_ALG_ED25519 ? WI_PKEY_ED25519 : WI_PKEY_ECDSA_P256, decoded,
                                      (size_t)dl, err);
    if (!k.hmac && !k.pk && !k.has_digest && ver->key != WI_KEY_CERT) { /* a bare PayPal webhook id has none */
        name_secret(err, idx);
        goto out;
    }
    v->keys[v->nkeys++] = k;
    rc = 0;
out:
    if (rc) wi_pkey_free(k.pk);
    OPENSSL_cleanse(decoded, sizeof decoded);
    return rc;
}

size_t wi_sig_verifier_secret_count(const struct wi_sig_verifier *v)
{
    return v->nsecrets;
}

size_t wi_sig_verifier_headers(const struct wi_sig_verifier *v,
                               const char *names[WI_SIG_MAX_HEADERS])
{
    for (size_t i = 0; i < WI_SIG_MAX_HEADERS; i++) names[i] = v->names[i];
    return v->nnames;
}

int wi_sig_offer(const struct wi_sig_verifier *v, struct wi_sig_group *g, struct wi_slice s,
                 enum wi_sig_encoding enc, int version)
{
    enum wi_alg alg = v->p.versions[version].alg;
    long n;
    if (!s.p || g->nsig >= WI_SIG_MAX_CANDIDATES) return 0;
    if (!is_hmac(alg) && g->npk >= WI_SIG_MAX_PK_CANDIDATES) return 0;
    if (enc == WI_SIG_HEX)
        n = v->p.hex_any_case ? wi_hex_decode(s.p, s.n, g->sig[g->nsig], WI_SIG_SIG_MAX)
                              : wi_hex_decode_lower(s.p, s.n, g->sig[g->nsig], WI_SIG_SIG_MAX);
    else n = wi_b64_decode(s.p, s.n, g->sig[g->nsig], WI_SIG_SIG_MAX);
    if (is_hmac(alg) ? n != (long)wi_hmac_size(hmac_alg(alg))
                     : alg == WI_ALG_ED25519 ? n != 64 : (n < 8 || n > WI_PKEY_SIG_MAX))
        return 0;
    g->len[g->nsig] = (size_t)n;
    g->version[g->nsig++] = version;
    if (!is_hmac(alg)) g->npk++;
    return 1;
}

int wi_sig_match(const struct wi_sig_verifier *v, const struct wi_sig_group *g, size_t *key,
                 struct wi_err *err)
{
    unsigned char mac[WI_HMAC_MAX];
    int found = 0;
    for (size_t k = 0; k < v->nkeys && !found; k++) {
        const struct wi_sig_key *sk = &v->keys[k];
        int n = -1;
        for (size_t i = 0; i < g->nsig && !found; i++) {
            if (g->version[i] != sk->version) continue;
            if (sk->hmac) { /* one HMAC per secret, compared with every candidate */
                if (n < 0 && (n = wi_hmac_compute(sk->hmac, g->parts, g->nparts, mac, err)) < 0) return -1;
                for (size_t j = i; j < g->nsig; j++)
                    if (g->version[j] == sk->version && g->len[j] == (size_t)n)
                        found |= wi_ct_equal(mac, g->sig[j], (size_t)n);
                break;
            }
            if (!sk->pk) break; /* HTTP Basic credentials sign nothing */
            int r = wi_pkey_verify(sk->pk, g->parts, g->nparts, g->sig[i], g->len[i], err);
            if (r < 0) return -1;
            found = r;
        }
        if (found && key) *key = k;
    }
    OPENSSL_cleanse(mac, sizeof mac);
    return found;
}

int wi_sig_check_time(const struct wi_sig_verifier *v, const struct wi_sig_request *req, int64_t ts,
                      struct wi_err *err)
{
    int64_t d = req->now - ts;
    if (v->cfg.tolerance >= 0 && (d > v->cfg.tolerance || -d > v->cfg.tolerance))
        return wi_err_set(err, WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE,
                          "timestamp is %lld s %s now; tolerance is %lld s",
                          (long long)(d < 0 ? -d : d), d < 0 ? "ahead of" : "behind",
                          (long long)v->cfg.tolerance);
    return 0;
}

/* A header's unix time (milliseconds when ms) as seconds. */
static int header_ts(struct wi_slice h, int ms, int64_t *ts, struct wi_err *err)
{
    if (!h.p || !wi_slice_trim(h).n)
        return wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP, "timestamp header is missing");
    if (wi_parse_unix_ts(wi_slice_trim(h), ts))
        return wi_err_set(err, WI_SIG_E_MALFORMED_TIMESTAMP, "timestamp is not unix %s", ms ? "milliseconds" : "seconds");
    if (ms) *ts /= 1000;
    return 0;
}

int wi_sig_mismatch(struct wi_err *err)
{
    return wi_err_set(err, WI_SIG_E_SIGNATURE_MISMATCH, "no secret produced a matching signature");
}

int wi_sig_unique(const struct wi_json_field *f, size_t n, struct wi_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (f[i].duplicate)
            return wi_err_set(err, WI_SIG_E_DUPLICATE_KEY,
                              "body has the top-level key \"%s\" more than once", f[i].name);
    return 0;
}

struct wi_slice wi_sig_present(struct wi_slice h)
{
    struct wi_slice t = wi_slice_trim(h);
    return t.p && t.n ? t : (struct wi_slice){NULL, 0};
}

int wi_sig_body_ts(const struct wi_json_field *f, int64_t *ts, struct wi_err *err)
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

int wi_sig_signed_sha256(struct wi_slice c, struct wi_sig_event *ev, struct wi_err *err)
{
    unsigned char d[32];
    if (wi_sha256(c.p, c.n, d, err)) return -1;
    wi_hex_encode(d, 32, ev->body_sha256);
    return 0;
}

/* The signature header's candidates (and, for KV, its timestamp item) into g. */
static int signatures(const struct wi_sig_verifier *v, struct wi_slice h, int one_version, struct wi_sig_group *g,
                      struct wi_slice *kv_ts, struct wi_err *err)
{
    const struct wi_provider *p = &v->p;
    struct wi_kv_iter it;
    struct wi_slice k, val;
    size_t offered = 0;
    const char *tag = p->versions[0].tag, *enc = p->enc == WI_SIG_HEX ? "hex" : "base64";

    if (p->layout == WI_LAYOUT_ONE) {
        struct wi_slice s = h;
        if (p->prefix && !wi_slice_strip_prefix(s, p->prefix, &s) && !p->prefix_optional)
            return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "signature lacks the %s prefix", p->prefix);
        if (!wi_sig_offer(v, g, s, p->enc, one_version))
            return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "signature is not a well-formed %s %s%s%s", enc,
                              is_hmac(p->versions[one_version].alg) ? "digest" : "signature",
                              p->alg_slot > 0 ? " of " : "", p->alg_slot > 0 ? p->versions[one_version].tag : "");
        return 0;
    }
    if (p->layout == WI_LAYOUT_KV) wi_kv_init(&it, h.p, h.n, p->kv_sep, '=');
    else wi_kv_init(&it, h.p, h.n, ' ', ',');
    while (wi_kv_next(&it, &k, &val)) {
        if (p->kv_ts && wi_slice_eq(k, p->kv_ts) && val.p) *kv_ts = val;
        for (int i = 0; i < 2 && p->versions[i].tag; i++)
            if (wi_slice_eq(k, p->versions[i].tag)) offered++, wi_sig_offer(v, g, val, p->enc, i);
    }
    if (p->layout == WI_LAYOUT_KV) {
        int64_t ts;
        if (!kv_ts->p || wi_parse_unix_ts(*kv_ts, &ts))
            return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "signature header has no valid %s= timestamp", p->kv_ts);
        if (!offered)
            return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "signature header has no %s= signature", tag);
        if (!g->nsig)
            return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "no %s= signature is well-formed %s", tag, enc);
        return 0;
    }
    if (!g->nsig)
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE,
                          offered ? "no signature in %s is well-formed %s" : "no known signature version in %s",
                          p->headers[p->sig_slot], enc);
    return 0;
}

/* alg_slot: the version whose tag the header's "algorithm=" item names (any case) into *ver;
 * 0 when the header, or the item, is absent or empty. Returns 0, or -1
 * (WI_SIG_E_MALFORMED_SIGNATURE) for a name no version has. */
static int signing_version(const struct wi_sig_verifier *v, struct wi_slice h, int *ver, struct wi_err *err)
{
    struct wi_kv_iter it;
    struct wi_slice k, val, name = {NULL, 0};
    *ver = 0;
    wi_kv_init(&it, h.p, h.p ? h.n : 0, ',', '=');
    while (wi_kv_next(&it, &k, &val))
        if (val.p && wi_slice_eq(wi_slice_trim(k), "algorithm") && wi_slice_trim(val).n && !name.p)
            name = wi_slice_trim(val);
    if (!name.p) return 0;
    for (int i = 0; i < 2 && v->p.versions[i].tag; i++)
        if (strlen(v->p.versions[i].tag) == name.n && !strncasecmp(v->p.versions[i].tag, name.p, name.n)) {
            *ver = i;
            return 0;
        }
    return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "%s names an algorithm this provider does not take",
                      v->p.headers[v->p.alg_slot]);
}

/* Non-KV layouts: the candidates of the signature header (first) into g; with sig_count > 1
 * those of every present signature header, a malformed one skipped while another is
 * well-formed. */
static int all_signatures(const struct wi_sig_verifier *v, const struct wi_slice *h, struct wi_slice first,
                          struct wi_sig_group *g, struct wi_slice *kv_ts, struct wi_err *err)
{
    const struct wi_provider *p = &v->p;
    int rc = -1, ver = 0;
    if (p->alg_slot > 0 && signing_version(v, h[p->alg_slot], &ver, err)) return -1;
    if (p->sig_count <= 1) return signatures(v, first, ver, g, kv_ts, err);
    for (int i = 0; i < p->sig_count; i++) {
        struct wi_slice s = wi_sig_present(h[p->sig_slot + i]);
        if (s.p && !signatures(v, s, ver, g, kv_ts, err)) rc = 0;
    }
    return rc;
}

/* Top-level body field path "a" or "a.b" (field b of object a): splits it into head (a
 * NUL-terminated copy of "a", cap bytes) and tail ("b" or NULL). */
static const char *split_path(const char *path, char *head, size_t cap)
{
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    if (n >= cap) n = cap - 1;
    memcpy(head, path, n);
    head[n] = '\0';
    return dot ? dot + 1 : NULL;
}

int wi_sig_field_at(struct wi_slice text, const char *path, struct wi_json_field *out, struct wi_err *err)
{
    char head[64];
    const char *tail = split_path(path, head, sizeof head);
    struct wi_json_field f = {.name = head};
    wi_json_scan(text.p, text.n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, &f, 1, NULL, NULL);
    if (f.duplicate)
        return wi_err_set(err, WI_SIG_E_DUPLICATE_KEY, "body has the key \"%s\" more than once", head);
    if (tail) {
        if (f.kind != WI_JSON_OTHER || !f.value.p || f.value.p[0] != '{') f.kind = WI_JSON_ABSENT;
        else return wi_sig_field_at(f.value, tail, out, err);
    }
    *out = f;
    out->name = path;
    return 0;
}

static int is_object(struct wi_slice body)
{
    const char *p = body.p;
    size_t len = body.n;
    while (len && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++, len--;
    return len && *p == '{';
}

/* Fills ev's id (unless a header gave it), type (unless the entry reads it from a header)
 * and *ts from the entry's body fields; the first present name of each list wins. Every
 * listed top-level key is read in one scan, and one that occurs twice is refused
 * (WI_SIG_E_DUPLICATE_KEY) even when an earlier name of its list was found. */
int wi_sig_body_fields(const struct wi_sig_verifier *v, struct wi_slice body, struct wi_sig_event *ev,
                       struct wi_json_field *ts, struct wi_err *err)
{
    const struct wi_provider *p = &v->p;
    const char *paths[7];
    char heads[7][64];
    const char *tails[7];
    struct wi_json_field f[7];
    size_t n = 0, nids, ntypes;

    ts->kind = WI_JSON_ABSENT;
    for (int i = 0; !ev->id.p && i < 3 && p->id_fields[i]; i++) paths[n++] = p->id_fields[i];
    nids = n;
    for (int i = 0; p->type_slot == WI_NO_SLOT && i < 3 && p->type_fields[i]; i++) paths[n++] = p->type_fields[i];
    ntypes = n;
    if (p->ts_field) paths[n++] = p->ts_field;
    if (!n || !is_object(body)) return 0;
    for (size_t i = 0; i < n; i++) {
        tails[i] = split_path(paths[i], heads[i], sizeof heads[i]);
        memset(&f[i], 0, sizeof f[i]);
        f[i].name = heads[i];
    }
    wi_json_scan(body.p, body.n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, f, n, NULL, NULL);
    if (wi_sig_unique(f, n, err)) return -1;
    for (size_t i = 0; i < n; i++) /* the scan fills one field per key: paths sharing a head */
        for (size_t j = 0; j < i; j++)
            if (!strcmp(heads[i], heads[j])) {
                f[i] = f[j];
                f[i].name = heads[i];
                break;
            }
    for (size_t i = 0; i < n; i++) {
        if (tails[i]) { /* "a.b": field b of object a */
            if (f[i].kind == WI_JSON_OTHER && f[i].value.p && f[i].value.p[0] == '{') {
                if (wi_sig_field_at(f[i].value, tails[i], &f[i], err)) return -1;
            } else {
                f[i].kind = WI_JSON_ABSENT;
            }
        }
        if (i < nids && !ev->id.p && f[i].kind == WI_JSON_STRING && f[i].value.n)
            ev->id = f[i].value, ev->id_escaped = f[i].escaped;
        else if (i >= nids && i < ntypes && !ev->type.p && f[i].value.n &&
                 (f[i].kind == WI_JSON_STRING || (p->type_numbers && f[i].kind == WI_JSON_NUMBER)))
            ev->type = f[i].value, ev->type_escaped = f[i].kind == WI_JSON_STRING && f[i].escaped;
        else if (i == ntypes)
            *ts = f[i];
    }
    return 0;
}

/* Sets ev->challenge when the verified request is the entry's challenge. */
static int challenge(const struct wi_sig_verifier *v, const struct wi_sig_request *req, size_t key,
                     struct wi_sig_event *ev, struct wi_err *err)
{
    static const char *const paths[] = {NULL, "type", "challenge", "payload.plainToken"};
    enum wi_challenge c = v->p.challenge;
    struct wi_json_field t, val;
    if (c == WI_CHALLENGE_NONE || c == WI_CHALLENGE_BRAINTREE_GET || !is_object(req->body)) return 0;
    if (wi_sig_field_at(req->body, c == WI_CHALLENGE_ZOOM_URL ? "event" : "type", &t, err)) return -1;
    if (c == WI_CHALLENGE_DISCORD_PING) {
        if (t.kind == WI_JSON_NUMBER && t.value.n == 1 && t.value.p[0] == '1') ev->challenge = c;
        return 0;
    }
    if (t.kind != WI_JSON_STRING || t.escaped ||
        !wi_slice_eq(t.value, c == WI_CHALLENGE_SLACK_URL ? "url_verification" : "endpoint.url_validation"))
        return 0;
    if (wi_sig_field_at(req->body, paths[c], &val, err)) return -1;
    if (val.kind != WI_JSON_STRING || !val.value.n)
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "the challenge has no %s string", paths[c]);
    ev->challenge = c;
    ev->challenge_value = val.value;
    if (c == WI_CHALLENGE_ZOOM_URL) {
        unsigned char mac[WI_HMAC_MAX];
        char *plain = malloc(val.value.n + 1);
        struct wi_slice part;
        int n;
        if (!v->keys[key].hmac) return wi_err_set(err, WI_ERR_ARG, "the challenge needs an HMAC secret");
        if (!plain) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        part = (struct wi_slice){plain, val.escaped ? wi_json_unescape(val.value.p, val.value.n, plain) : val.value.n};
        if (!val.escaped) memcpy(plain, val.value.p, val.value.n);
        n = wi_hmac_compute(v->keys[key].hmac, &part, 1, mac, err);
        free(plain);
        if (n != 32) return n < 0 ? -1 : wi_err_set(err, WI_ERR_ARG, "the challenge is answered with HMAC-SHA256");
        wi_hex_encode(mac, 32, ev->challenge_hmac);
    }
    return 0;
}

/* The entry's signed content for req into g->parts; url is {url} (one of its variants). */
static void signed_content(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                           const struct wi_sig_url_parts *u, struct wi_slice url, struct wi_slice ts,
                           struct wi_slice id, struct wi_sig_group *g)
{
    g->nparts = 0;
    for (size_t i = 0; i < v->ntokens; i++) {
        const struct wi_tok *tk = &v->tokens[i];
        struct wi_slice part = req->body;
        switch (tk->kind) {
        case WI_TOK_LIT: part = tk->lit; break;
        case WI_TOK_TS: part = ts; break;
        case WI_TOK_ID: part = id; break;
        case WI_TOK_URL: part = url; break;
        case WI_TOK_METHOD: part = req->method; break;
        case WI_TOK_PARAMS: part = u->params; break;
        case WI_TOK_BODY: break;
        }
        g->parts[g->nparts++] = part;
    }
}

/* 1 when a secret signs the content under {url} or its default-port variant, 0 when none,
 * -1 on a crypto failure. */
static int match_content(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                         const struct wi_sig_url_parts *u, struct wi_slice ts, struct wi_slice id,
                         struct wi_sig_group *g, size_t *key, struct wi_err *err)
{
    int r;
    signed_content(v, req, u, u->url, ts, id, g);
    if ((r = wi_sig_match(v, g, key, err)) || !u->alt.p) return r;
    signed_content(v, req, u, u->alt, ts, id, g);
    return wi_sig_match(v, g, key, err);
}

static int verify_entry(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                        struct wi_sig_event *ev, struct wi_sig_url_parts *u, struct wi_err *err);

int wi_sig_verify(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                  struct wi_sig_event *ev, struct wi_err *err)
{
    struct wi_sig_url_parts u;
    int rc;

    memset(ev, 0, sizeof *ev);
    memset(&u, 0, sizeof u);
    if (req->body.n > v->cfg.max_body)
        return wi_err_set(err, WI_SIG_E_PAYLOAD_TOO_LARGE, "body is %zu bytes; the limit is %zu",
                          req->body.n, v->cfg.max_body);
    if (!v->nkeys) return wi_err_set(err, WI_SIG_E_NO_SECRET, "the verifier has no secret");
    if (v->p.custom) {
        if (v->p.custom(v, req, ev, err)) return -1;
        rc = 0;
    } else {
        rc = verify_entry(v, req, ev, &u, err);
        wi_sig_url_free(&u);
        if (rc) return -1;
    }
    if (v->cfg.id_from_body) ev->id = (struct wi_slice){NULL, 0}, ev->id_escaped = 0;
    if (!ev->id.p && !ev->body_sha256[0] && wi_sig_signed_sha256(req->body, ev, err)) return -1;
    return 0;
}

/* wi_sig_verify for an entry without a custom scheme; u holds the request's URL parts. */
static int verify_entry(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                        struct wi_sig_event *ev, struct wi_sig_url_parts *u, struct wi_err *err)
{
    const struct wi_provider *p = &v->p;
    struct wi_sig_group g;
    struct wi_json_field tsf;
    struct wi_slice h[WI_SIG_MAX_HEADERS], sig = {NULL, 0}, kv_ts = {NULL, 0}, ts = {NULL, 0}, id = {NULL, 0};
    int64_t t = 0;
    int has_ts = 0, r;
    size_t key = 0;

    memcpy(h, req->hdr, sizeof h);
    if (p->alt_offset) { /* none of the first family present: read the second */
        int any = 0;
        for (int i = 0; i < p->alt_offset; i++) any |= wi_sig_present(h[i]).p != NULL;
        if (!any)
            for (int i = 0; i < p->alt_offset; i++) h[i] = h[i + p->alt_offset];
    }
    memset(&g, 0, sizeof g);
    for (int i = 0; i < (p->sig_count > 1 ? p->sig_count : 1) && !sig.p; i++) sig = wi_sig_present(h[p->sig_slot + i]);
    if (!sig.p)
        return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "%s header is missing", p->headers[p->sig_slot]);
    if (p->layout == WI_LAYOUT_KV) {
        if (signatures(v, sig, 0, &g, &kv_ts, err)) return -1;
        ts = kv_ts, has_ts = 1;
        wi_parse_unix_ts(ts, &t);
        if (p->ts_ms) t /= 1000;
    }
    for (int i = 0; i < 2 && p->id_slots[i] != WI_NO_SLOT && !id.p; i++) id = wi_sig_present(h[p->id_slots[i]]);
    if (p->id_required && !id.p)
        return wi_err_set(err, WI_SIG_E_MISSING_ID, "%s header is missing", p->headers[p->id_slots[0]]);
    if (p->ts_slot != WI_NO_SLOT) {
        if (header_ts(h[p->ts_slot], p->ts_ms, &t, err)) return -1;
        ts = wi_slice_trim(h[p->ts_slot]), has_ts = 1;
    }
    if (p->layout != WI_LAYOUT_KV && all_signatures(v, h, sig, &g, &kv_ts, err)) return -1;
    if (wi_sig_url_prepare(v, req, u, err)) return -1;
    if ((r = match_content(v, req, u, ts, id, &g, &key, err)) < 0) return -1;
    if (!r) return wi_sig_mismatch(err);
    if (wi_sig_url_check_body(u, req->body, err)) return -1;
    /* a form signed as sorted pairs: its id is the hash of what was signed, so a replay with
     * the pairs reordered or re-encoded (the same signature) is the same event */
    if (v->signs_params && !u->body_hash.p && wi_sig_signed_sha256(u->params, ev, err)) return -1;
    if (has_ts) {
        if (wi_sig_check_time(v, req, t, err)) return -1;
        ev->has_timestamp = 1;
        ev->timestamp = t;
    }
    ev->id = id;
    if (p->type_slot != WI_NO_SLOT) ev->type = wi_sig_present(h[p->type_slot]);
    if (wi_sig_body_fields(v, req->body, ev, &tsf, err)) return -1;
    if (p->ts_field) { /* a time inside the signed body */
        if (tsf.kind != WI_JSON_ABSENT) {
            if (wi_sig_body_ts(&tsf, &t, err)) return -1;
            ev->has_timestamp = 1;
            ev->timestamp = p->ts_ms ? t / 1000 : t;
        }
        if (v->cfg.tolerance >= 0) {
            if (!ev->has_timestamp)
                return wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP, "no %s field in the body", p->ts_field);
            if (wi_sig_check_time(v, req, ev->timestamp, err)) return -1;
        }
    }
    return challenge(v, req, key, ev, err);
}
