/* test_reconcile.c - the --endpoint parser, the providers' checks, URLs and request bodies,
 * the query parameter reader that takes GitHub's Link cursor, and the stored keys of long ids. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "event_id.h"
#include "minitest.h"
#include "pg/pgarray.h"
#include "reconcile/reconcile.h"
#include "reconcile/reconcile_http.h"

static int parses(const char *spec)
{
    struct wi_rc_endpoint ep;
    struct wi_err err;
    int rc = wi_rc_endpoint_parse(spec, &ep, &err);
    wi_rc_endpoint_clear(&ep);
    return rc == 0;
}

int main(void)
{
    struct wi_rc_endpoint ep;
    struct wi_err err;
    char url[512], v[64];

    CHECK(wi_rc_endpoint_parse("billing=stripe:stripe:acct_1:live account=acct_1 mode=live rate=2", &ep, &err) == 0);
    CHECK(!strcmp(ep.name, "billing") && ep.api == &wi_rc_stripe && !strcmp(ep.scope, "stripe:acct_1:live"));
    CHECK(!strcmp(ep.account, "acct_1") && ep.live == 1 && ep.rate == 2 && !ep.failed_only);
    CHECK(wi_rc_stripe.check(&ep, "sk_live_x", &err) == 0);
    CHECK(wi_rc_stripe.check(&ep, "sk_test_x", &err) < 0 && strstr(err.msg, "mode=live but the API key is a test key"));
    CHECK(wi_rc_stripe.check(&ep, "pk_live_x", &err) < 0 && !strstr(err.msg, "pk_live_x")); /* never quotes the key */
    CHECK(wi_rc_stripe.page_url(&ep, "https://api.stripe.com", 100, 200, "evt_1", url, sizeof url) == 0);
    CHECK(!strcmp(url, "https://api.stripe.com/v1/events?limit=100&created%5Bgte%5D=100&created%5Blte%5D=200"
                       "&starting_after=evt_1"));
    CHECK(wi_rc_stripe.page_url(&ep, "https://api.stripe.com", 100, 200, "evt_1&x=1", url, sizeof url) < 0);
    wi_rc_endpoint_clear(&ep);

    CHECK(wi_rc_endpoint_parse("gh=github:github:acme hook=repos/acme/app/hooks/42", &ep, &err) == 0);
    CHECK(wi_rc_github.check(&ep, "t", &err) == 0);
    CHECK(wi_rc_github.page_url(&ep, "https://api.github.com", 0, 0, "v1_9", url, sizeof url) == 0);
    CHECK(!strcmp(url, "https://api.github.com/repos/acme/app/hooks/42/deliveries?per_page=100&cursor=v1_9"));
    CHECK(wi_rc_github.redeliver_url(&ep, "https://api.github.com", "77", url, sizeof url) == 0);
    CHECK(!strcmp(url, "https://api.github.com/repos/acme/app/hooks/42/deliveries/77/attempts"));
    CHECK(wi_rc_github.redeliver_url(&ep, "https://api.github.com", "7/../1", url, sizeof url) < 0);
    wi_rc_endpoint_clear(&ep);
    for (const char *const *h = (const char *const[]){"repos/acme/hooks/1", "repos/a/b/hooks/x", "orgs/../hooks/1",
                                                       "users/a/hooks/1", "repos/a/b/hooks/1?x", NULL};
         *h; h++) {
        char spec[128];
        snprintf(spec, sizeof spec, "gh=github:s hook=%s", *h);
        CHECK(wi_rc_endpoint_parse(spec, &ep, &err) == 0);
        CHECK(wi_rc_github.check(&ep, "t", &err) < 0);
        wi_rc_endpoint_clear(&ep);
    }
    CHECK(parses("o=github:s hook=orgs/acme/hooks/1"));
    /* a GitHub App's own webhook: app=APP_ID, its key a JWT (jwt_iss) */
    CHECK(wi_rc_endpoint_parse("ga=github:github:app app=123456", &ep, &err) == 0);
    CHECK(wi_rc_github.check(&ep, "", &err) == 0 && !strcmp(wi_rc_github.jwt_iss(&ep), "123456"));
    CHECK(wi_rc_github.page_url(&ep, "https://api.github.com", 0, 0, NULL, url, sizeof url) == 0);
    CHECK(!strcmp(url, "https://api.github.com/app/hook/deliveries?per_page=100"));
    CHECK(wi_rc_github.redeliver_url(&ep, "https://api.github.com", "77", url, sizeof url) == 0);
    CHECK(!strcmp(url, "https://api.github.com/app/hook/deliveries/77/attempts"));
    wi_rc_endpoint_clear(&ep);
    CHECK(wi_rc_endpoint_parse("gh=github:s hook=repos/acme/app/hooks/42", &ep, &err) == 0);
    CHECK(wi_rc_github.jwt_iss(&ep) == NULL); /* a hook= endpoint keeps its API key */
    wi_rc_endpoint_clear(&ep);
    for (const char *const *a = (const char *const[]){"ga=github:s app=1 hook=repos/a/b/hooks/1", "ga=github:s app=1/2",
                                                       "ga=github:s app=\"1\"", NULL};
         *a; a++) {
        CHECK(wi_rc_endpoint_parse(*a, &ep, &err) == 0);
        CHECK(wi_rc_github.check(&ep, "", &err) < 0 && strstr(err.msg, "app="));
        wi_rc_endpoint_clear(&ep);
    }
    CHECK(!parses("st=stripe:s app=1")); /* app= is GitHub's */

    CHECK(wi_rc_endpoint_parse("pad=paddle:paddle:acme mode=sandbox", &ep, &err) == 0 && ep.api == &wi_rc_paddle);
    CHECK(wi_rc_paddle.check(&ep, "pdl_live_apikey_x", &err) < 0 &&
          strstr(err.msg, "mode=sandbox but the API key is a live key"));
    CHECK(wi_rc_paddle.check(&ep, "pdl_sdbx_apikey_x", &err) == 0 && ep.live == 0);
    CHECK(wi_rc_paddle.page_url(&ep, "https://p", 0, 0, "evt_01h", url, sizeof url) == 0 &&
          !strcmp(url, "https://p/events?per_page=200&order_by=id%5BDESC%5D&after=evt_01h"));
    CHECK(wi_rc_paddle.page_url(&ep, "https://p", 0, 0, "evt_1&per_page=1", url, sizeof url) < 0);
    wi_rc_endpoint_clear(&ep);
    CHECK(wi_rc_endpoint_parse("pad=paddle:s", &ep, &err) == 0 && wi_rc_paddle.check(&ep, "0123abcd", &err) == 0 &&
          ep.live == 1); /* an older key: mode= says, default live */
    wi_rc_endpoint_clear(&ep);

    CHECK(wi_rc_endpoint_parse("sq=square:s merchant=ML1", &ep, &err) == 0 && ep.api == &wi_rc_square);
    CHECK(wi_rc_square.check(&ep, "EAAAx", &err) == 0 && ep.live == 1);
    {
        char body[2048];
        CHECK(wi_rc_square.page_body(&ep, 0, 60, "Q3Vyc29y+/=", body, sizeof body) == 0);
        CHECK(strstr(body, "\"cursor\": \"Q3Vyc29y+/=\"") && strstr(body, "\"merchant_ids\": [\"ML1\"]") &&
              strstr(body, "\"start_at\": \"1970-01-01T00:00:00Z\", \"end_at\": \"1970-01-01T00:01:00Z\""));
        CHECK(wi_rc_square.page_body(&ep, 0, 60, "a\"}, \"limit\": 1", body, sizeof body) < 0); /* JSON stays ours */
    }
    wi_rc_endpoint_clear(&ep);
    CHECK(wi_rc_endpoint_parse("sq=square:s merchant=M\"1", &ep, &err) == 0 && wi_rc_square.check(&ep, "t", &err) < 0);
    wi_rc_endpoint_clear(&ep);
    CHECK(parses("sq=square:s mode=sandbox") && !parses("sq=square:s mode=test") && !parses("b=stripe:s mode=sandbox"));
    CHECK(!parses("pad=paddle:s merchant=M1"));      /* Square's option */

    CHECK(!parses("billing"));                       /* no =PROVIDER:SCOPE */
    CHECK(!parses("Billing=stripe:s"));              /* a name names an env var: [a-z][a-z0-9_]* */
    CHECK(!parses("b=paypal:s"));                    /* no such provider API */
    CHECK(!parses("b=stripe:"));                     /* an empty scope */
    CHECK(!parses("b=stripe:s hook=repos/a/b/hooks/1")); /* another provider's option */
    CHECK(!parses("b=stripe:s mode=prod"));
    CHECK(!parses("b=stripe:s rate=0"));
    CHECK(!parses("b=stripe:s token=sk_live_1"));    /* credentials are no option */

    CHECK(wi_rc_query_param("https://x/a?per_page=100&cursor=v1_12%3D", "cursor", v, sizeof v) == 0 &&
          !strcmp(v, "v1_12%3D"));
    CHECK(wi_rc_query_param("https://x/a?cursor=a\"b", "cursor", v, sizeof v) < 0);
    CHECK(wi_rc_query_param("https://x/a?xcursor=1", "cursor", v, sizeof v) < 0);
    CHECK(wi_rc_query_param("https://x/a", "cursor", v, sizeof v) < 0);
    { /* the page statement names long ids in hex; each gets the receiver's key (event_id.h) */
        struct wi_pgarray hex = {0}, stored = {0};
        char key[WI_EVENT_ID_HASHED_LEN + 1];
        CHECK(wi_rc_stored_ids("616263,c3a9", &hex, &stored, &err) == 2);
        CHECK(!strcmp(wi_pgarray_end(&hex), "{\"616263\",\"c3a9\"}"));
        CHECK(!strcmp(wi_pgarray_end(&stored), /* SHA-256("abc"), SHA-256("\xc3\xa9") */
                      "{\"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\","
                      "\"sha256:4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c\"}"));
        CHECK(wi_rc_stored_ids("61626", &hex, &stored, &err) < 0 && strstr(err.msg, "not hex"));
        CHECK(wi_rc_stored_ids("zz", &hex, &stored, &err) < 0);
        CHECK(wi_rc_stored_ids("61,,62", &hex, &stored, &err) < 0);
        CHECK(!wi_event_id_hashed(WI_EVENT_ID_MAX) && wi_event_id_hashed(WI_EVENT_ID_MAX + 1));
        CHECK(wi_event_id_hash("abc", 3, key) == 0 && strlen(key) == WI_EVENT_ID_HASHED_LEN &&
              !strcmp(key, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        CHECK(!strcmp(WI_EVENT_ID_MAX_TEXT, "255"));
        wi_pgarray_free(&hex);
        wi_pgarray_free(&stored);
    }

    DONE("test_reconcile");
}
