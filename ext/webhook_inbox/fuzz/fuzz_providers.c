/* fuzz_providers.c - libFuzzer entry point for every provider entry through the generic
 * engine (signature layouts, timestamp and id headers, body field paths such as
 * "meta.event_name", challenges) and for secret parsing in each key form (hex and base64
 * public keys, DER P-256, P-256 JWKs, RSA PEM, PayPal's certificates, user:password, whsec_/whpk_); JWT entries (Vonage, Plaid) get
 * their token in the first header. The first byte picks the entry; the second says
 * whether the rest is a secret to add or a request: body, then header values split on 0xff,
 * then the URL ({url}: Twilio's sorted form and bodySHA256, Square, HubSpot's unescaping).
 * Braintree's body is also tried as a bt_challenge (wi_sig_braintree_challenge); a batch's
 * items (Adyen) are checked in bounds and released. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../provider.h"
#include "../sig.h"
#include "../sig_braintree.h"
#include "../test/paypal_fixture.h"

#define MAX_ENTRIES 64

static struct wi_sig_verifier *verifiers[MAX_ENTRIES];
static size_t nentries;

/* One verifier per entry, with a secret of the entry's key form (a fixed valid key). */
static void setup(void)
{
    static const char *const ed25519_hex = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    static const char *const p256_der =
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEVs/o5+uQbTjL3chynL4wXgUg2R9q9UU8I5mEovUf86QZ7kOBIjJwqnzD1omageEHWwHdBO6B+dFabmdT9POxg==";
    static const char *const p256_jwk = /* RFC 7515 A.3's key */
        "{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"k1\",\"x\":\"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU\","
        "\"y\":\"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0\"}";
    static const char *const rsa_pem = /* a 2048-bit RSA public key */
        "-----BEGIN PUBLIC KEY-----\n"
        "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAhPMKYQVwEMfBnE3Y4EE8\n"
        "n8nrvEJK4qxmtxVxlGEfagHM7uYBcyu71Ar7GHMwOjqWsX91YJUQE13ucSrlBmDp\n"
        "wjUAgRbqOjxiB88qG83yMaNjy7P0eK35YdzeNjDppRz2h6fHi/OktSGZqGhDQRO+\n"
        "YHoOiFSVbSiIMAdSTzaD0VL1w3E9+mQUPHJ/jzaG7ynLraBK5XDZDjKWsvWBsgAA\n"
        "hAMVsAP/ieYL2m+HjI3pRLEDSn8pmgwlITQ7r7WN/FmLPILGgPYxmChZ1ah5DCFK\n"
        "+9pOcW+cdvdcRp+ozOh7KMdpDxbhA7H47Mp96NSwjOcurR5Ack7UiysWRSQB8F/l\n"
        "+QIDAQAB\n"
        "-----END PUBLIC KEY-----";
    nentries = wi_provider_count() < MAX_ENTRIES ? wi_provider_count() : MAX_ENTRIES;
    for (size_t i = 0; i < nentries; i++) {
        const struct wi_provider *p = wi_provider_at(i);
        struct wi_sig_config cfg = {.provider = p->name, .tolerance = 300, .max_body = 1 << 16, .allow_simple = 1,
                                    .alg = WI_HMAC_SHA256, .signature_header = "x-sig", .timestamp_header = "x-ts",
                                    .template = "{timestamp}.{body}"};
        struct wi_err err;
        const char *secret = p->versions[0].key == WI_KEY_HEX       ? ed25519_hex
                             : p->versions[0].key == WI_KEY_B64_DER ? p256_der
                             : p->versions[0].key == WI_KEY_JWK     ? p256_jwk
                             : p->versions[0].key == WI_KEY_CREDENTIALS ? "user:password"
                             : p->versions[0].key == WI_KEY_PEM     ? rsa_pem
                             : p->versions[0].key == WI_KEY_PAIR    ? "pub_k1:private_key_1"
                             : p->versions[0].key == WI_KEY_CERT    ? PAYPAL_SECRET
                                                                    : "whsec_c2VjcmV0";
        verifiers[i] = wi_sig_verifier_new(&cfg, &err);
        if (!verifiers[i] || wi_sig_verifier_add_secret(verifiers[i], secret, strlen(secret), &err)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wi_err err;
    if (!nentries) setup();
    if (size < 2) return 0;
    const struct wi_provider *p = wi_provider_at(data[0] % nentries);
    const char *s = (const char *)data + 2, *end = (const char *)data + size;
    if (data[1] & 1) { /* a fuzzed secret in the entry's key form: refused with a message, or kept */
        struct wi_sig_config cfg = {.provider = p->name, .tolerance = 300, .max_body = 1 << 16,
                                    .alg = WI_HMAC_SHA256, .signature_header = "x-sig"};
        struct wi_sig_verifier *v = wi_sig_verifier_new(&cfg, &err);
        if (!v) abort();
        if (wi_sig_verifier_add_secret(v, s, (size_t)(end - s), &err) && (err.code != WI_ERR_ARG || !err.msg[0])) abort();
        wi_sig_verifier_free(v);
        return 0;
    }
    struct wi_sig_request req = {.now = 1700000000, .method = {"POST", 4}};
    struct wi_sig_event ev;
    for (int slot = -1; slot <= WI_SIG_MAX_HEADERS && s <= end; slot++) {
        const char *q = memchr(s, 0xff, (size_t)(end - s));
        if (!q) q = end;
        struct wi_slice sl = {s, (size_t)(q - s)};
        if (slot < 0) req.body = sl;
        else if (slot == WI_SIG_MAX_HEADERS) req.url = sl;
        else req.hdr[slot] = sl;
        s = q + 1;
    }
    if (wi_sig_verify(verifiers[data[0] % nentries], &req, &ev, &err) == 0) {
        /* slices the event holds point into the input (a decoded type or composed id into the event) */
        const struct wi_slice *sl[] = {&ev.id, &ev.type, &ev.challenge_value};
        for (int i = 0; i < 3; i++)
            if (sl[i]->p && (sl[i]->p < (const char *)data || sl[i]->p + sl[i]->n > end) &&
                !(i == 1 && sl[i]->p == ev.type_copy && sl[i]->n < sizeof ev.type_copy) &&
                !(i == 0 && sl[i]->p == ev.id_copy && sl[i]->n < sizeof ev.id_copy) &&
                !(i < 2 && ev.nitems && sl[i]->p >= ev.items[0].id.p &&
                  sl[i]->p + sl[i]->n <= ev.items[0].id.p + ev.items[0].id.n))
                abort();
        for (size_t i = 0; i < ev.nitems; i++) { /* a batch's items: text in the input, its document around it */
            const struct wi_sig_item *it = &ev.items[i];
            if (it->text.p < (const char *)data || it->text.p + it->text.n > end || !it->id.n ||
                it->doc.n < it->text.n + 2 || memcmp(it->doc.p + it->doc.n - it->text.n - 2, it->text.p, it->text.n))
                abort();
        }
        wi_sig_event_release(&ev);
    } else if (!err.msg[0]) {
        abort(); /* every refusal says why */
    }
    if (!strcmp(p->name, "braintree")) { /* the body as a bt_challenge: an answer or a refusal, in bounds */
        char answer[WI_BT_ANSWER_MAX];
        long an = wi_sig_braintree_challenge(verifiers[data[0] % nentries], req.body, answer, sizeof answer, &err);
        if (an < 0 ? !err.msg[0] : (size_t)an != strlen(answer) || req.body.n < WI_BT_CHALLENGE_MIN) abort();
    }
    return 0;
}
