/* test_adyen.c - Adyen's per-item signatures (sig_adyen.c): each notification item is its own
 * event keyed by its signed fields, whatever the delivery's order, repetition, spacing or
 * batch; the bound on items; every truncation and single-byte change of a signed batch is
 * refused or yields the same events. Items are signed here as Adyen's docs sign them. */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../sig.h"
#include "../sig_adyen.h"
#include "check.h"

#define KEY_HEX "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

/* A signed item: psp, code, success, value; the signature under KEY_HEX (or wrong_key). */
static char *item(const char *psp, const char *code, const char *success, int value, int wrong_key)
{
    unsigned char key[32], mac[32];
    unsigned int maclen = 0;
    char signed_[512], b64[64], *out = malloc(1024);
    for (int i = 0; i < 32; i++) sscanf(&KEY_HEX[2 * i], "%2hhx", &key[i]);
    if (wrong_key) key[0] ^= 1;
    snprintf(signed_, sizeof signed_, "%s::TestMerchant:order-1:%d:EUR:%s:%s", psp, value, code, success);
    HMAC(EVP_sha256(), key, 32, (const unsigned char *)signed_, strlen(signed_), mac, &maclen);
    EVP_EncodeBlock((unsigned char *)b64, mac, 32);
    snprintf(out, 1024,
             "{\"NotificationRequestItem\":{\"additionalData\":{\"hmacSignature\":\"%s\"},\"amount\":{\"currency\":"
             "\"EUR\",\"value\":%d},\"eventCode\":\"%s\",\"eventDate\":\"2023-11-14T22:13:20+01:00\",\"merchantAccountCode\":"
             "\"TestMerchant\",\"merchantReference\":\"order-1\",\"pspReference\":\"%s\",\"reason\":\"unsigned\","
             "\"success\":\"%s\"}}",
             b64, value, code, psp, success);
    return out;
}

/* {"live":"false","notificationItems":[items joined by sep]} (caller frees). */
static char *body_of(const char *const *items, size_t n, const char *sep)
{
    size_t cap = 64;
    for (size_t i = 0; i < n; i++) cap += strlen(items[i]) + strlen(sep);
    char *b = malloc(cap);
    strcpy(b, "{\"live\":\"false\",\"notificationItems\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) strcat(b, sep);
        strcat(b, items[i]);
    }
    strcat(b, "]}");
    return b;
}

static struct wi_sig_verifier *verifier(int id_from_body)
{
    struct wi_sig_config cfg = {.provider = "adyen", .tolerance = -1, .max_body = 1 << 20, .id_from_body = id_from_body};
    struct wi_err err;
    struct wi_sig_verifier *v = wi_sig_verifier_new(&cfg, &err);
    if (!v || wi_sig_verifier_add_secret(v, KEY_HEX, strlen(KEY_HEX), &err)) abort();
    return v;
}

/* Verifies body (copied to an exact-size buffer, so ASan sees any over-read); returns 0 or
 * the error code. */
static int run(const struct wi_sig_verifier *v, const char *body, size_t n, struct wi_sig_event *ev, char **copy)
{
    struct wi_err err;
    *copy = malloc(n ? n : 1);
    memcpy(*copy, body, n);
    struct wi_sig_request req = {.body = {*copy, n}, .now = 1700000000};
    int rc = wi_sig_verify(v, &req, ev, &err) ? err.code : 0;
    if (rc) CHECK(err.msg[0] && ev->items == NULL, "a refusal says why and leaves nothing to release");
    return rc;
}

static int slice_is(struct wi_slice s, const char *want)
{
    return s.p && s.n == strlen(want) && !memcmp(s.p, want, s.n);
}

/* The event's item ids joined by ' ' into out. */
static void ids_of(const struct wi_sig_event *ev, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < ev->nitems && o + ev->items[i].id.n + 2 < cap; i++) {
        if (i) out[o++] = ' ';
        memcpy(out + o, ev->items[i].id.p, ev->items[i].id.n);
        o += ev->items[i].id.n;
        out[o] = '\0';
    }
}

static void test_one_item(const struct wi_sig_verifier *v, const char *a)
{
    struct wi_sig_event ev;
    char *body = body_of(&a, 1, ","), *copy, want_doc[1200];
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0, "one item verifies");
    CHECK(ev.nitems == 1 && slice_is(ev.items[0].id, "psp1:AUTHORISATION:true") &&
              slice_is(ev.items[0].type, "AUTHORISATION"), "its id and type from its signed fields");
    CHECK(slice_is(ev.id, "psp1:AUTHORISATION:true") && slice_is(ev.type, "AUTHORISATION"), "the delivery is that event");
    snprintf(want_doc, sizeof want_doc, "{\"live\":\"false\",\"notificationItems\":[%s]}", a);
    CHECK(slice_is(ev.items[0].doc, want_doc), "its document is a one-item delivery of its bytes");
    CHECK(ev.items[0].text.p >= copy && ev.items[0].text.p + ev.items[0].text.n <= copy + strlen(body),
          "its text is in the body");
    wi_sig_event_release(&ev);
    wi_sig_event_release(&ev); /* twice: harmless */
    CHECK(ev.items == NULL && ev.nitems == 0, "released");
    free(copy);
    free(body);

    /* no "live": the document has none either; escapes in a signed field are signed decoded */
    char *bare = malloc(strlen(a) + 64);
    sprintf(bare, "{\"notificationItems\":[%s]}", a);
    char *esc = malloc(strlen(bare) + 16), *at = strstr(bare, "\"psp1\"");
    sprintf(esc, "%.*s\"\\u0070sp1\"%s", (int)(at - bare), bare, at + 6);
    CHECK(run(v, esc, strlen(esc), &ev, &copy) == 0 && slice_is(ev.items[0].id, "psp1:AUTHORISATION:true") &&
              ev.items[0].doc.n == strlen(esc) && !memcmp(ev.items[0].doc.p, esc, strlen(esc)),
          "escaped pspReference: the id decoded, the document as sent");
    wi_sig_event_release(&ev);
    free(copy);
    free(esc);
    free(bare);
}

static void test_batches(const struct wi_sig_verifier *v, const char *a, const char *b, const char *a_false)
{
    struct wi_sig_event ev;
    char ids[512], sha_ab[65], *copy;
    const char *aa[] = {a, a}, *ab[] = {a, b}, *ba[] = {b, a}, *aba[] = {a, b, a}, *aab[] = {a, a_false};

    char *body = body_of(aa, 2, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && ev.nitems == 1 && slice_is(ev.id, "psp1:AUTHORISATION:true"),
          "[A,A] is A once, with A's id");
    wi_sig_event_release(&ev), free(copy), free(body);

    body = body_of(ab, 2, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && ev.nitems == 2, "[A,B]: two events");
    ids_of(&ev, ids, sizeof ids);
    CHECK(!strcmp(ids, "psp1:AUTHORISATION:true psp2:AUTHORISATION:true"), "[A,B] ids in order: %s", ids);
    CHECK(!ev.id.p && strlen(ev.body_sha256) == 64 && slice_is(ev.type, "AUTHORISATION"),
          "the delivery: the hash of its item ids, the shared eventCode");
    memcpy(sha_ab, ev.body_sha256, 65);
    wi_sig_event_release(&ev), free(copy), free(body);

    const char *const *orders[] = {ba, aba};
    size_t counts[] = {2, 3};
    const char *seps[] = {" ,\n\t", "\r\n,  "};
    for (int i = 0; i < 2; i++) {
        body = body_of(orders[i], counts[i], seps[i]);
        CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && ev.nitems == 2 && !strcmp(ev.body_sha256, sha_ab),
              "[B,A] / [A,B,A], re-spaced: the same two events, the same delivery id");
        wi_sig_event_release(&ev), free(copy), free(body);
    }

    body = body_of(aab, 2, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && ev.nitems == 2 && slice_is(ev.type, "AUTHORISATION"),
          "the same payment's failed authorisation is another event");
    ids_of(&ev, ids, sizeof ids);
    CHECK(!strcmp(ids, "psp1:AUTHORISATION:true psp1:AUTHORISATION:false"), "ids %s", ids);
    wi_sig_event_release(&ev), free(copy), free(body);

    char *refund = item("psp3", "REFUND", "true", 1130, 0);
    const char *mixed[] = {a, refund};
    body = body_of(mixed, 2, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && ev.nitems == 2 && !ev.type.p &&
              slice_is(ev.items[1].type, "REFUND"), "mixed eventCodes: each item keeps its own, the delivery none");
    wi_sig_event_release(&ev), free(copy), free(body), free(refund);

    char *forged = item("psp2", "AUTHORISATION", "true", 1130, 1);
    const char *af[] = {a, forged};
    body = body_of(af, 2, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == WI_SIG_E_SIGNATURE_MISMATCH, "one forged item refuses the delivery");
    free(copy), free(body), free(forged);
}

static void test_bounds(const struct wi_sig_verifier *v, const char *a)
{
    struct wi_sig_event ev;
    const char *many[WI_SIG_ADYEN_MAX_ITEMS + 1];
    char *copy, *distinct[WI_SIG_ADYEN_MAX_ITEMS + 1];
    for (int i = 0; i <= WI_SIG_ADYEN_MAX_ITEMS; i++) {
        char psp[16];
        snprintf(psp, sizeof psp, "p%d", i);
        many[i] = distinct[i] = item(psp, "CAPTURE", "true", i, 0);
    }
    char *body = body_of(many, WI_SIG_ADYEN_MAX_ITEMS, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && ev.nitems == WI_SIG_ADYEN_MAX_ITEMS &&
              slice_is(ev.type, "CAPTURE"), "the bound: %d distinct items", WI_SIG_ADYEN_MAX_ITEMS);
    wi_sig_event_release(&ev), free(copy), free(body);
    body = body_of(many, WI_SIG_ADYEN_MAX_ITEMS + 1, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == WI_SIG_E_TOO_MANY_ITEMS, "one more is refused");
    free(copy), free(body);
    for (int i = 0; i <= WI_SIG_ADYEN_MAX_ITEMS; i++) many[i] = a;
    body = body_of(many, WI_SIG_ADYEN_MAX_ITEMS + 1, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == WI_SIG_E_TOO_MANY_ITEMS, "counted before duplicates collapse");
    free(copy), free(body);
    for (int i = 0; i <= WI_SIG_ADYEN_MAX_ITEMS; i++) free(distinct[i]);
}

static void test_malformed(const struct wi_sig_verifier *v, const char *a)
{
    static const struct { const char *fmt; int code; } cases[] = {
        {"{\"live\":\"false\",\"notificationItems\":[]}", WI_SIG_E_MISSING_SIGNATURE},
        {"{\"live\":\"false\",\"notificationItems\":[ \n ]}", WI_SIG_E_MISSING_SIGNATURE},
        {"{\"live\":\"false\"}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":{}}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":\"[]\"}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"[%s]", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[%s,]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[,%s]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[%s %s]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[%s,1]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[%s,[[[[[[]]]]]]]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[%s,{\"NotificationRequestItem\":[]}]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[%s,{}]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"notificationItems\":[%s],\"notificationItems\":[]}", WI_SIG_E_DUPLICATE_KEY},
        {"{\"live\":\"false\",\"live\":\"true\",\"notificationItems\":[%s]}", WI_SIG_E_DUPLICATE_KEY},
        {"{\"live\":false,\"notificationItems\":[%s]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"live\":\"xxxxxxxxxxxxxxxxx\",\"notificationItems\":[%s]}", WI_SIG_E_MALFORMED_PAYLOAD},
        {"{\"live\":{\"a\":[1,2]},\"notificationItems\":[%s]}", WI_SIG_E_MALFORMED_PAYLOAD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct wi_sig_event ev;
        char body[4096], *copy;
        snprintf(body, sizeof body, cases[i].fmt, a, a);
        int rc = run(v, body, strlen(body), &ev, &copy);
        CHECK(rc == cases[i].code, "malformed case %zu: code %d, want %d", i, rc, cases[i].code);
        if (!rc) wi_sig_event_release(&ev);
        free(copy);
    }
    /* a signed field twice inside an item */
    char *dup = malloc(strlen(a) + 64), *at = strstr(a, "\"pspReference\"");
    sprintf(dup, "{\"notificationItems\":[%.*s\"pspReference\":\"psp9\",%s]}", (int)(at - a), a, at);
    struct wi_sig_event ev;
    char *copy;
    CHECK(run(v, dup, strlen(dup), &ev, &copy) == WI_SIG_E_DUPLICATE_KEY, "a signed key twice");
    free(copy), free(dup);
}

/* Every truncation of a signed two-item batch is refused (or, cut inside trailing spacing,
 * the same events); every single-byte change is refused or yields the same item ids. */
static void test_truncation_and_mutation(const struct wi_sig_verifier *v, const char *a, const char *b)
{
    const char *ab[] = {a, b};
    char *body = body_of(ab, 2, ", "), want[512], got[512], *copy;
    size_t n = strlen(body);
    struct wi_sig_event ev;
    CHECK(run(v, body, n, &ev, &copy) == 0, "the batch verifies");
    ids_of(&ev, want, sizeof want);
    wi_sig_event_release(&ev), free(copy);
    for (size_t cut = 0; cut < n; cut++) {
        int rc = run(v, body, cut, &ev, &copy);
        CHECK(rc != 0, "truncated at %zu verified", cut);
        if (!rc) wi_sig_event_release(&ev);
        free(copy);
    }
    static const char subst[] = {' ', '0', 'x', '"', ',', ']', '}', '\\', '\n', (char)0xc3};
    size_t ok = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t s = 0; s < sizeof subst; s++) {
            if (body[i] == subst[s]) continue;
            char saved = body[i];
            body[i] = subst[s];
            if (run(v, body, n, &ev, &copy) == 0) {
                ids_of(&ev, got, sizeof got);
                CHECK(!strcmp(got, want), "byte %zu -> 0x%02x verified as other events: %s", i, (unsigned char)subst[s], got);
                ok++;
                wi_sig_event_release(&ev);
            }
            free(copy);
            body[i] = saved;
        }
    CHECK(ok > 0, "some unsigned byte changes (eventDate, reason, spacing) still verify");
    free(body);
}

static void test_id_from_body(const char *a, const char *b)
{
    struct wi_sig_verifier *v = verifier(1);
    const char *ab[] = {a, b, a};
    char *body = body_of(ab, 3, ","), *copy, hex[65];
    struct wi_sig_event ev;
    unsigned char d[32];
    const char *signed_ = "psp1::TestMerchant:order-1:1130:EUR:AUTHORISATION:true";
    SHA256((const unsigned char *)signed_, strlen(signed_), d);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", d[i]);
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && ev.nitems == 2 && slice_is(ev.items[0].id, hex) &&
              slice_is(ev.items[0].type, "AUTHORISATION"), "id_from_body: an item's id is the SHA-256 of its signed string");
    wi_sig_event_release(&ev), free(copy), free(body);
    body = body_of(ab, 1, ",");
    CHECK(run(v, body, strlen(body), &ev, &copy) == 0 && !ev.id.p && !strcmp(ev.body_sha256, hex),
          "id_from_body, one item: the delivery's id is that hash");
    wi_sig_event_release(&ev), free(copy), free(body);
    wi_sig_verifier_free(v);
}

int main(void)
{
    struct wi_sig_verifier *v = verifier(0);
    char *a = item("psp1", "AUTHORISATION", "true", 1130, 0), *b = item("psp2", "AUTHORISATION", "true", 1130, 0),
         *a_false = item("psp1", "AUTHORISATION", "false", 1130, 0);
    test_one_item(v, a);
    test_batches(v, a, b, a_false);
    test_bounds(v, a);
    test_malformed(v, a);
    test_truncation_and_mutation(v, a, b);
    test_id_from_body(a, b);
    free(a), free(b), free(a_false);
    wi_sig_verifier_free(v);
    printf("test_adyen: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
