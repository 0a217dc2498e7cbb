/* test_ordering.c - ordering.c's decisions, table-driven: what it reads in C (the providers'
 * usual shapes: members, duplicate and escaped keys, strings, integers, seconds and
 * milliseconds) and what it leaves to SQL or decides NULL; then every truncation of each
 * payload, which must never read past its end (ASan). Byte-for-byte equality with the SQL
 * functions is spec/webhook_inbox/ordering_equivalence_spec.rb's job. */
#include <stdlib.h>
#include <string.h>

#include "../ordering.h"
#include "check.h"

#define SQL WI_ORDERING_SQL
#define NONE WI_ORDERING_NONE
#define VAL WI_ORDERING_VALUE

struct ordering_case {
    const char *json, *spec, *time_path;
    int key;
    const char *key_text;
    int time;
    const char *time_text;
};

static const struct ordering_case CASES[] = {
    /* Stripe: data.object.id and created (seconds) */
    {"{\"id\":\"evt_1\",\"created\":1700000000,\"data\":{\"object\":{\"id\":\"cus_1\"}}}", "data.object.id", "created",
     VAL, "cus_1", VAL, "1700000000"},
    /* whitespace everywhere, an escaped key, an escaped value, milliseconds */
    {" { \"data\" : { \"object\" : { \"\\u0069d\" : \"caf\\u00e9\" } } , \"created\" : 1700000000123 } ", "data.object.id",
     "created", VAL, "caf\xc3\xa9", VAL, "1700000000.123"},
    /* jsonb keeps the last of duplicate keys, at every level */
    {"{\"data\":{\"object\":{\"id\":\"a\"}},\"data\":{\"object\":{\"id\":\"b\",\"id\":\"c\"}}}", "data.object.id", NULL,
     VAL, "c", NONE, NULL},
    /* GitHub: two parts, the second with alternatives; an integer's text */
    {"{\"repository\":{\"id\":42},\"pull_request\":{\"number\":7}}", "repository.id,issue.number|pull_request.number",
     NULL, VAL, "[\"42\", \"7\"]", NONE, NULL},
    /* one part missing makes the key NULL whatever the others are */
    {"{\"repository\":{\"id\":42},\"issue\":[1]}", "repository.id,missing,issue.0", NULL, NONE, NULL, NONE, NULL},
    /* a null value is absent: the next alternative wins */
    {"{\"a\":null,\"b\":true}", "a|b", NULL, VAL, "true", NONE, NULL},
    {"{\"a\":-0}", "a", "a", VAL, "0", VAL, "0"},
    /* a scalar with members left: NULL, as jsonb's #> */
    {"{\"a\":\"x\"}", "a.b", NULL, NONE, NULL, NONE, NULL},
    /* times: negative, past 1e14, a string: NULL (the receipt's time); a fraction: SQL */
    {"{\"k\":1,\"t\":-5}", "k", "t", VAL, "1", NONE, NULL},
    {"{\"k\":1,\"t\":100000000000000}", "k", "t", VAL, "1", NONE, NULL},
    {"{\"k\":1,\"t\":\"1700000000\"}", "k", "t", VAL, "1", NONE, NULL},
    {"{\"k\":1,\"t\":99999999999}", "k", "t", VAL, "1", VAL, "99999999999"},
    {"{\"k\":1,\"t\":1700000000.5}", "k", "t", VAL, "1", SQL, NULL},
    {"{\"k\":1,\"t\":[1]}", "k", "t.0", VAL, "1", SQL, NULL},
    /* what only jsonb can print, or what needs its index rules: SQL */
    {"{\"a\":{\"b\":1}}", "a", NULL, SQL, NULL, NONE, NULL},
    {"{\"a\":[1]}", "a.0", NULL, SQL, NULL, NONE, NULL},
    {"{\"a\":1.50}", "a", NULL, SQL, NULL, NONE, NULL},
    {"{\"a\":\"q\\\"uote\",\"b\":\"x\"}", "a,b", NULL, SQL, NULL, NONE, NULL},
    {"[1,2]", "a", NULL, SQL, NULL, NONE, NULL},
    {"{\"a\":\"x\"}", "a||b", NULL, VAL, "x", NONE, NULL},
    {"{\"b\":\"x\"}", "a||b", NULL, SQL, NULL, NONE, NULL},
    /* an empty spec, an empty part: NULL */
    {"{\"a\":\"x\"}", "", NULL, NONE, NULL, NONE, NULL},
    {"{\"a\":\"x\"}", "a,", NULL, NONE, NULL, NONE, NULL},
};

/* 201 bytes: past the length the SQL function stores as it is. */
static void long_keys(void)
{
    char json[300], spec[] = "a";
    struct wi_ordering o;
    int n = snprintf(json, sizeof json, "{\"a\":\"%0200d\"}", 0);

    wi_ordering_derive(json, (size_t)n, spec, 1, NULL, 0, &o);
    CHECK(o.key == VAL && o.key_len == 200, "200 bytes are stored as they are");
    n = snprintf(json, sizeof json, "{\"a\":\"%0201d\"}", 0);
    wi_ordering_derive(json, (size_t)n, spec, 1, NULL, 0, &o);
    CHECK(o.key == SQL, "201 bytes are hashed by SQL");
}

int main(void)
{
    size_t i, cut;

    for (i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const struct ordering_case *c = &CASES[i];
        size_t n = strlen(c->json);
        struct wi_ordering o;

        wi_ordering_derive(c->json, n, c->spec, strlen(c->spec), c->time_path,
                           c->time_path ? strlen(c->time_path) : 0, &o);
        CHECK(o.key == c->key, "case %zu: key outcome %d, want %d", i, o.key, c->key);
        if (c->key_text && o.key == VAL)
            CHECK(o.key_len == strlen(c->key_text) && !memcmp(o.key_text, c->key_text, o.key_len),
                  "case %zu: key %.*s, want %s", i, (int)o.key_len, o.key_text, c->key_text);
        if (c->key == VAL) {
            CHECK(o.time == c->time, "case %zu: time outcome %d, want %d", i, o.time, c->time);
            if (c->time_text && o.time == VAL)
                CHECK(o.time_len == strlen(c->time_text) && !memcmp(o.time_text, c->time_text, o.time_len),
                      "case %zu: time %.*s, want %s", i, (int)o.time_len, o.time_text, c->time_text);
        }
        /* every truncation, in a buffer of exactly that size (ASan sees a read past it) */
        for (cut = 0; cut < n; cut++) {
            char *copy = malloc(cut ? cut : 1);
            if (!copy)
                abort();
            memcpy(copy, c->json, cut);
            wi_ordering_derive(copy, cut, c->spec, strlen(c->spec), c->time_path,
                               c->time_path ? strlen(c->time_path) : 0, &o);
            CHECK(o.key >= SQL && o.key <= VAL && o.key_len <= WI_ORDERING_KEY_MAX, "case %zu cut %zu", i, cut);
            free(copy);
        }
    }
    long_keys();
    printf("test_ordering: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
