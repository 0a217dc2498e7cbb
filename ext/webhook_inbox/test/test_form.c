/* test_form.c - table-driven tests of the form-urlencoded parser (form.c): the iterator and
 * decoder at every truncation point, Twilio's sorted form, the query lookup and HubSpot's
 * partial URI unescaping. Inputs are exactly-sized heap copies, so ASan sees any overread. */
#include <stdlib.h>
#include <string.h>
#include "../form.h"

#include "check.h"

static char *exact(const char *s, size_t n)
{
    char *p = malloc(n ? n : 1);
    if (!p) abort();
    memcpy(p, s, n);
    return p;
}

/* The form rendered as "name=value|" per pair, decoded ("!" for a pair that does not decode). */
static void render(const char *s, size_t n, char *out, size_t cap)
{
    struct wi_form_iter it;
    struct wi_slice k, v;
    size_t o = 0;
    char buf[256];
    out[0] = '\0';
    wi_form_init(&it, s, n);
    while (wi_form_next(&it, &k, &v) && o + 2 * sizeof buf < cap) {
        CHECK(k.p >= s && k.p + k.n <= s + n && v.p >= s && v.p + v.n <= s + n, "slices inside the input");
        long kl = wi_form_decode(k, buf);
        if (kl < 0) { out[o++] = '!', out[o++] = '|'; continue; }
        memcpy(out + o, buf, (size_t)kl), o += (size_t)kl;
        out[o++] = '=';
        long vl = wi_form_decode(v, buf);
        if (vl < 0) out[o++] = '!';
        else memcpy(out + o, buf, (size_t)vl), o += (size_t)vl;
        out[o++] = '|';
    }
    out[o] = '\0';
}

static void test_iter(void)
{
    static const struct { const char *in, *want; } cases[] = {
        {"", ""},
        {"a=1", "a=1|"},
        {"a=1&b=2", "a=1|b=2|"},
        {"a=1&&b=", "a=1|b=|"},
        {"&a&", "a=|"},
        {"a=b=c", "a=b=c|"},
        {"a+b=c+d%20e", "a b=c d e|"},
        {"x=%E2%9C%93", "x=\xe2\x9c\x93|"},
        {"x=%2", "x=!|"},
        {"x=%zz", "x=!|"},
        {"%=1", "!|"},
        {"=v", "=v|"},
    };
    char out[1024];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = strlen(cases[i].in);
        char *s = exact(cases[i].in, n);
        render(s, n, out, sizeof out);
        CHECK(!strcmp(out, cases[i].want), "%s: got %s want %s", cases[i].in, out, cases[i].want);
        for (size_t cut = 0; cut < n; cut++) { /* every prefix parses without reading past it */
            char *t = exact(cases[i].in, cut);
            render(t, cut, out, sizeof out);
            free(t);
        }
        free(s);
    }
}

static void test_sorted(void)
{
    static const struct { const char *in, *want; } cases[] = {
        {"To=%2B1800&From=%2B1415&CallSid=CA1", "CallSidCA1From+1415To+1800"},
        {"b=2&a=9&a=1&a=1", "a1a9b2"},
        {"a=1&a=1", "a1"},
        {"", ""},
        {"x", "x"},
        {"B=1&a=1", "B1a1"}, /* bytewise: upper case first, as JS's sort */
    };
    struct wi_err err;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = strlen(cases[i].in), on = 0;
        char *s = exact(cases[i].in, n), *out = NULL;
        CHECK(wi_form_sorted(s, n, &out, &on, 999, &err) == 0, "%s sorts", cases[i].in);
        CHECK(on == strlen(cases[i].want) && (!on || !memcmp(out, cases[i].want, on)), "%s: got %.*s", cases[i].in,
              (int)on, out ? out : "");
        free(out);
        free(s);
    }
    char *s = exact("a=1&b=%G1", 9), *out = NULL;
    size_t on;
    CHECK(wi_form_sorted(s, 9, &out, &on, 999, &err) == -1 && err.code == 999 && !out, "bad escape refused");
    free(s);
}

static void test_find_and_unescape(void)
{
    const char *q = "a=1&body%53HA256=ab&bodySHA256=cd";
    struct wi_slice v = wi_form_find(q, strlen(q), "bodySHA256");
    CHECK(v.p && v.n == 2 && !memcmp(v.p, "ab", 2), "the first pair whose decoded name matches");
    CHECK(!wi_form_find(q, strlen(q), "nope").p && !wi_form_find(NULL, 0, "a").p, "absent");
    const char *u = "https://x/p?a=%3A%2f%20%zz%";
    char out[64];
    size_t n = wi_url_unescape(u, strlen(u), ":/", out);
    CHECK(n == strlen("https://x/p?a=:/%20%zz%") && !memcmp(out, "https://x/p?a=:/%20%zz%", n), "got %.*s", (int)n, out);
}

/* At most WI_FORM_MAX_PAIRS pairs are sorted: one more is refused before any sort. */
static void test_pair_limit(void)
{
    size_t n = 0, cap = 4 * (WI_FORM_MAX_PAIRS + 1);
    char *s = malloc(cap), *out;
    size_t outn;
    struct wi_err err;
    for (int i = 0; i < WI_FORM_MAX_PAIRS; i++) s[n++] = 'a', s[n++] = '=', s[n++] = '&';
    CHECK(wi_form_sorted(s, n, &out, &outn, 99, &err) == 0 && outn == 1, "%d pairs sorted", WI_FORM_MAX_PAIRS);
    free(out);
    s[n++] = 'b';
    CHECK(wi_form_sorted(s, n, &out, &outn, 99, &err) == -1 && err.code == 99, "one more pair refused");
    free(s);
}

int main(void)
{
    test_pair_limit();
    test_iter();
    test_sorted();
    test_find_and_unescape();
    printf("form: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
