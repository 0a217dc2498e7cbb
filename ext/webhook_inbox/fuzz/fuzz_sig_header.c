/* fuzz_sig_header.c - libFuzzer entry point for the signature header tokenizers and
 * codecs, and for wi_sig_verify with fuzzed header values (Stripe, Paddle, Standard
 * Webhooks, Slack, Didit). The first byte picks the scheme; the rest is split on 0xff. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../hmac.h"
#include "../sig.h"
#include "../sig_header.h"

static struct wi_sig_verifier *verifiers[7];

static void setup(void)
{
    static const char *const schemes[7] = {"stripe", "paddle", "standard_webhooks", "slack", "didit", "github",
                                           "shopify"};
    for (int i = 0; i < 7; i++) {
        struct wi_sig_config cfg = {.provider = schemes[i], .tolerance = 300, .max_body = 1 << 16, .allow_simple = 1};
        struct wi_err err;
        verifiers[i] = wi_sig_verifier_new(&cfg, &err);
        if (!verifiers[i] || wi_sig_verifier_add_secret(verifiers[i], "whsec_c2VjcmV0", 14, &err)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char seps[][2] = {{',', '='}, {';', '='}, {' ', ','}};
    unsigned char out[64];
    struct wi_kv_iter it;
    struct wi_slice k, v;
    int64_t ts;

    if (!verifiers[0]) setup();
    if (size == 0) return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    for (int i = 0; i < 3; i++) {
        wi_kv_init(&it, s, n, seps[i][0], seps[i][1]);
        while (wi_kv_next(&it, &k, &v)) {
            if (k.p < s || k.p + k.n > s + n) abort();
            if (v.p && (v.p < s || v.p + v.n > s + n)) abort();
            (void)wi_parse_unix_ts(v, &ts);
            (void)wi_hex_decode(v.p, v.n, out, sizeof out);
            (void)wi_b64_decode(v.p, v.n, out, sizeof out);
        }
    }
    /* body, then up to WI_SIG_MAX_HEADERS header values, separated by 0xff */
    struct wi_sig_request req = {.now = 1700000000};
    struct wi_sig_event ev;
    struct wi_err err;
    const char *p = s, *end = s + n;
    for (int slot = -1; slot < WI_SIG_MAX_HEADERS && p <= end; slot++) {
        const char *q = memchr(p, 0xff, (size_t)(end - p));
        if (!q) q = end;
        struct wi_slice sl = {p, (size_t)(q - p)};
        if (slot < 0) req.body = sl;
        else req.hdr[slot] = sl;
        p = q + 1;
    }
    (void)wi_sig_verify(verifiers[data[0] % 7], &req, &ev, &err);
    return 0;
}
