/* fuzz_hmac.c - libFuzzer entry point for the generic :hmac scheme: its signed-content
 * template parser and wi_sig_verify over fuzzed headers. Beyond "no crash", it checks that
 * a template the verifier accepts signs exactly what an independent expansion of it says
 * (a request signed that way verifies; one flipped signature character does not).
 * Input: one byte of options (algorithm, encoding, which headers), then template, prefix,
 * body, timestamp value, id value and a fuzzed signature, separated by 0xff. */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../hmac.h"
#include "../sig.h"
#include "../sig_header.h"

#define KEY "k3y-for-fuzzing"

/* A NUL-terminated copy (a fuzzed NUL ends it early, as it would for a C caller). */
static char *cstr(struct wi_slice s)
{
    char *p = malloc(s.n + 1);
    if (!p) abort();
    memcpy(p, s.p, s.n);
    p[s.n] = '\0';
    return p;
}

static struct wi_slice trim(struct wi_slice s)
{
    while (s.n && (s.p[0] == ' ' || s.p[0] == '\t')) s.p++, s.n--;
    while (s.n && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t')) s.n--;
    return s;
}

static void append(char **buf, size_t *n, const char *p, size_t k)
{
    char *b = realloc(*buf, *n + k + 1);
    if (!b) abort();
    if (k) memcpy(b + *n, p, k);
    *buf = b;
    *n += k;
}

/* The request placeholders ({url}, {method}, {params}: sig_url.c) need a request URL this
 * target does not build; fuzz_providers covers them. */
static const char *const REQUEST_PLACEHOLDERS[] = {"{url}", "{method}", "{params}"};

/* The signed content of an accepted template, expanded without the verifier's tokenizer:
 * every '{' of an accepted template opens one of the known placeholders. Returns NULL for a
 * template that uses a request placeholder (not expanded here). */
static char *expand(const char *tmpl, struct wi_slice ts, struct wi_slice id, struct wi_slice body, size_t *n)
{
    char *out = NULL;
    *n = 0;
    append(&out, n, "", 0);
    for (const char *p = tmpl; *p;) {
        size_t r;
        if (!strncmp(p, "{timestamp}", 11)) { append(&out, n, ts.p, ts.n), p += 11; continue; }
        if (!strncmp(p, "{id}", 4)) { append(&out, n, id.p, id.n), p += 4; continue; }
        if (!strncmp(p, "{body}", 6)) { append(&out, n, body.p, body.n), p += 6; continue; }
        if (*p != '{') { append(&out, n, p++, 1); continue; }
        for (r = 0; r < sizeof REQUEST_PLACEHOLDERS / sizeof REQUEST_PLACEHOLDERS[0]; r++)
            if (!strncmp(p, REQUEST_PLACEHOLDERS[r], strlen(REQUEST_PLACEHOLDERS[r])))
                break;
        if (r == sizeof REQUEST_PLACEHOLDERS / sizeof REQUEST_PLACEHOLDERS[0])
            abort(); /* the verifier accepted an unknown placeholder */
        free(out);
        return NULL;
    }
    return out;
}

/* 1 when an id or type key of the generic scheme occurs twice at the body's top level. */
static int duplicate_key(struct wi_slice body)
{
    struct wi_json_field f[4] = {{.name = "event_id"}, {.name = "id"}, {.name = "type"}, {.name = "event_type"}};
    wi_json_scan(body.p, body.n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, f, 4, NULL, NULL);
    for (int i = 0; i < 4; i++)
        if (f[i].duplicate) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const enum wi_hmac_alg algs[3] = {WI_HMAC_SHA1, WI_HMAC_SHA256, WI_HMAC_SHA512};
    static const EVP_MD *(*const mds[3])(void) = {EVP_sha1, EVP_sha256, EVP_sha512};
    struct wi_slice part[6] = {{0}};
    struct wi_err err;
    if (size == 0) return 0;
    unsigned opt = data[0];
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    for (int i = 0; i < 6 && p <= end; i++) {
        const char *q = memchr(p, 0xff, (size_t)(end - p));
        if (!q) q = end;
        part[i] = (struct wi_slice){p, (size_t)(q - p)};
        p = q + 1;
    }
    if (!part[0].p) return 0;
    int a = (int)(opt % 3), b64 = (opt >> 2) & 1, has_ts = (opt >> 3) & 1, has_id = (opt >> 4) & 1;
    char *tmpl = cstr(part[0]), *prefix = part[1].p ? cstr(part[1]) : NULL;
    struct wi_sig_config cfg = {.provider = "hmac", .tolerance = 300, .max_body = 1 << 16,
                                .alg = algs[a], .encoding = b64 ? WI_SIG_BASE64 : WI_SIG_HEX,
                                .prefix = (opt >> 5) & 1 ? prefix : NULL, .signature_header = "x-sig",
                                .timestamp_header = has_ts ? "x-ts" : NULL, .id_header = has_id ? "x-id" : NULL,
                                .template = (opt >> 6) & 1 ? NULL : tmpl};
    struct wi_sig_verifier *v = wi_sig_verifier_new(&cfg, &err);
    if (!v) {
        if (err.code != WI_ERR_ARG || !err.msg[0]) abort();
        goto done;
    }
    if (wi_sig_verifier_add_secret(v, KEY, strlen(KEY), &err)) abort();

    struct wi_slice body = part[2].p ? part[2] : (struct wi_slice){"", 0};
    struct wi_sig_request req = {.now = 1700000000, .body = body};
    struct wi_sig_event ev;
    req.hdr[0] = part[5];
    req.hdr[1] = has_ts ? part[3] : (struct wi_slice){NULL, 0};
    req.hdr[2] = has_id ? part[4] : (struct wi_slice){NULL, 0};
    if (wi_sig_verify(v, &req, &ev, &err) == 0) { /* a fuzzed signature that matched: slices in bounds */
        if (ev.id.p && (ev.id.p < (const char *)data || ev.id.p + ev.id.n > end)) abort();
    }

    /* Sign the request the way an accepted template says, then verify it. */
    struct wi_slice ts = trim(req.hdr[1]), id = trim(req.hdr[2]);
    int64_t t = 0;
    int ts_ok = !has_ts || wi_parse_unix_ts(ts, &t) == 0, id_ok = !has_id || id.n > 0;
    const char *pre = cfg.prefix ? cfg.prefix : "";
    if (ts_ok && id_ok && pre[0] != ' ' && pre[0] != '\t') {
        size_t n, prelen = strlen(pre);
        char *content = expand(cfg.template ? cfg.template : "{body}", ts, id, body, &n);
        if (!content)
            goto checked;
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int ml = 0;
        if (!HMAC(mds[a](), KEY, (int)strlen(KEY), (const unsigned char *)content, n, mac, &ml)) abort();
        char *sig = malloc(prelen + 4 * ml + 8);
        if (!sig) abort();
        memcpy(sig, pre, prelen);
        size_t sl = prelen;
        if (b64) sl += (size_t)EVP_EncodeBlock((unsigned char *)sig + prelen, mac, (int)ml);
        else wi_hex_encode(mac, ml, sig + prelen), sl += 2 * ml;
        req.hdr[0] = (struct wi_slice){sig, sl};
        req.now = has_ts ? t : 1700000000;
        if (wi_sig_verify(v, &req, &ev, &err) != 0 && !(err.code == WI_SIG_E_DUPLICATE_KEY && duplicate_key(body)))
            abort(); /* signed as configured, refused (other than for a duplicate id or type key) */
        if (has_ts && (!ev.has_timestamp || ev.timestamp != t)) abort();
        sig[prelen] ^= 1; /* the first digest character: all of its bits are data */
        if (wi_sig_verify(v, &req, &ev, &err) == 0) abort(); /* a flipped signature verified */
        free(sig);
        free(content);
    }
checked:
    wi_sig_verifier_free(v);
done:
    free(tmpl);
    free(prefix);
    return 0;
}
