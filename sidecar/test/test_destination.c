/* test_destination.c - the --destination spec parser (every truncation point, options,
 * credentials only from the file or the environment), the list, Retry-After, and the
 * answer-text sanitizer, the masked URLs --print-config shows. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/destination.h"
#include "delivery/http_client.h"
#include "delivery/outbox.h"
#include "minitest.h"

static int parses(const char *spec, int secrets)
{
    struct wi_dest d;
    struct wi_err e;
    int rc = wi_dest_parse(spec, strlen(spec), secrets, &d, &e);
    wi_dest_clear(&d);
    return rc == 0;
}

int main(void)
{
    struct wi_dest d;
    struct wi_dest_list l = {NULL, 0};
    struct wi_err e;
    long long ms;
    const char *full = "receipts=https://api.example.com/v1/receipts?x=1 concurrency=8 timeout=10s "
                       "connect_timeout=250ms sign=standard_webhooks allow_http=false";
    size_t i;
    char text[32];

    unsetenv("WEBHOOK_INBOX_DEST_RECEIPTS_TOKEN");
    unsetenv("WEBHOOK_INBOX_DEST_RECEIPTS_SECRET");

    CHECK(wi_dest_parse(full, strlen(full), 0, &d, &e) == 0);
    CHECK(!strcmp(d.name, "receipts") && !strcmp(d.url, "https://api.example.com/v1/receipts?x=1"));
    CHECK(d.concurrency == 8 && d.timeout == 10.0 && d.connect_timeout > 0.249 && d.connect_timeout < 0.251);
    CHECK(d.sign == WI_DEST_SIGN_STANDARD_WEBHOOKS && !d.allow_http && !d.token);
    wi_dest_clear(&d);
    /* Every truncation point: either a valid destination or an error, never a crash. */
    for (i = 0; i <= strlen(full); i++) {
        int rc = wi_dest_parse(full, i, 0, &d, &e);
        CHECK(rc == 0 || (rc == -1 && d.url == NULL && e.msg[0]));
        wi_dest_clear(&d);
    }

    CHECK(parses("a=https://x", 0));
    /* the Ruby handler runs' outbox name (db/009) is no destination's */
    CHECK(!parses("ruby=https://x", 0));
    CHECK(parses("ruby_app=https://x", 0) && parses("rubyx=https://x", 0));
    CHECK(wi_dest_parse("ruby=https://x", 14, 0, &d, &e) < 0 && strstr(e.msg, "reserved"));
    wi_dest_clear(&d);
    CHECK(parses("app=http://127.0.0.1:3000/effects", 0));
    CHECK(parses("app=http://localhost/effects", 0));
    CHECK(parses("app=http://[::1]:8080/e", 0));
    CHECK(!parses("app=http://10.0.0.5/effects", 0));           /* plain http to a remote host */
    CHECK(!parses("app=http://127.0.0.1.evil.example/", 0));    /* not loopback */
    CHECK(!parses("app=http://localhost@evil.example/", 0));    /* userinfo */
    CHECK(parses("app=http://10.0.0.5/effects allow_http=true", 0));
    CHECK(!parses("Receipts=https://x", 0));                    /* name: lower case */
    CHECK(!parses("1x=https://x", 0));
    CHECK(!parses("=https://x", 0));
    CHECK(!parses("receipts", 0));
    CHECK(!parses("r=ftp://x", 0));
    CHECK(!parses("r=https://user:pw@x/", 0));
    CHECK(!parses("r=https://x concurrency=0", 0));
    CHECK(!parses("r=https://x concurrency=1025", 0));
    CHECK(!parses("r=https://x timeout=2h", 0));
    CHECK(!parses("r=https://x sign=hmac", 0));
    CHECK(!parses("r=https://x bogus=1", 0));
    CHECK(!parses("r=https://x novalue", 0));
    CHECK(!parses("r=https://x token=abc", 0));                 /* a flag: ps would show it */
    CHECK(parses("r=https://x token=abc", 1));                  /* the config file */
    {
        const char *s = "r=https://x token=s3cr3t";
        CHECK(wi_dest_parse(s, strlen(s), 0, &d, &e) < 0 && !strstr(e.msg, "s3cr3t"));
    }

    /* The list: a later source replaces a destination of the same name. */
    CHECK(wi_dest_parse("a=https://one", 13, 0, &d, &e) == 0 && wi_dest_list_put(&l, &d, &e) == 0);
    CHECK(wi_dest_parse("b=https://two", 13, 0, &d, &e) == 0 && wi_dest_list_put(&l, &d, &e) == 0);
    CHECK(wi_dest_parse("a=https://three", 15, 0, &d, &e) == 0 && wi_dest_list_put(&l, &d, &e) == 0);
    CHECK(l.n == 2 && !strcmp(wi_dest_list_find(&l, "a")->url, "https://three"));
    /* Credentials from the environment; a signer needs a whsec_ secret. */
    setenv("WEBHOOK_INBOX_DEST_A_TOKEN", "tok_1", 1);
    CHECK(wi_dest_list_resolve(&l, &e) == 0 && !strcmp(wi_dest_list_find(&l, "a")->token, "tok_1"));
    CHECK(wi_dest_list_find(&l, "b")->token == NULL);
    wi_dest_list_free(&l);
    CHECK(wi_dest_parse("a=https://x sign=standard_webhooks", 34, 0, &d, &e) == 0 && wi_dest_list_put(&l, &d, &e) == 0);
    CHECK(wi_dest_list_resolve(&l, &e) < 0 && strstr(e.msg, "needs a secret"));
    setenv("WEBHOOK_INBOX_DEST_A_SECRET", "not-whsec", 1);
    CHECK(wi_dest_list_resolve(&l, &e) < 0 && strstr(e.msg, "whsec_"));
    setenv("WEBHOOK_INBOX_DEST_A_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1);
    CHECK(wi_dest_list_resolve(&l, &e) == 0);
    wi_dest_list_free(&l);
    unsetenv("WEBHOOK_INBOX_DEST_A_TOKEN");
    unsetenv("WEBHOOK_INBOX_DEST_A_SECRET");

    /* Retry-After: delta-seconds and IMF-fixdate; anything else is ignored. */
    CHECK(wi_http_parse_retry_after("120", 3, 0, &ms) == 0 && ms == 120000);
    CHECK(wi_http_parse_retry_after(" 0 ", 3, 0, &ms) == 0 && ms == 0);
    CHECK(wi_http_parse_retry_after("99999999999999999999", 20, 0, &ms) == 0 && ms == 30LL * 86400 * 1000);
    CHECK(wi_http_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 29, 784111767, &ms) == 0 && ms == 10000);
    CHECK(wi_http_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 29, 784111787, &ms) == 0 && ms == 0);
    CHECK(wi_http_parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", 29, 0, &ms) == 0 && ms == 0);
    CHECK(wi_http_parse_retry_after("Sun, 06 Nov 1994 08:49:37 UTC", 29, 0, &ms) < 0);
    CHECK(wi_http_parse_retry_after("Sun, 06 Foo 1994 08:49:37 GMT", 29, 0, &ms) < 0);
    CHECK(wi_http_parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", 30, 0, &ms) < 0);
    CHECK(wi_http_parse_retry_after("-5", 2, 0, &ms) < 0);
    CHECK(wi_http_parse_retry_after("1.5", 3, 0, &ms) < 0);
    CHECK(wi_http_parse_retry_after("", 0, 0, &ms) < 0);
    for (i = 0; i < 29; i++) /* truncations of a date are refused */
        CHECK(wi_http_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", i, 0, &ms) < 0);

    /* Answer text: NUL and invalid UTF-8 become '?', valid UTF-8 stays. */
    memcpy(text, "a\0b\xff\xc3\xa9\xe2\x82\xac\xed\xa0\x80\xc0\xaf", 14);
    wi_outbox_text_sanitize(text, 14);
    CHECK(memcmp(text, "a?b?\xc3\xa9\xe2\x82\xac???" "??", 14) == 0);
    memcpy(text, "\xf0\x9f\x98\x80\xf0\x9f\x98", 7); /* an emoji, then a truncated one */
    wi_outbox_text_sanitize(text, 7);
    CHECK(memcmp(text, "\xf0\x9f\x98\x80???", 7) == 0);

    /* Printed URLs (--print-config): query values and fragment masked, names and path kept. */
    {
        static const char *const cases[][2] = {
            {"https://api.example/hook?api_key=k3y&v=2", "https://api.example/hook?api_key=*****&v=*****"},
            {"https://api.example/x?token#frag", "https://api.example/x?*****#*****"},
            {"https://api.example:8443/a/b", "https://api.example:8443/a/b"},
            {"https://api.example?a=1&&b", "https://api.example?a=*****&&*****"},
            {"http://127.0.0.1:9/x?", "http://127.0.0.1:9/x?"},
            {"https://u:pw@api.example/x", "https://*****@api.example/x"},
            {"https://api.example/x#a?b=1", "https://api.example/x#*****"},
        };
        for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char *got = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&got, &len);
            wi_dest_print_masked_url(cases[i][0], m);
            fclose(m);
            CHECK(strcmp(got, cases[i][1]) == 0);
            if (strcmp(got, cases[i][1]) != 0)
                fprintf(stderr, "  %s -> %s\n", cases[i][0], got);
            free(got);
        }
    }

    DONE("test_destination");
}
