/* test_verify.c - table-driven unit tests of the pure-C verification core: header
 * tokenizers (at every truncation point), codecs, HMAC, JSON scanner, canonical JSON and
 * scheme rules. Each input is copied into an exactly-sized heap buffer so that
 * AddressSanitizer catches any read past its end. */
#include <math.h>
#include <openssl/hmac.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../canon.h"
#include "../hmac.h"
#include "../json.h"
#include "../num.h"
#include "../sig.h"
#include "../sig_braintree.h"
#include "../sig_paypal.h"
#include "paypal_fixture.h"
#include "../sig_header.h"

#include "check.h"

/* An exactly-sized heap copy of s[0..n): reading s[n] is a heap overflow under ASan. */
static char *exact(const char *s, size_t n)
{
    char *p = malloc(n ? n : 1);
    if (!p) abort();
    memcpy(p, s, n);
    return p;
}

/* ---- k=v iterator ---- */

struct kv_case {
    const char *in;
    char sep, eq;
    const char *expect; /* items rendered "key=value|" ("key|" when no value) */
};

static void render_kv(const char *s, size_t n, char sep, char eq, char *out, size_t cap)
{
    struct wi_kv_iter it;
    struct wi_slice k, v;
    size_t o = 0;
    wi_kv_init(&it, s, n, sep, eq);
    out[0] = '\0';
    while (wi_kv_next(&it, &k, &v)) {
        CHECK(k.p >= s && k.p + k.n <= s + n, "key slice out of the buffer");
        if (v.p) CHECK(v.p >= s && v.p + v.n <= s + n, "value slice out of the buffer");
        o += (size_t)snprintf(out + o, cap - o, v.p ? "%.*s=%.*s|" : "%.*s|", (int)k.n, k.p,
                              (int)v.n, v.p ? v.p : "");
        if (o >= cap) break;
    }
}

static void test_kv(void)
{
    static const struct kv_case cases[] = {
        {"t=1700000000,v1=abc,v0=def", ',', '=', "t=1700000000|v1=abc|v0=def|"},
        {"t=1, v1=a ,,v1=b=c", ',', '=', "t=1|v1=a|v1=b=c|"},
        {"ts=1671552777;h1=aa;h1=bb", ';', '=', "ts=1671552777|h1=aa|h1=bb|"},
        {"v1,AAA= v1a,BBB  v2,CC", ' ', ',', "v1=AAA=|v1a=BBB|v2=CC|"},
        {"", ',', '=', ""},
        {",,,", ',', '=', ""},
        {"novalue", ',', '=', "novalue|"},
        {"=x", ',', '=', "=x|"},
        {"k=", ',', '=', "k=|"},
        {"\tt = 5 \t", ',', '=', "t=5|"},
    };
    char got[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct kv_case *c = &cases[i];
        size_t n = strlen(c->in);
        char *buf = exact(c->in, n);
        render_kv(buf, n, c->sep, c->eq, got, sizeof got);
        CHECK(strcmp(got, c->expect) == 0, "kv(%s): got %s want %s", c->in, got, c->expect);
        for (size_t cut = 0; cut <= n; cut++) { /* every truncation point */
            char *t = exact(c->in, cut);
            render_kv(t, cut, c->sep, c->eq, got, sizeof got);
            free(t);
        }
        free(buf);
    }
    struct wi_kv_iter it;
    struct wi_slice k, v;
    wi_kv_init(&it, NULL, 0, ',', '=');
    CHECK(!wi_kv_next(&it, &k, &v), "NULL input yields nothing");
}

static void test_ts_and_prefix(void)
{
    static const struct { const char *in; int ok; long long v; } ts[] = {
        {"0", 1, 0}, {"1700000000", 1, 1700000000LL}, {"999999999999999999", 1, 999999999999999999LL},
        {"", 0, 0}, {"-1", 0, 0}, {"1e9", 0, 0}, {" 1", 0, 0}, {"1234567890123456789", 0, 0}, {"12a", 0, 0},
    };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        size_t n = strlen(ts[i].in);
        char *b = exact(ts[i].in, n);
        int64_t v = -1;
        int r = wi_parse_unix_ts((struct wi_slice){b, n}, &v);
        CHECK((r == 0) == ts[i].ok && (!ts[i].ok || v == ts[i].v), "ts(%s)", ts[i].in);
        free(b);
    }
    struct wi_slice rest;
    CHECK(wi_slice_strip_prefix((struct wi_slice){"sha256=ab", 9}, "sha256=", &rest) && rest.n == 2, "prefix");
    CHECK(!wi_slice_strip_prefix((struct wi_slice){"sha25", 5}, "sha256=", &rest), "short prefix");
    CHECK(!wi_slice_strip_prefix((struct wi_slice){NULL, 0}, "x", &rest), "absent prefix");
    CHECK(wi_slice_eq((struct wi_slice){"v1", 2}, "v1") && !wi_slice_eq((struct wi_slice){"v1", 1}, "v1"), "eq");
}

static void test_codecs(void)
{
    unsigned char out[64];
    char hex[129];
    CHECK(wi_hex_decode("00ffAa", 6, out, sizeof out) == 3 && out[1] == 0xff && out[2] == 0xaa, "hex");
    CHECK(wi_hex_decode("abc", 3, out, sizeof out) == -1, "odd hex");
    CHECK(wi_hex_decode("zz", 2, out, sizeof out) == -1, "bad hex");
    CHECK(wi_hex_decode("0000", 4, out, 1) == -1, "hex overflow");
    for (int c = 0; c < 256; c++) { /* the digit table: every byte, high and low position */
        int want = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        char hi[2] = {(char)c, '7'}, lo[2] = {'7', (char)c};
        long rh = wi_hex_decode(hi, 2, out, sizeof out), rl;
        int oh = out[0];
        rl = wi_hex_decode(lo, 2, out, sizeof out);
        CHECK(want < 0 ? rh == -1 && rl == -1 : rh == 1 && oh == (want << 4 | 7) && rl == 1 && out[0] == (0x70 | want),
              "hex digit 0x%02x", c);
    }
    CHECK(wi_hex_decode("0g00000000", 10, out, sizeof out) == -1 && wi_hex_decode("000000000\0", 10, out, sizeof out) == -1,
          "a bad digit anywhere");
    for (int c = 0; c < 256; c++) { /* lowercase only: what the SDKs' string comparison takes */
        char two[2] = {'7', (char)c};
        long want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ? 1 : -1;
        CHECK(wi_hex_decode_lower(two, 2, out, sizeof out) == want, "lowercase hex digit 0x%02x", c);
    }
    wi_hex_encode((const unsigned char *)"\x01\xab", 2, hex);
    CHECK(strcmp(hex, "01ab") == 0, "hex encode");
    static const struct { const char *in; long n; const char *out; } b64[] = {
        {"", 0, ""}, {"Zg==", 1, "f"}, {"Zm8=", 2, "fo"}, {"Zm9v", 3, "foo"}, {"Zg", 1, "f"},
        {"Zm9vYg==", 4, "foob"}, {"Z", -1, NULL}, {"Zg=", -1, NULL}, {"Zh==", -1, NULL},
        {"Zm9v!", -1, NULL}, {"=", -1, NULL}, {"Zm8_", 3, "fo?"}, {"Zg===", -1, NULL},
    };
    for (size_t i = 0; i < sizeof b64 / sizeof *b64; i++) {
        size_t n = strlen(b64[i].in);
        char *b = exact(b64[i].in, n);
        long r = wi_b64_decode(b, n, out, sizeof out);
        CHECK(r == b64[i].n && (r < 0 || memcmp(out, b64[i].out, (size_t)r) == 0), "b64(%s) = %ld", b64[i].in, r);
        free(b);
    }
    CHECK(wi_b64_decode("Zm9vYg==", 8, out, 3) == -1, "b64 overflow");
    CHECK(wi_ct_equal("abc", "abc", 3) && !wi_ct_equal("abc", "abd", 3), "ct_equal");
}

static void test_hmac(void)
{
    /* RFC 4231 test case 2 and 3-part split equivalence; key longer than a block. */
    struct wi_err err;
    unsigned char mac[WI_HMAC_MAX], ref[EVP_MAX_MD_SIZE];
    unsigned int rl;
    char hex[129];
    struct wi_hmac_key *k = wi_hmac_key_new(WI_HMAC_SHA256, "Jefe", 4, &err);
    struct wi_slice parts[3] = {{"what do ya want ", 16}, {NULL, 0}, {"for nothing?", 12}};
    CHECK(k && wi_hmac_compute(k, parts, 3, mac, &err) == 32, "compute");
    wi_hex_encode(mac, 32, hex);
    CHECK(strcmp(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") == 0, "rfc4231: %s", hex);
    wi_hmac_key_free(k);
    wi_hmac_key_free(NULL);

    char longkey[300];
    memset(longkey, 0xaa, sizeof longkey);
    static const enum wi_hmac_alg algs[] = {WI_HMAC_SHA1, WI_HMAC_SHA256, WI_HMAC_SHA512};
    const EVP_MD *mds[] = {EVP_sha1(), EVP_sha256(), EVP_sha512()};
    for (int a = 0; a < 3; a++)
        for (size_t kl = 0; kl <= sizeof longkey; kl += 37) {
            k = wi_hmac_key_new(algs[a], longkey, kl, &err);
            struct wi_slice p = {"message", 7};
            int n = k ? wi_hmac_compute(k, &p, 1, mac, &err) : -1;
            HMAC(mds[a], longkey, (int)kl, (const unsigned char *)"message", 7, ref, &rl);
            CHECK(n == (int)rl && memcmp(mac, ref, rl) == 0, "alg %d key %zu matches OpenSSL HMAC()", a, kl);
            wi_hmac_key_free(k);
        }
}

/* ---- JSON ---- */

static void test_json(void)
{
    static const struct { const char *in; int valid; int jsonb; } docs[] = {
        {"{}", 1, 1}, {" [1, 2.5e-3, -0, true, false, null, \"x\"] ", 1, 1}, {"\"\\u00e9\\/\"", 1, 1},
        {"{\"a\":{\"b\":[{}]}}", 1, 1}, {"{\"a\":\"\\u0000\"}", 1, 0}, {"\"\\udc00\"", 1, 0},
        {"\"\\ud800x\"", 1, 0}, {"\"\\ud83d\\ude00\"", 1, 1}, {"1e999999", 1, 0}, {"1e99", 1, 1},
        {"", 0, 0}, {"{", 0, 0}, {"{\"a\"}", 0, 0}, {"{\"a\":}", 0, 0}, {"[1,]", 0, 0},
        {"01", 0, 0}, {"1.", 0, 0}, {"-", 0, 0}, {".5", 0, 0}, {"\"\x01\"", 0, 0}, {"\"\\x\"", 0, 0},
        {"\"\\u12\"", 0, 0}, {"\"\xc3\"", 0, 0}, {"\"\xed\xa0\x80\"", 0, 0}, {"\"\xf4\x90\x80\x80\"", 0, 0},
        {"\"\xe2\x82\xac\"", 1, 1}, {"tru", 0, 0}, {"nul", 0, 0}, {"{} {}", 0, 0}, {"NaN", 0, 0},
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        size_t n = strlen(docs[i].in);
        char *b = exact(docs[i].in, n);
        struct wi_err err;
        int unsafe = -1;
        int r = wi_json_scan(b, n, 0, NULL, 0, &unsafe, &err);
        CHECK((r == 0) == docs[i].valid, "scan(%s) = %d", docs[i].in, r);
        CHECK(wi_json_jsonb_safe(b, n) == docs[i].jsonb, "jsonb_safe(%s)", docs[i].in);
        for (size_t cut = 0; cut < n; cut++) { /* truncations never read past the end */
            char *t = exact(docs[i].in, cut);
            (void)wi_json_scan(t, cut, 0, NULL, 0, NULL, NULL);
            (void)wi_json_jsonb_safe(t, cut);
            free(t);
        }
        free(b);
    }
    char deep[2 * WI_JSON_MAX_DEPTH + 10];
    size_t d = WI_JSON_MAX_DEPTH + 2;
    memset(deep, '[', d);
    memset(deep + d, ']', d);
    CHECK(wi_json_scan(deep, 2 * d, 0, NULL, 0, NULL, NULL) == -1, "too deep");

    const char *doc = "{\"x\":{\"id\":\"inner\"},\"id\":\"evt_\\u0031\",\"type\":\"a.b\",\"n\":12,\"id\":\"dup\"}";
    struct wi_json_field f[4] = {{.name = "id"}, {.name = "type"}, {.name = "n"}, {.name = "missing"}};
    CHECK(wi_json_scan(doc, strlen(doc), 0, f, 4, NULL, NULL) == 0, "scan fields");
    CHECK(f[0].kind == WI_JSON_STRING && f[0].escaped && f[0].value.n == 10, "id field (first wins, top level only)");
    char un[16];
    size_t un_n = wi_json_unescape(f[0].value.p, f[0].value.n, un);
    CHECK(un_n == 5 && memcmp(un, "evt_1", 5) == 0, "unescape id");
    CHECK(f[1].kind == WI_JSON_STRING && f[1].value.n == 3, "type field");
    CHECK(f[2].kind == WI_JSON_NUMBER && f[2].value.n == 2, "number field");
    CHECK(f[3].kind == WI_JSON_ABSENT, "missing field");
    struct wi_json_field g[1] = {{.name = "id"}};
    const char *early = "{\"id\":\"a\", garbage";
    CHECK(wi_json_scan(early, strlen(early), WI_JSON_STOP_EARLY, g, 1, NULL, NULL) == 0 && g[0].value.n == 1, "stop early");
    CHECK(f[0].duplicate && !f[1].duplicate, "a full scan meets the second id");

    /* issue 16 item 12: a key met twice at the top level (raw or escaped) marks its field;
     * nested keys and other keys do not; the first value stays. */
    static const struct { const char *doc; int dup_id, dup_type; } dups[] = {
        {"{\"id\":\"A\",\"type\":\"t\",\"data\":{\"id\":\"x\"},\"id\":\"B\"}", 1, 0},
        {"{\"id\":\"A\",\"\\u0069d\":\"B\",\"type\":\"t\"}", 1, 0},
        {"{\"\\u0069d\":\"A\",\"type\":1,\"type\":\"t\"}", 0, 1},
        {"{\"id\":\"A\",\"type\":\"t\",\"data\":{\"id\":\"x\",\"id\":\"y\"},\"ids\":[\"id\"]}", 0, 0},
    };
    for (size_t i = 0; i < sizeof dups / sizeof *dups; i++) {
        struct wi_json_field h[2] = {{.name = "id"}, {.name = "type"}};
        size_t n = strlen(dups[i].doc);
        char *b = exact(dups[i].doc, n);
        CHECK(wi_json_scan(b, n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, h, 2, NULL, NULL) == 0, "dup scan %zu", i);
        CHECK(h[0].duplicate == dups[i].dup_id && h[1].duplicate == dups[i].dup_type, "dup flags %zu", i);
        CHECK(h[0].kind == WI_JSON_STRING && h[0].value.n == 1 && h[0].value.p[0] == 'A', "first id stays %zu", i);
        for (size_t cut = 0; cut < n; cut++) /* every truncation: no read past the end */
            (void)wi_json_scan(b, cut, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, h, 2, NULL, NULL);
        free(b);
    }
}

static void test_canon(void)
{
    static const struct { const char *in, *out; } cases[] = {
        {"{\"b\":1,\"a\":[true,false,null]}", "{\"a\":[true,false,null],\"b\":1}"},
        {"{\"10\":1,\"9\":2,\"2\":3}", "{\"10\":1,\"2\":3,\"9\":2}"},
        {"[100.0,-0.0,1e-07,95.4,1E+2,1e16,1e-4,1e-5,0.5,-2.5e-10]",
         "[100,0,1e-07,95.4,100,10000000000000000,0.0001,1e-05,0.5,-2.5e-10]"},
        {"[123456789012345678901234567890,-0,1e400,-1e400,1e-400]", "[123456789012345678901234567890,0,Infinity,-Infinity,0]"},
        {"[1.7976931348623157e308]", "[179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368]"},
        {"[5e-324,0.1,0.30000000000000004,2.2250738585072014e-308]", "[5e-324,0.1,0.30000000000000004,2.2250738585072014e-308]"},
        {"\"\\u00e9\\/\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001F\x7f\"", "\"\xc3\xa9/\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\""},
        {"{\"\\ud83d\\ude00\":1,\"\\uffff\":2}", "{\"\xef\xbf\xbf\":2,\"\xf0\x9f\x98\x80\":1}"},
        {"{\"a\":1,\"a\":2,\"a\":3}", "{\"a\":3}"},
        {"[5.9604644775390625e-08,5.6843418860808015e-14]", "[5.960464477539063e-08,5.684341886080802e-14]"},
        {" { } ", "{}"},
        {"{\"a\\u0000\":\"\\u0000\"}", "{\"a\\u0000\":\"\\u0000\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = strlen(cases[i].in);
        char *b = exact(cases[i].in, n), *out = NULL;
        size_t on = 0;
        struct wi_err err;
        int r = wi_canon_didit(b, n, WI_CANON_MAX_OUT(n), NULL, &out, &on, &err);
        CHECK(r == 0 && on == strlen(cases[i].out) && memcmp(out, cases[i].out, on) == 0,
              "canon(%s) = %.*s", cases[i].in, (int)on, out ? out : "");
        wi_canon_free(out);
        for (size_t cut = 0; cut < n; cut++) {
            char *t = exact(cases[i].in, cut);
            if (wi_canon_didit(t, cut, WI_CANON_MAX_OUT(cut), NULL, &out, &on, &err) == 0) wi_canon_free(out);
            free(t);
        }
        free(b);
    }
    static const char *const bad[] = {"", "{", "[1,]", "\"\\ud800\"", "{\"\\udc00\":1}", "01", "\"\xff\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *out = NULL;
        size_t on;
        struct wi_err err;
        CHECK(wi_canon_didit(bad[i], strlen(bad[i]), WI_CANON_MAX_OUT(0), NULL, &out, &on, &err) == -1 && out == NULL &&
                  err.code >= WI_JSON_E_SYNTAX, "canon rejects %s", bad[i]);
    }
}

/* ---- numbers ---- */

/* Oracle: Python repr by brute force over libc (the canonicalizer's printer before Ryu):
 * at each length the correctly rounded digits, then their two neighbours, keeping the
 * nearest that reads back as d. Slow and obviously right. */
static void split_e(const char *tmp, unsigned long long *m, int *e)
{
    const char *t = tmp + (tmp[0] == '-');
    *m = 0;
    for (; *t && *t != 'e'; t++)
        if (*t != '.') *m = *m * 10 + (unsigned long long)(*t - '0');
    *e = atoi(t + 1);
}

static double value_of(unsigned long long m, int e, int ndig, int neg)
{
    char b[48];
    snprintf(b, sizeof b, "%s%llue%d", neg ? "-" : "", m, e - ndig + 1);
    return strtod(b, NULL);
}

static size_t oracle_repr(double d, char *out)
{
    char tmp[40], digits[24];
    unsigned long long m = 0, pow10 = 1;
    int e = 0, ndig = 1, neg = d < 0, found = 0;
    for (int prec = 0; prec < 17 && !found; prec++, pow10 *= 10) {
        ndig = prec + 1;
        snprintf(tmp, sizeof tmp, "%.*e", prec, d);
        split_e(tmp, &m, &e);
        if (strtod(tmp, NULL) == d) {
            found = 1;
            break;
        }
        unsigned long long up = m + 1, down = m - 1;
        int eu = e, ed = e;
        if (up == pow10 * 10) up = pow10, eu = e + 1;
        if (down < pow10) down = pow10 * 10 - 1, ed = e - 1;
        int up_ok = value_of(up, eu, ndig, neg) == d, down_ok = value_of(down, ed, ndig, neg) == d;
        if (up_ok && down_ok) {
            long double lu = strtold(tmp, NULL);
            char bu[48], bd[48];
            snprintf(bu, sizeof bu, "%llue%d", up, eu - ndig + 1);
            snprintf(bd, sizeof bd, "%llue%d", down, ed - ndig + 1);
            long double du = strtold(bu, NULL) - (neg ? -lu : lu), dd = (neg ? -lu : lu) - strtold(bd, NULL);
            up_ok = du <= dd;
            down_ok = !up_ok;
        }
        if (up_ok) m = up, e = eu, found = 1;
        else if (down_ok) m = down, e = ed, found = 1;
    }
    if (!found) {
        snprintf(tmp, sizeof tmp, "%.16e", d);
        split_e(tmp, &m, &e);
        ndig = 17;
    }
    int nd = 0;
    char rev[24];
    for (int i = 0; i < ndig; i++, m /= 10) rev[nd++] = (char)('0' + m % 10);
    for (int i = 0; i < nd; i++) digits[i] = rev[nd - 1 - i];
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    return wi_num_format(neg, digits, nd, e + 1, out);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static void check_repr(double d)
{
    char got[WI_NUM_REPR_MAX], want[64];
    if (!isfinite(d) || d == trunc(d)) return;
    size_t gn = wi_num_repr(d, got), wn = oracle_repr(d, want);
    CHECK(gn == wn && memcmp(got, want, gn) == 0, "repr(%a) = %.*s, want %.*s", d, (int)gn, got, (int)wn, want);
}

/* wi_num_repr against the oracle: powers of two and their neighbours (lopsided intervals),
 * subnormals, short decimals, and random bit patterns over every exponent. */
static void test_num(void)
{
    char buf[WI_NUM_INTEGRAL_MAX];
    for (int e = -1074; e < 53; e++) {
        double p = ldexp(1, e);
        check_repr(p), check_repr(-p), check_repr(nextafter(p, 0)), check_repr(nextafter(p, 1e300));
        check_repr(3 * p), check_repr(p * 1.5);
    }
    for (int k = 1; k < 2000; k++) check_repr(k / 1000.0), check_repr(k * 1e-7), check_repr(1.0 / k);
    static const double fixed[] = {0.1, 0.3, 95.4, 1e-7, 5e-324, 2.2250738585072014e-308, 0.30000000000000004,
                                   1.7976931348623157e-300, 4503599627370495.5, 9007199254740991.0 / 2};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) check_repr(fixed[i]);
    int n = getenv("WI_NUM_ITERATIONS") ? atoi(getenv("WI_NUM_ITERATIONS")) : 200000;
    for (int i = 0; i < n; i++) {
        uint64_t bits = rng();
        double d;
        if (i & 1) bits = (bits & ~(0x7ffull << 52)) | ((uint64_t)(rng() % 1076) << 52); /* |d| < 2^53 */
        memcpy(&d, &bits, sizeof d);
        check_repr(d);
    }
    static const struct { double d; const char *s; } ints[] = {
        {0.0, "0"}, {-0.0, "0"}, {1e16, "10000000000000000"}, {-1e22, "-10000000000000000000000"},
        {18446744073709551616.0, "18446744073709551616"}, {18446744073709549568.0, "18446744073709549568"},
        {1e23, "99999999999999991611392"}, {0x1p100, "1267650600228229401496703205376"},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        size_t len = wi_num_integral(ints[i].d, buf);
        CHECK(len == strlen(ints[i].s) && memcmp(buf, ints[i].s, len) == 0, "integral %s = %.*s", ints[i].s, (int)len, buf);
    }
    for (int e = 0; e < 1024; e += 7) { /* every exponent against printf's exact %.0f */
        char want[400];
        double d = floor(ldexp(1.0 + (double)(rng() >> 12) * 0x1p-52, e));
        size_t len = wi_num_integral(d, buf);
        int wn = snprintf(want, sizeof want, "%.0f", d);
        CHECK(len == (size_t)wn && memcmp(buf, want, len) == 0, "integral 2^%d", e);
    }
    CHECK(wi_num_integral(1.7976931348623157e308, buf) == 309, "DBL_MAX has 309 digits");
}

static struct wi_sig_verifier *make(const char *s, const char *secret);

/* Didit V2 runs before any key check: output at most WI_CANON_MAX_OUT(n), and a cancel
 * flag stops it (issue 9 item 1). */
static void test_canon_bounds(void)
{
    size_t count = 3000, n = 0, on;
    char *body = malloc(count * 6 + 2), *out = NULL;
    struct wi_err err;
    body[n++] = '[';
    for (size_t i = 0; i < count; i++) memcpy(body + n, i ? ",1e308" : "1e308", i ? 6 : 5), n += i ? 6 : 5;
    body[n++] = ']';
    CHECK(wi_canon_didit(body, n, WI_CANON_MAX_OUT(n), NULL, &out, &on, &err) == -1 && out == NULL &&
              err.code == WI_CANON_E_TOO_LARGE && !strstr(err.msg, "1e308"), "1e308 x3000 refused: %s", err.msg);
    CHECK(wi_canon_didit(body, n, (size_t)-1, NULL, &out, &on, &err) == 0 && on == count * 310 + 1,
          "unbounded: every digit (%zu)", on);
    wi_canon_free(out);
    CHECK(wi_canon_didit("[1e20]", 6, 21, NULL, &out, &on, &err) == -1 && err.code == WI_CANON_E_TOO_LARGE, "limit 21");
    CHECK(wi_canon_didit("[1e20]", 6, 23, NULL, &out, &on, &err) == 0 && on == 23, "limit 23 (exactly the output)");
    wi_canon_free(out);

    _Atomic int cancel = 1;
    CHECK(wi_canon_didit(body, n, (size_t)-1, &cancel, &out, &on, &err) == -1 && err.code == WI_CANON_E_INTERRUPTED,
          "cancelled");
    CHECK(wi_canon_didit("[1,2]", 5, 64, &cancel, &out, &on, &err) == 0, "small input finishes before the first poll");
    wi_canon_free(out);

    struct wi_sig_verifier *v = make("didit", "didit_secret");
    struct wi_sig_request req = {.now = 1700000000, .body = {body, n}};
    struct wi_sig_event ev;
    req.hdr[1] = (struct wi_slice){"0000000000000000000000000000000000000000000000000000000000000000", 64};
    CHECK(wi_sig_verify(v, &req, &ev, &err) == -1 && err.code == WI_SIG_E_PAYLOAD_TOO_LARGE, "verify: V2 refused");
    req.hdr[0] = req.hdr[1];
    CHECK(wi_sig_verify(v, &req, &ev, &err) == -1 && err.code == WI_SIG_E_PAYLOAD_TOO_LARGE, "a failing raw does not hide it");
    req.cancel = &cancel;
    CHECK(wi_sig_verify(v, &req, &ev, &err) == -1 && err.code == WI_CANON_E_INTERRUPTED, "verify: cancelled");
    wi_sig_verifier_free(v);
    free(body);
}

/* ---- schemes ---- */

static struct wi_sig_verifier *make(const char *s, const char *secret)
{
    struct wi_sig_config cfg = {.provider = s, .tolerance = 300, .max_body = 1 << 20};
    struct wi_err err;
    struct wi_sig_verifier *v = wi_sig_verifier_new(&cfg, &err);
    if (!v || (secret && wi_sig_verifier_add_secret(v, secret, strlen(secret), &err))) abort();
    return v;
}

static char last_id[128]; /* event id of the last verify1 call */

static int verify1(const struct wi_sig_verifier *v, const char *body, const char *h0, const char *h1,
                   int64_t now, struct wi_sig_event *ev)
{
    struct wi_sig_request req = {.now = now};
    struct wi_err err;
    char *b = exact(body, strlen(body)), *x0 = h0 ? exact(h0, strlen(h0)) : NULL,
         *x1 = h1 ? exact(h1, strlen(h1)) : NULL;
    req.body = (struct wi_slice){b, strlen(body)};
    req.hdr[0] = (struct wi_slice){x0, h0 ? strlen(h0) : 0};
    req.hdr[1] = (struct wi_slice){x1, h1 ? strlen(h1) : 0};
    int r = wi_sig_verify(v, &req, ev, &err) ? err.code : 0;
    snprintf(last_id, sizeof last_id, "%.*s", ev->id.p ? (int)ev->id.n : 0, ev->id.p ? ev->id.p : "");
    ev->id.p = ev->type.p = NULL; /* they pointed into buffers freed below */
    free(b);
    free(x0);
    free(x1);
    return r;
}

static void test_schemes(void)
{
    struct wi_sig_event ev;
    const char *stripe_body = "{\"id\":\"evt_test_webhook\",\"object\":\"event\"}";
    const char *stripe_hdr = "t=1700000000,v1=d95c6b7477fbd7e9f90b1b0ef5f9c7ac25abca5382460e0d988c2b2a5b71b990";
    struct wi_sig_verifier *v = make("stripe", "whsec_test_secret");
    CHECK(verify1(v, stripe_body, stripe_hdr, NULL, 1700000000, &ev) == 0, "stripe vector");
    CHECK(strcmp(last_id, "evt_test_webhook") == 0 && ev.has_timestamp && ev.timestamp == 1700000000, "stripe event");
    CHECK(verify1(v, stripe_body, stripe_hdr, NULL, 1700000301, &ev) == WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE, "stripe late");
    char upper[128];
    snprintf(upper, sizeof upper, "%s", stripe_hdr);
    for (char *c = strstr(upper, "v1="); *c; c++) *c = (char)(*c >= 'a' && *c <= 'f' ? *c - 32 : *c);
    CHECK(verify1(v, stripe_body, upper, NULL, 1700000000, &ev) == WI_SIG_E_MALFORMED_SIGNATURE,
          "stripe: upper-case hex refused (the SDK compares the lowercase string)");
    CHECK(verify1(v, stripe_body, stripe_hdr, NULL, 1699999699, &ev) == WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE, "stripe early");
    size_t n = strlen(stripe_hdr);
    for (size_t cut = 0; cut < n; cut++) { /* every truncation of the header fails */
        char t[128];
        memcpy(t, stripe_hdr, cut);
        t[cut] = '\0';
        int r = verify1(v, stripe_body, t, NULL, 1700000000, &ev);
        CHECK(r == WI_SIG_E_MISSING_SIGNATURE || r == WI_SIG_E_MALFORMED_SIGNATURE || r == WI_SIG_E_SIGNATURE_MISMATCH,
              "stripe header cut at %zu -> %d", cut, r);
    }
    wi_sig_verifier_free(v);

    v = make("github", "It's a Secret to Everybody");
    const char *gh = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    CHECK(verify1(v, "Hello, World!", gh, NULL, 0, &ev) == 0 && !last_id[0] &&
              strcmp(ev.body_sha256, "dffd6021bb2bd5b0af676290809ec3a53191dd81c7f70a4b28688a362182986f") == 0, "github vector");
    CHECK(verify1(v, "Hello, World?", gh, NULL, 0, &ev) == WI_SIG_E_SIGNATURE_MISMATCH, "github tampered");
    CHECK(verify1(v, "Hello, World!", NULL, NULL, 0, &ev) == WI_SIG_E_MISSING_SIGNATURE, "github missing");
    wi_sig_verifier_free(v);

    v = make("paddle", NULL);
    CHECK(verify1(v, "{}", "ts=1;h1=00", NULL, 1, &ev) == WI_SIG_E_NO_SECRET, "no secret");
    struct wi_err err;
    CHECK(wi_sig_verifier_add_secret(v, "", 0, &err) == -1 && err.code == WI_ERR_ARG, "empty secret");
    CHECK(wi_sig_verifier_add_secret(v, "abc\n", 4, &err) == -1 && strstr(err.msg, "whitespace") && !strstr(err.msg, "abc"),
          "whitespace secret: %s", err.msg);
    CHECK(wi_sig_verifier_add_secret(v, "pdl_ntfset_test", 15, &err) == 0, "add secret");
    const char *pb = "{\"event_id\":\"evt_01h\",\"event_type\":\"transaction.completed\",\"data\":{\"id\":1}}";
    CHECK(verify1(v, pb, "ts=1671552777;h1=00;h1=4547cb19b3cafbc9c03860fccdcd254422692a7fc8b4d6085fa3b41f98c1e907",
                  NULL, 1671552777, &ev) == 0 && strcmp(last_id, "evt_01h") == 0, "paddle: second h1 matches");
    wi_sig_verifier_free(v);

    struct wi_sig_config big = {.provider = "github", .tolerance = 300, .max_body = 4};
    v = wi_sig_verifier_new(&big, &err);
    CHECK(verify1(v, "12345", NULL, NULL, 0, &ev) == WI_SIG_E_PAYLOAD_TOO_LARGE, "size first, before no_secret");
    wi_sig_verifier_free(v);
    wi_sig_verifier_free(NULL);

    struct wi_sig_config bad = {.provider = "hmac", .alg = WI_HMAC_SHA256, .signature_header = "x-sig", .template = "{id}.{body}"};
    CHECK(wi_sig_verifier_new(&bad, &err) == NULL && err.code == WI_ERR_ARG, "template {id} without id header");
    struct wi_sig_config unsigned_ts = {.provider = "hmac", .alg = WI_HMAC_SHA256, .signature_header = "x-sig",
                                        .timestamp_header = "x-ts"};
    CHECK(wi_sig_verifier_new(&unsigned_ts, &err) == NULL && err.code == WI_ERR_ARG && strstr(err.msg, "{timestamp}"),
          "timestamp header the template does not sign");
    unsigned_ts.template = "{timestamp}.{body}";
    CHECK((v = wi_sig_verifier_new(&unsigned_ts, &err)) != NULL, "signed timestamp header");
    wi_sig_verifier_free(v);
}

/* Hex HMAC-SHA256 of the Didit V2 canonical form of body under key. */
static void didit_v2_sig(const char *key, const char *body, char hex[65])
{
    unsigned char mac[32];
    unsigned int ml = 0;
    char *canon;
    size_t cn;
    struct wi_err err;
    if (wi_canon_didit(body, strlen(body), WI_CANON_MAX_OUT(strlen(body)), NULL, &canon, &cn, &err)) abort();
    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)canon, cn, mac, &ml);
    wi_canon_free(canon);
    wi_hex_encode(mac, 32, hex);
}

/* V2 signs the canonical form (last duplicate key wins, key escapes decoded): a body that
 * canonicalizes the same must not bring another event id or a fresh timestamp. */
static void test_didit_v2_fields(void)
{
    struct wi_sig_event ev;
    char sig[65], fresh_sig[65];
    struct wi_sig_verifier *v = make("didit", "didit_secret");
    const char *old = "{\"event_id\":\"e1\",\"timestamp\":1699996400,\"webhook_type\":\"t\"}";
    const char *fresh = "{\"event_id\":\"e1\",\"timestamp\":1700000000,\"webhook_type\":\"t\"}";
    static const char *const replays[] = {
        "{\"timestamp\":1700000000,\"event_id\":\"e1\",\"timestamp\":1699996400,\"webhook_type\":\"t\"}",
        "{\"event_id\":\"e1\",\"time\\u0073tamp\":1699996400,\"webhook_type\":\"t\"}",
    };
    static const char *const renamed[] = {
        "{\"event_id\":\"e2\",\"event_id\":\"e1\",\"timestamp\":1700000000,\"webhook_type\":\"t\"}",
        "{\"webhook_type\":\"x\",\"event_id\":\"e1\",\"timestamp\":1700000000,\"webhook_type\":\"t\"}",
        "{\"event_id\":\"e2\",\"event\\u005fid\":\"e1\",\"timestamp\":1700000000,\"webhook_type\":\"t\"}",
    };
    /* an escaped key is the key it decodes to, for the scan as for jsonb and the canonical form */
    const char *escaped_key = "{\"event\\u005fid\":\"e1\",\"timestamp\":1700000000,\"webhook_type\":\"t\"}";
    didit_v2_sig("didit_secret", old, sig);
    didit_v2_sig("didit_secret", fresh, fresh_sig);
    CHECK(verify1(v, old, NULL, sig, 1700000000, &ev) == WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE, "didit v2 stale");
    for (size_t i = 0; i < sizeof replays / sizeof *replays; i++)
        CHECK(verify1(v, replays[i], NULL, sig, 1700000000, &ev) != 0, "didit v2 replay %zu accepted", i);
    for (size_t i = 0; i < sizeof renamed / sizeof *renamed; i++)
        CHECK(verify1(v, renamed[i], NULL, fresh_sig, 1700000000, &ev) == WI_SIG_E_DUPLICATE_KEY,
              "didit v2 renamed %zu", i);
    CHECK(verify1(v, escaped_key, NULL, fresh_sig, 1700000000, &ev) == 0 && strcmp(last_id, "e1") == 0,
          "didit v2 escaped key");
    CHECK(verify1(v, fresh, NULL, fresh_sig, 1700000000, &ev) == 0 && strcmp(last_id, "e1") == 0, "didit v2 fresh");
    /* issue 9 item 2: an escaped string timestamp is the signed time, not "absent" */
    const char *str_ts = "{\"event_id\":\"e1\",\"timestamp\":\"1699996400\"}";
    const char *esc_ts = "{\"event_id\":\"e1\",\"timestamp\":\"\\u00316\\u0039\\u0039996400\"}";
    didit_v2_sig("didit_secret", str_ts, sig);
    CHECK(verify1(v, esc_ts, NULL, sig, 1699996400, &ev) == 0 && ev.timestamp == 1699996400, "escaped ts decoded");
    CHECK(verify1(v, esc_ts, NULL, sig, 1700000000, &ev) == WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE, "escaped ts checked");
    CHECK(verify1(v, "{\"event_id\":\"\\u00e9\",\"timestamp\":1700000000}", NULL,
                  (didit_v2_sig("didit_secret", "{\"event_id\":\"\\u00e9\",\"timestamp\":1700000000}", sig), sig),
                  1700000000, &ev) == 0, "didit v2 escaped id value still verifies");
    wi_sig_verifier_free(v);
}

/* Every provider entry builds a verifier (its template parses and agrees with its headers)
 * and takes a secret in its key form's shape. */
static void test_provider_table(void)
{
    struct wi_err err;
    CHECK(wi_provider_count() >= 8 && wi_provider_find("nope") == NULL, "table");
    for (size_t i = 0; i < wi_provider_count(); i++) {
        const struct wi_provider *p = wi_provider_at(i);
        struct wi_sig_config cfg = {.provider = p->name, .tolerance = 300, .max_body = 1 << 20,
                                    .alg = WI_HMAC_SHA256, .signature_header = "x-sig"};
        struct wi_sig_verifier *v = wi_sig_verifier_new(&cfg, &err);
        CHECK(v != NULL, "provider %s: %s", p->name, v ? "" : err.msg);
        CHECK(wi_provider_find(p->name) == p, "provider %s found by name", p->name);
        CHECK(p->custom || p->ts_slot == WI_NO_SLOT || strstr(p->tmpl, "{timestamp}"), "%s signs its timestamp", p->name);
        CHECK(!p->id_required || wi_provider_id_signed(p), "%s: a required id header is signed", p->name);
        CHECK(p->alg_slot <= 0 || (p->versions[1].tag && p->versions[0].tag && p->layout == WI_LAYOUT_ONE &&
                                   p->alg_slot < WI_SIG_MAX_HEADERS && p->headers[p->alg_slot]),
              "%s: an algorithm header chooses between two named versions of one signature", p->name);
        wi_sig_verifier_free(v);
    }
}

/* PayPal's pieces: zlib's CRC-32 against its check values, the transmission time parser on
 * valid forms, impossible dates and every truncation of a valid time, and secret forms. */
static void test_paypal(void)
{
    static const struct { const char *s; int64_t t; } times[] = {
        {"1970-01-01T00:00:00Z", 0}, {"2023-11-14T22:13:20Z", 1700000000}, {"2023-11-14T23:13:20+01:00", 1700000000},
        {"2023-11-14T21:13:20-01:00", 1700000000}, {"2023-11-14T22:13:20.123456Z", 1700000000},
        {"2000-02-29T00:00:00Z", 951782400}, {"2023-11-14t22:13:20z", 1700000000}};
    static const char *const bad[] = {"2023-02-29T00:00:00Z", "2023-13-01T00:00:00Z", "2023-11-14T24:00:00Z",
                                      "2023-11-14 22:13:20Z", "2023-11-14T22:13:20", "2023-11-14T22:13:20.Z",
                                      "2023-11-14T22:13:20+0100", "1700000000", "2023-11-14T22:13:20Zx"};
    int64_t t;
    const char *q = "The quick brown fox jumps over the lazy dog";
    CHECK(wi_sig_paypal_crc32("123456789", 9) == 0xCBF43926u, "crc32 check value");
    CHECK(wi_sig_paypal_crc32(q, strlen(q)) == 0x414FA339u, "crc32 of the fox");
    CHECK(wi_sig_paypal_crc32(NULL, 0) == 0, "crc32 of nothing");
    for (size_t i = 0; i < sizeof times / sizeof *times; i++)
        CHECK(wi_sig_paypal_time((struct wi_slice){times[i].s, strlen(times[i].s)}, &t) == 0 && t == times[i].t,
              "time %s", times[i].s);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(wi_sig_paypal_time((struct wi_slice){bad[i], strlen(bad[i])}, &t) == -1, "refused time %s", bad[i]);
    for (size_t n = 0; n < strlen(times[4].s); n++)
        CHECK(wi_sig_paypal_time((struct wi_slice){times[4].s, n}, &t) == -1, "truncated time at %zu", n);
    struct wi_sig_verifier *v = make("paypal", NULL);
    static const char *const secrets[] = {"WH1:CERT-1:not a pem", "WH1:-----BEGIN CERTIFICATE-----", ":CERT-1:-----BEGIN CERTIFICATE-----",
                                          "WH 1:CERT-1:-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----", "WH 1", "WH1:",
                                          "WH1:CERT-1:-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"};
    struct wi_err err;
    for (size_t i = 0; i < sizeof secrets / sizeof *secrets; i++)
        CHECK(wi_sig_verifier_add_secret(v, secrets[i], strlen(secrets[i]), &err) == -1 && err.code == WI_ERR_ARG &&
                  !strstr(err.msg, "WH1"),
              "paypal secret %zu refused without quoting it: %s", i, err.msg);
    wi_sig_verifier_free(v);

    /* the fixture's delivery verifies; each header changed, the body changed, another webhook
     * id, a time out of tolerance or outside the certificate, an unknown certificate do not */
    const char *good[5] = {PAYPAL_ID, PAYPAL_TIME, PAYPAL_SIG, PAYPAL_CERT_URL, "SHA256withRSA"};
    struct wi_sig_request req = {.body = {PAYPAL_BODY, strlen(PAYPAL_BODY)}, .now = 1700000000};
    struct wi_sig_event ev;
    for (int i = 0; i < 5; i++) req.hdr[i] = (struct wi_slice){good[i], strlen(good[i])};
    v = make("paypal", PAYPAL_SECRET);
    CHECK(wi_sig_verify(v, &req, &ev, &err) == 0 && ev.id.n == 4 && !memcmp(ev.id.p, "WH-1", 4) && ev.has_timestamp &&
              ev.timestamp == 1700000000 && ev.type.n == strlen("PAYMENT.CAPTURE.COMPLETED"),
          "paypal fixture verifies: %s", err.msg);
    static const struct { int slot; const char *value; int code; } bad_h[] = {
        {0, "t2", WI_SIG_E_SIGNATURE_MISMATCH}, {1, "2023-11-14T22:13:21Z", WI_SIG_E_SIGNATURE_MISMATCH},
        {2, "AAAA", WI_SIG_E_MALFORMED_SIGNATURE}, {3, "https://api.paypal.com/v1/notifications/certs/CERT-2", WI_SIG_E_UNKNOWN_KEY},
        {3, "https://api.paypal.co/v1/notifications/certs/CERT-1", WI_SIG_E_MALFORMED_SIGNATURE},
        {4, "SHA1withRSA", WI_SIG_E_MALFORMED_SIGNATURE}, {2, "", WI_SIG_E_MISSING_SIGNATURE}};
    for (size_t i = 0; i < sizeof bad_h / sizeof *bad_h; i++) {
        struct wi_sig_request r = req;
        r.hdr[bad_h[i].slot] = (struct wi_slice){bad_h[i].value, strlen(bad_h[i].value)};
        CHECK(wi_sig_verify(v, &r, &ev, &err) == -1 && err.code == bad_h[i].code, "paypal header %zu refused: %s", i, err.msg);
    }
    struct wi_sig_request r = req;
    r.hdr[4] = (struct wi_slice){NULL, 0}; /* no PAYPAL-AUTH-ALGO: SHA256withRSA */
    CHECK(wi_sig_verify(v, &r, &ev, &err) == 0, "paypal without auth-algo: %s", err.msg);
    r = req;
    r.body.n--;
    CHECK(wi_sig_verify(v, &r, &ev, &err) == -1 && err.code == WI_SIG_E_SIGNATURE_MISMATCH, "paypal body changed");
    r = req, r.now = 1700000301;
    CHECK(wi_sig_verify(v, &r, &ev, &err) == -1 && err.code == WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE, "paypal stale");
    r.now = 4102444801; /* after the certificate's notAfter */
    CHECK(wi_sig_verify(v, &r, &ev, &err) == -1 && strstr(err.msg, "not valid now"), "paypal expired: %s", err.msg);
    wi_sig_verifier_free(v);
    /* a bare webhook id (fetch_certificates: the gem adds the fetched certificate) names no
     * certificate: unknown key, until the certificate is configured beside it */
    v = make("paypal", "WH1");
    CHECK(wi_sig_verifier_secret_count(v) == 1 && wi_sig_verify(v, &req, &ev, &err) == -1 && err.code == WI_SIG_E_UNKNOWN_KEY,
          "paypal bare webhook id: unknown key: %s", err.msg);
    CHECK(wi_sig_verifier_add_secret(v, PAYPAL_SECRET, strlen(PAYPAL_SECRET), &err) == 0 && wi_sig_verify(v, &req, &ev, &err) == 0,
          "paypal bare id beside a certificate: %s", err.msg);
    wi_sig_verifier_free(v);
    static const char *const urls[] = {"https://api.paypal.com/v1/notifications/certs/CERT-1",
                                       "https://api-m.sandbox.paypal.com/v1/notifications/certs/CERT-1",
                                       "https://api.paypal.com/v1/notifications/certs/..", "https://api.paypal.com/v1/notifications/certs/.x",
                                       "https://api.paypal.com:443/v1/notifications/certs/CERT-1",
                                       "https://api.paypal.com/v1/notifications/certs/CERT-1/x",
                                       "https://api.paypal.com/v1/notifications/certs/"};
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        struct wi_slice id = {NULL, 0};
        int rc = wi_sig_paypal_cert_id((struct wi_slice){urls[i], strlen(urls[i])}, &id, &err);
        CHECK(i < 2 ? rc == 0 && id.n == 6 && !memcmp(id.p, "CERT-1", 6) : rc == -1 && err.code == WI_SIG_E_MALFORMED_SIGNATURE,
              "paypal cert url %zu", i);
    }
    const char *base = PAYPAL_SECRET;
    char other[2048];
    snprintf(other, sizeof other, "WH2%s", base + 3); /* the same certificate for webhook WH2 */
    v = make("paypal", other);
    CHECK(wi_sig_verify(v, &req, &ev, &err) == -1 && err.code == WI_SIG_E_SIGNATURE_MISMATCH, "paypal other webhook id");
    wi_sig_verifier_free(v);
}

/* Braintree's bt_challenge answer: the SDK's (webhookNotification.verify, from
 * spec/fixtures/vectors/sdk-challenges.json), its charset and length rule at every bound,
 * the first secret during a rotation, no secret, another provider. */
static void test_braintree_challenge(void)
{
    const char *sdk = "pub_key_1|a08632096e4d7743f10d0650570edde544ca7b8a", *ch = "13ef90b16585cefb5282";
    char out[WI_BT_ANSWER_MAX], hex[40];
    struct wi_err err;
    struct wi_sig_verifier *v = make("braintree", "pub_key_1:eb871a9248c2a67d3c36266d57a609e1");
    CHECK(wi_sig_braintree_challenge(v, (struct wi_slice){ch, 20}, out, sizeof out, &err) == (long)strlen(sdk) &&
              !strcmp(out, sdk), "braintree challenge as the SDK answers: %s", out);
    memset(hex, 'a', sizeof hex);
    for (size_t n = 0; n <= sizeof hex; n++) {
        long r = wi_sig_braintree_challenge(v, (struct wi_slice){hex, n}, out, sizeof out, &err);
        CHECK((n >= 20 && n <= 32) ? r == 10 + 40 : r == -1 && err.code == WI_SIG_E_MALFORMED_PAYLOAD, "challenge of %zu", n);
    }
    static const char *const bad[] = {"ABCDEF0123456789abcd", "0123456789abcdef012g", "0123456789abcdef012\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(wi_sig_braintree_challenge(v, (struct wi_slice){bad[i], 20}, out, sizeof out, &err) == -1 &&
                  err.code == WI_SIG_E_MALFORMED_PAYLOAD, "challenge %zu refused", i);
    CHECK(wi_sig_verifier_add_secret(v, "pub_key_2:x", 11, &err) == 0 &&
              wi_sig_braintree_challenge(v, (struct wi_slice){ch, 20}, out, sizeof out, &err) > 0 && !strcmp(out, sdk),
          "braintree challenge: the first secret answers");
    /* the answer is an HMAC under the payload key over the challenge: never a delivery */
    for (size_t n = WI_BT_CHALLENGE_MIN; n <= WI_BT_CHALLENGE_MAX; n++) {
        char form[WI_BT_ANSWER_MAX + 64];
        struct wi_sig_event ev;
        CHECK(wi_sig_braintree_challenge(v, (struct wi_slice){"0123456789abcdef0123456789abcdef", n}, out, sizeof out, &err) > 0,
              "challenge of %zu answered", n);
        snprintf(form, sizeof form, "bt_signature=%s&bt_payload=%.*s", out, (int)n, "0123456789abcdef0123456789abcdef");
        CHECK(verify1(v, form, NULL, NULL, 1700000000, &ev) == WI_SIG_E_MALFORMED_PAYLOAD,
              "a challenge answer of %zu digits refused as a delivery", n);
    }
    wi_sig_verifier_free(v);
    v = make("braintree", NULL);
    CHECK(wi_sig_braintree_challenge(v, (struct wi_slice){ch, 20}, out, sizeof out, &err) == -1 && err.code == WI_SIG_E_NO_SECRET,
          "braintree challenge without a secret");
    wi_sig_verifier_free(v);
    v = make("github", "s");
    CHECK(wi_sig_braintree_challenge(v, (struct wi_slice){ch, 20}, out, sizeof out, &err) == -1 && err.code == WI_ERR_ARG,
          "bt_challenge on another provider");
    wi_sig_verifier_free(v);
}

int main(void)
{
    test_provider_table();
    test_kv();
    test_ts_and_prefix();
    test_codecs();
    test_hmac();
    test_json();
    test_num();
    test_canon();
    test_canon_bounds();
    test_schemes();
    test_didit_v2_fields();
    test_paypal();
    test_braintree_challenge();
    printf("verify core: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
