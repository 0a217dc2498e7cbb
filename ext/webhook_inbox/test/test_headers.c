/* test_headers.c - table-driven unit tests of headers.c: which Rack entries are kept, and
 * that no credential (by name or by value) ever is. Each name and value is an exactly-sized
 * heap copy, so AddressSanitizer catches a read past its end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../headers.h"

#include "check.h"

static char *exact(const char *s, size_t n)
{
    char *p = malloc(n ? n : 1);
    if (!p) abort();
    memcpy(p, s, n);
    return p;
}

/* 1 when the Rack entry key = value alone is kept. */
static int kept(const char *key, const char *value)
{
    struct wi_headers h = {0};
    char *k = exact(key, strlen(key)), *v = exact(value, strlen(value));
    size_t len;
    int got;

    wi_headers_add(&h, k, strlen(key), v, strlen(value));
    got = wi_headers_json(&h, &len) != NULL;
    wi_headers_free(&h);
    free(k);
    free(v);
    return got;
}

struct name_case {
    const char *key;   /* Rack env key */
    const char *value;
    int kept;
};

static const struct name_case name_cases[] = {
    /* what a delivery is told apart by: kept */
    {"HTTP_USER_AGENT", "Stripe/1.0", 1},
    {"HTTP_STRIPE_SIGNATURE", "t=1,v1=ab", 1},
    {"HTTP_X_HUB_SIGNATURE_256", "sha256=ab", 1},
    {"HTTP_WEBHOOK_SIGNATURE", "v1,abc=", 1},
    {"HTTP_X_SHOPIFY_HMAC_SHA256", "abc=", 1},
    {"HTTP_X_GITHUB_DELIVERY", "d-1", 1},
    {"HTTP_WEBHOOK_ID", "msg_1", 1},
    {"HTTP_X_API_KE", "1", 1},
    {"HTTP_X_APIARY", "not a key", 1},
    {"HTTP_X_SHOPIFY_API_VERSION", "2024-01", 1},
    {"HTTP_X_FORWARDED_FOR", "10.0.0.1", 1},
    {"CONTENT_TYPE", "application/json", 1},
    {"HTTP_VERSION", "HTTP/1.1", 0},
    {"REQUEST_METHOD", "POST", 0},
    /* issue 16 item 4: kept in plain text before the rule was words */
    {"HTTP_X_AUTH_KEY", "s3cr3t", 0},
    {"HTTP_X_WEBHOOK_KEY", "s3cr3t", 0},
    {"HTTP_OCP_APIM_SUBSCRIPTION_KEY", "s3cr3t", 0},
    {"HTTP_X_FUNCTIONS_KEY", "s3cr3t", 0},
    {"HTTP_CF_ACCESS_JWT_ASSERTION", "s3cr3t", 0},
    {"HTTP_X_GOOG_IAP_JWT_ASSERTION", "s3cr3t", 0},
    {"HTTP_X_WEBHOOK_PASSPHRASE", "s3cr3t", 0},
    {"HTTP_X_ACCESS_KEY", "s3cr3t", 0},
    {"HTTP_X_SIGNING_KEY", "s3cr3t", 0},
    /* the earlier words */
    {"HTTP_AUTHORIZATION", "s3cr3t", 0},
    {"HTTP_PROXY_AUTHORIZATION", "s3cr3t", 0},
    {"HTTP_COOKIE", "s3cr3t", 0},
    {"HTTP_X_SHOPIFY_ACCESS_TOKEN", "s3cr3t", 0},
    {"HTTP_X_WEBHOOK_SECRET", "s3cr3t", 0},
    {"HTTP_X_PASSWORD", "s3cr3t", 0},
    {"HTTP_X_API_KEY", "s3cr3t", 0},
    {"HTTP_APIKEY", "s3cr3t", 0},
    {"HTTP_X_SESSION_ID", "s3cr3t", 0},
    {"HTTP_X_CREDENTIALS", "s3cr3t", 0},
    {"HTTP_X_SAML_ASSERTION", "s3cr3t", 0},
    /* a word at the very start and the very end of the name */
    {"HTTP_KEY", "s3cr3t", 0},
    {"HTTP_X_TOKEN", "s3cr3t", 0},
    {"HTTP_X_KE", "1", 1},
    /* by value, whatever the name */
    {"HTTP_X_FORWARDED_USER", "Bearer eyJ.abc", 0},
    {"HTTP_X_ORIGINAL_HEADER", "basic dXNlcjpwdw==", 0},
    {"HTTP_X_UPSTREAM", "Token abc", 0},
    {"HTTP_X_AMZN_OIDC_DATA", "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", 0},
    {"HTTP_X_NOTE", "eyJ is how base64 JSON starts", 1},
    {"HTTP_X_NOTE", "Bearer", 1}, /* the scheme alone, no credential after it */
    {"HTTP_X_NOTE", "eyJa.b", 1},  /* one dot: not a JWT */
};

static void test_names(void)
{
    size_t i;
    for (i = 0; i < sizeof name_cases / sizeof name_cases[0]; i++) {
        const struct name_case *c = &name_cases[i];
        CHECK(kept(c->key, c->value) == c->kept, "%s = %s: kept %d", c->key, c->value, !c->kept);
    }
}

/* wi_headers_credential answers for a shown name (any case, '-' or '_') what the writer did. */
static void test_credential(void)
{
    static const char *const secret[] = {"x-auth-key", "X-Auth-Key", "X_AUTH_KEY", "Cf-Access-Jwt-Assertion",
                                         "x-webhook-passphrase", "cookie"};
    static const char *const plain[] = {"stripe-signature", "User-Agent", "x-github-delivery", "content-type"};
    char longest[WI_HEADERS_MAX_NAME + 1];
    size_t i;

    for (i = 0; i < sizeof secret / sizeof secret[0]; i++) {
        char *n = exact(secret[i], strlen(secret[i]));
        CHECK(wi_headers_credential(n, strlen(secret[i]), NULL, 0), "%s", secret[i]);
        free(n);
    }
    for (i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        char *n = exact(plain[i], strlen(plain[i]));
        CHECK(!wi_headers_credential(n, strlen(plain[i]), NULL, 0), "%s", plain[i]);
        CHECK(wi_headers_credential(n, strlen(plain[i]), "Bearer x", 8), "%s with a bearer value", plain[i]);
        free(n);
    }
    memset(longest, 'a', sizeof longest);
    CHECK(!wi_headers_credential(longest, WI_HEADERS_MAX_NAME, NULL, 0), "the longest name kept");
    CHECK(wi_headers_credential(longest, WI_HEADERS_MAX_NAME + 1, NULL, 0), "a longer one is never shown");
    memcpy(longest + WI_HEADERS_MAX_NAME - 3, "KEY", 3);
    CHECK(wi_headers_credential(longest, WI_HEADERS_MAX_NAME, NULL, 0), "a word at the end of the longest name");
}

/* Among many entries, every credential is left out and the rest kept in order. */
static void test_mixed(void)
{
    struct wi_headers h = {0};
    const char *json;
    size_t len, i;

    for (i = 0; i < sizeof name_cases / sizeof name_cases[0]; i++)
        wi_headers_add(&h, name_cases[i].key, strlen(name_cases[i].key), name_cases[i].value,
                       strlen(name_cases[i].value));
    json = wi_headers_json(&h, &len);
    CHECK(json != NULL, "some kept");
    CHECK(json && !strstr(json, "s3cr3t") && !strstr(json, "c2lnbmF0dXJl") && !strstr(json, "dXNlcjpwdw"),
          "no credential in %s", json ? json : "NULL");
    CHECK(json && strstr(json, "\"stripe-signature\":\"t=1,v1=ab\""), "the signature kept");
    wi_headers_free(&h);
}

int main(void)
{
    test_names();
    test_credential();
    test_mixed();
    printf("headers: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
