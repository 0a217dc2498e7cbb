/* fuzz_replay.c - libFuzzer replay-equivalence oracle for the schemes that sign decoded
 * fields or part of the body: deliveries of Paddle Classic, Braintree and Twilio (forms) and
 * Mailgun, Adyen and Didit V2 (JSON), signed here, are changed by the fuzz input's ops -
 * form pairs swapped, characters %-escaped, '+' and %20, escapes' case, empty items, pairs
 * added, newlines added to or taken from values; JSON spaced, \u-escaped, fields added,
 * batch items duplicated; a trailing newline; any byte changed or deleted - and verified.
 * Oracle (the replay spec's): refused, or the original's event id (and type where the
 * scheme signs it). WI_FUZZ_REPLAY="paddle_classic,adyen" checks only those schemes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include "../canon.h"
#include "../json.h"
#include "../sig.h"

#define BUF_MAX 8192
#define MAX_OPS 24

/* One signed delivery; the signature is in the body unless sig_slot >= 0. */
struct scheme {
    const char *provider;
    int form;               /* a form body (else JSON) */
    int sig_slot;           /* header slot of the signature, or -1 */
    int type_signed;        /* 0: the type is read from unsigned content (Mailgun's event-data) */
    const char *url;        /* {url}, or NULL */
    char body[BUF_MAX];
    size_t body_n;
    char sig[256];
    char id[256], type[128]; /* the original's event */
    struct wi_sig_verifier *v;
    int enabled;
    unsigned long tried, verified; /* mutated deliveries, and those that still verified */
};

static struct scheme schemes[] = {
    {.provider = "paddle_classic", .form = 1, .sig_slot = -1, .type_signed = 1},
    {.provider = "braintree", .form = 1, .sig_slot = -1, .type_signed = 1},
    {.provider = "twilio", .form = 1, .sig_slot = 0, .type_signed = 1, .url = "https://example.com/twilio/voice"},
    {.provider = "mailgun", .form = 0, .sig_slot = -1, .type_signed = 0},
    {.provider = "adyen", .form = 0, .sig_slot = -1, .type_signed = 1},
    {.provider = "didit", .form = 0, .sig_slot = 1, .type_signed = 1},
};
#define NSCHEMES (sizeof schemes / sizeof *schemes)
#define NOW 1700000000

__attribute__((noreturn)) static void die(const char *what)
{
    fprintf(stderr, "fuzz_replay setup: %s\n", what);
    abort();
}

static void hex(const unsigned char *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", p[i]);
}

static size_t b64(const unsigned char *p, size_t n, char *out) { return (size_t)EVP_EncodeBlock((unsigned char *)out, p, (int)n); }

/* form-encodes s (space as '+') onto out at *o */
static void urlenc(const char *s, size_t n, char *out, size_t *o)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("*-._", c))
            out[(*o)++] = (char)c;
        else if (c == ' ')
            out[(*o)++] = '+';
        else
            *o += (size_t)sprintf(out + *o, "%%%02X", c);
    }
    out[*o] = 0;
}

static void pair(char *out, size_t *o, const char *name, const char *value, size_t vn)
{
    if (*o) out[(*o)++] = '&';
    urlenc(name, strlen(name), out, o);
    out[(*o)++] = '=';
    urlenc(value, vn, out, o);
}

static void hmac(const EVP_MD *md, const void *key, size_t kn, const char *data, size_t n, unsigned char *mac, unsigned *ml)
{
    if (!HMAC(md, key, (int)kn, (const unsigned char *)data, n, mac, ml)) die("HMAC");
}

/* Paddle Classic: RSA-SHA1 over the sorted fields PHP-serialized, p_signature; a fresh key. */
static const char *sign_paddle_classic(struct scheme *s)
{
    static const char *const f[][2] = {{"alert_id", "1923482061"}, {"alert_name", "subscription_created"},
                                       {"passthrough", "a b&c=\xc3\xa9+\xc3\xbc/1"}, {"status", "active"}};
    static char pem[1024];
    char php[512];
    size_t pn = (size_t)sprintf(php, "a:4:{");
    for (int i = 0; i < 4; i++)
        pn += (size_t)sprintf(php + pn, "s:%zu:\"%s\";s:%zu:\"%s\";", strlen(f[i][0]), f[i][0], strlen(f[i][1]), f[i][1]);
    php[pn++] = '}';
    EVP_PKEY *key = EVP_RSA_gen(2048);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char sig[512];
    size_t sn = sizeof sig;
    char sig64[700];
    if (!key || !ctx || EVP_DigestSignInit(ctx, NULL, EVP_sha1(), NULL, key) != 1 ||
        EVP_DigestSign(ctx, sig, &sn, (const unsigned char *)php, pn) != 1)
        die("RSA signature");
    b64(sig, sn, sig64);
    for (int i = 3; i >= 0; i--) pair(s->body, &s->body_n, f[i][0], f[i][1], strlen(f[i][1])); /* not sorted, as sent */
    pair(s->body, &s->body_n, "p_signature", sig64, strlen(sig64));
    BIO *bio = BIO_new(BIO_s_mem());
    char *p;
    long n;
    if (!bio || PEM_write_bio_PUBKEY(bio, key) != 1 || (n = BIO_get_mem_data(bio, &p)) <= 0 || (size_t)n >= sizeof pem)
        die("PEM");
    memcpy(pem, p, (size_t)n);
    while (n > 0 && pem[n - 1] == '\n') n--;
    pem[n] = 0;
    BIO_free(bio);
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(key);
    return pem;
}

/* Braintree: bt_payload is base64 XML wrapped at 60 with a final newline; bt_signature
 * "public|hex HMAC-SHA1 under SHA-1(private)". */
static const char *sign_braintree(struct scheme *s)
{
    static const char xml[] = "<notification><timestamp type=\"datetime\">2023-11-14T22:13:20Z</timestamp><kind>check</kind>"
                              "<subject><check type=\"boolean\">true</check></subject></notification>";
    char raw[512], payload[600], sig[128];
    size_t rn = b64((const unsigned char *)xml, sizeof xml - 1, raw), pn = 0;
    for (size_t i = 0; i < rn; i += 60) {
        size_t k = rn - i < 60 ? rn - i : 60;
        memcpy(payload + pn, raw + i, k);
        pn += k;
        payload[pn++] = '\n';
    }
    unsigned char key[20], mac[20];
    unsigned kl, ml;
    if (EVP_Digest("private_key_1", 13, key, &kl, EVP_sha1(), NULL) != 1) die("SHA-1");
    hmac(EVP_sha1(), key, kl, payload, pn, mac, &ml);
    memcpy(sig, "pub_k1|", 7);
    hex(mac, ml, sig + 7);
    pair(s->body, &s->body_n, "bt_signature", sig, strlen(sig));
    pair(s->body, &s->body_n, "bt_payload", payload, pn);
    return "pub_k1:private_key_1";
}

/* Twilio: base64 HMAC-SHA1 of the URL + the pairs sorted by name, name + value. */
static const char *sign_twilio(struct scheme *s)
{
    static const char signed_params[] = "Bodyhello world!CallSidCA1From+15551234567NumMedia1";
    char data[256];
    unsigned char mac[20];
    unsigned ml;
    int dn = snprintf(data, sizeof data, "%s%s", s->url, signed_params);
    hmac(EVP_sha1(), "twilio_auth_token_1", 19, data, (size_t)dn, mac, &ml);
    b64(mac, ml, s->sig);
    s->body_n = (size_t)sprintf(s->body, "CallSid=CA1&From=%%2B15551234567&Body=hello+world%%21&NumMedia=1");
    return "twilio_auth_token_1";
}

/* Mailgun: hex HMAC-SHA256 of timestamp + token, inside the body. */
static const char *sign_mailgun(struct scheme *s)
{
    unsigned char mac[32];
    unsigned ml;
    char sig[65];
    hmac(EVP_sha256(), "mailgun_key_1", 13, "1700000000a8ce0edb2dd8301dee6c2405235584e45a", 44, mac, &ml);
    hex(mac, ml, sig);
    s->body_n = (size_t)sprintf(s->body,
                                "{\"signature\":{\"token\":\"a8ce0edb2dd8301dee6c2405235584e45a\",\"timestamp\":\"1700000000\","
                                "\"signature\":\"%s\"},\"event-data\":{\"event\":\"delivered\",\"id\":\"CPgfbmQ\","
                                "\"recipient\":\"a/b@example.com\"}}",
                                sig);
    return "mailgun_key_1";
}

/* Adyen: one item whose eight fields are signed, base64 HMAC-SHA256 under the hex key. */
static const char *sign_adyen(struct scheme *s)
{
    static const char key_hex[] = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
    static const char item_signed[] = "psp1::TestMerchant:ordre-\xc3\xa9/1:1130:EUR:AUTHORISATION:true";
    unsigned char key[32], mac[32];
    unsigned ml;
    char sig[64];
    for (int i = 0; i < 32; i++) sscanf(key_hex + 2 * i, "%2hhx", &key[i]);
    hmac(EVP_sha256(), key, 32, item_signed, sizeof item_signed - 1, mac, &ml);
    b64(mac, ml, sig);
    s->body_n = (size_t)sprintf(s->body,
                                "{\"live\":\"false\",\"notificationItems\":[{\"NotificationRequestItem\":{\"additionalData\":"
                                "{\"hmacSignature\":\"%s\",\"authCode\":\"1234\"},\"amount\":{\"currency\":\"EUR\",\"value\":1130},"
                                "\"eventCode\":\"AUTHORISATION\",\"eventDate\":\"2023-11-14T22:13:20+01:00\","
                                "\"merchantAccountCode\":\"TestMerchant\",\"merchantReference\":\"ordre-\xc3\xa9/1\","
                                "\"pspReference\":\"psp1\",\"reason\":\"unsigned\",\"success\":\"true\"}}]}",
                                sig);
    return key_hex;
}

/* Didit V2: hex HMAC-SHA256 of the canonical JSON, in X-Signature-V2. */
static const char *sign_didit(struct scheme *s)
{
    char *canon;
    size_t cn;
    struct wi_err err;
    unsigned char mac[32];
    unsigned ml;
    s->body_n = (size_t)sprintf(s->body, "{\"webhook_type\":\"status.updated\",\"event_id\":\"evt_d1\",\"session_id\":\"s/1\","
                                         "\"status\":\"Approved\",\"timestamp\":1700000000,"
                                         "\"decision\":{\"score\":95.5,\"n\":100.0,\"name\":\"J\xc3\xa9r\xc3\xb4me\"}}");
    if (wi_canon_didit(s->body, s->body_n, BUF_MAX, NULL, &canon, &cn, &err)) die("canonical JSON");
    hmac(EVP_sha256(), "didit_secret_1", 14, canon, cn, mac, &ml);
    hex(mac, ml, s->sig);
    wi_canon_free(canon);
    return "didit_secret_1";
}

static const char *(*const signers[])(struct scheme *) = {sign_paddle_classic, sign_braintree, sign_twilio,
                                                          sign_mailgun, sign_adyen, sign_didit};

/* The event's id and type as the gem stores them (unescaped; the body's SHA-256 without an id). */
static void event_text(const struct wi_sig_event *ev, char *id, char *type)
{
    if (!ev->id.p) strcpy(id, ev->body_sha256);
    else if (ev->id.n >= 256) strcpy(id, "(long)");
    else if (ev->id_escaped) id[wi_json_unescape(ev->id.p, ev->id.n, id)] = 0;
    else memcpy(id, ev->id.p, ev->id.n), id[ev->id.n] = 0;
    if (!ev->type.p || ev->type.n >= 128) strcpy(type, ev->type.p ? "(long)" : "");
    else if (ev->type_escaped) type[wi_json_unescape(ev->type.p, ev->type.n, type)] = 0;
    else memcpy(type, ev->type.p, ev->type.n), type[ev->type.n] = 0;
}

static int verify(const struct scheme *s, const char *body, size_t n, char *id, char *type)
{
    struct wi_sig_request req = {.body = {body, n}, .now = NOW, .method = {"POST", 4}};
    struct wi_sig_event ev;
    struct wi_err err;
    if (s->sig_slot >= 0) req.hdr[s->sig_slot] = (struct wi_slice){s->sig, strlen(s->sig)};
    if (s->url) req.url = (struct wi_slice){s->url, strlen(s->url)};
    if (wi_sig_verify(s->v, &req, &ev, &err)) return -1;
    event_text(&ev, id, type);
    return 0;
}

/* At exit: how many changed deliveries of each scheme still verified (the oracle's reach). */
static void report(void)
{
    for (size_t i = 0; i < NSCHEMES; i++)
        if (schemes[i].tried)
            fprintf(stderr, "fuzz_replay: %s: %lu of %lu changed deliveries verified, each as the original event\n",
                    schemes[i].provider, schemes[i].verified, schemes[i].tried);
}

static void setup(void)
{
    const char *only = getenv("WI_FUZZ_REPLAY");
    for (size_t i = 0; i < NSCHEMES; i++) {
        struct scheme *s = &schemes[i];
        struct wi_sig_config cfg = {.provider = s->provider, .tolerance = 300, .max_body = BUF_MAX};
        struct wi_err err;
        const char *secret = signers[i](s);
        if (!(s->v = wi_sig_verifier_new(&cfg, &err)) || wi_sig_verifier_add_secret(s->v, secret, strlen(secret), &err))
            die(s->provider);
        if (verify(s, s->body, s->body_n, s->id, s->type)) die("a delivery signed here is refused");
        s->enabled = !only || strstr(only, s->provider) != NULL;
    }
    atexit(report);
}

/* ---- the ops: each edits buf[0..*n) in place, within BUF_MAX; a no-op when it does not apply */

static void insert(char *buf, size_t *n, size_t at, const char *s, size_t k)
{
    if (*n + k >= BUF_MAX || at > *n) return;
    memmove(buf + at + k, buf + at, *n - at);
    memcpy(buf + at, s, k);
    *n += k;
}

static void erase(char *buf, size_t *n, size_t at, size_t k)
{
    if (at + k > *n) return;
    memmove(buf + at, buf + at + k, *n - at - k);
    *n -= k;
}

/* The position of the k-th (mod count) byte for which pick says yes, or -1. */
static long nth(const char *buf, size_t n, unsigned k, int (*pick)(const char *, size_t, size_t))
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += (size_t)pick(buf, n, i);
    if (!count) return -1;
    k %= (unsigned)count;
    for (size_t i = 0; i < n; i++)
        if (pick(buf, n, i) && k-- == 0) return (long)i;
    return -1;
}

static int is_amp(const char *b, size_t n, size_t i) { (void)n; return b[i] == '&'; }
static int is_plus(const char *b, size_t n, size_t i) { (void)n; return b[i] == '+'; }
static int is_pct(const char *b, size_t n, size_t i) { return b[i] == '%' && i + 2 < n; }
static int is_pct20(const char *b, size_t n, size_t i) { return i + 2 < n && !memcmp(b + i, "%20", 3); }
static int is_plain(const char *b, size_t n, size_t i)
{
    (void)n;
    return b[i] != '&' && b[i] != '=' && b[i] != '%' && (i < 2 || b[i - 1] != '%') && (i < 3 || b[i - 2] != '%');
}
static int is_struct(const char *b, size_t n, size_t i) { (void)n; return strchr("{[,:", b[i]) && b[i]; }
static int is_open(const char *b, size_t n, size_t i) { (void)n; return b[i] == '{'; }

/* 1 when position i is inside a JSON string (a naive scan from the start: enough for these bodies). */
static int in_string(const char *b, size_t i)
{
    int in = 0;
    for (size_t j = 0; j < i; j++) {
        if (in && b[j] == '\\') j++;
        else if (b[j] == '"') in = !in;
    }
    return in;
}
static int is_string_char(const char *b, size_t n, size_t i)
{
    (void)n;
    return b[i] != '"' && b[i] != '\\' && (unsigned char)b[i] < 0x80 && (i == 0 || b[i - 1] != '\\') && in_string(b, i);
}

/* Duplicates the first element of the first array of objects ("[{...}" -> "[{...},{...}"). */
static void dup_item(char *buf, size_t *n)
{
    char *open = memmem(buf, *n, "[{", 2);
    if (!open) return;
    size_t start = (size_t)(open - buf) + 1, i = start;
    int depth = 0, in = 0;
    for (; i < *n; i++) {
        if (in) { if (buf[i] == '\\') i++; else if (buf[i] == '"') in = 0; continue; }
        if (buf[i] == '"') in = 1;
        else if (buf[i] == '{' || buf[i] == '[') depth++;
        else if ((buf[i] == '}' || buf[i] == ']') && --depth == 0) break;
    }
    if (i >= *n || *n + (i + 1 - start) + 1 >= BUF_MAX) return;
    char item[BUF_MAX];
    size_t k = i + 1 - start;
    item[0] = ',';
    memcpy(item + 1, buf + start, k);
    insert(buf, n, i + 1, item, k + 1);
}

/* Swaps form item k (mod the number of items) with the one after it, in place. */
static void swap_items(char *buf, size_t n, unsigned k)
{
    size_t starts[BUF_MAX / 2 + 1], items = 0;
    char t[BUF_MAX];
    starts[items++] = 0;
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '&') starts[items++] = i + 1;
    if (items < 2) return;
    k %= (unsigned)(items - 1);
    size_t a = starts[k], b = starts[k + 1], e = k + 2 < items ? starts[k + 2] - 1 : n; /* [a, b-1) and [b, e) */
    size_t al = b - 1 - a, bl = e - b;
    memcpy(t, buf + b, bl);
    t[bl] = '&';
    memcpy(t + bl + 1, buf + a, al);
    memcpy(buf + a, t, al + bl + 1);
}

static void apply(const struct scheme *s, char *buf, size_t *n, uint8_t op, uint8_t a, uint8_t b)
{
    char tmp[16];
    long at;
    if (s->form) {
        switch (op % 9) {
        case 0: /* item a%count and the next one swapped */
            swap_items(buf, *n, a);
            return;
        case 1: /* a character %-escaped, in either case */
            if ((at = nth(buf, *n, a, is_plain)) < 0) return;
            snprintf(tmp, sizeof tmp, b & 1 ? "%%%02x" : "%%%02X", (unsigned char)buf[at]);
            erase(buf, n, (size_t)at, 1);
            insert(buf, n, (size_t)at, tmp, 3);
            return;
        case 2: /* '+' as %20 */
            if ((at = nth(buf, *n, a, is_plus)) < 0) return;
            erase(buf, n, (size_t)at, 1);
            insert(buf, n, (size_t)at, "%20", 3);
            return;
        case 3: /* %20 as '+' */
            if ((at = nth(buf, *n, a, is_pct20)) < 0) return;
            erase(buf, n, (size_t)at, 3);
            insert(buf, n, (size_t)at, "+", 1);
            return;
        case 4: /* an escape's hex in the other case */
            if ((at = nth(buf, *n, a, is_pct)) < 0) return;
            for (int j = 1; j <= 2; j++) buf[at + j] ^= (buf[at + j] >= 'A' && buf[at + j] <= 'F') || (buf[at + j] >= 'a' && buf[at + j] <= 'f') ? 0x20 : 0;
            return;
        case 5: /* an empty item */
            at = nth(buf, *n, a, is_amp);
            insert(buf, n, at < 0 || (b & 1) ? *n : (size_t)at, "&", 1);
            return;
        case 6: /* a pair added */
            snprintf(tmp, sizeof tmp, "&x%u=%u", a % 4, b);
            insert(buf, n, *n, tmp, strlen(tmp));
            return;
        case 7: /* a newline added to the value before item a's end */
            at = nth(buf, *n, a, is_amp);
            insert(buf, n, at < 0 ? *n : (size_t)at, "%0A", 3);
            return;
        default: /* a trailing newline taken from a value */
            for (size_t i = 0; i + 3 <= *n; i++)
                if ((i + 3 == *n || buf[i + 3] == '&') && (!memcmp(buf + i, "%0A", 3) || !memcmp(buf + i, "%0a", 3))) {
                    if (a-- == 0) { erase(buf, n, i, 3); return; }
                }
            return;
        }
    }
    switch (op % 5) {
    case 0: /* whitespace after a structural character */
        if ((at = nth(buf, *n, a, is_struct)) < 0 || in_string(buf, (size_t)at)) return;
        insert(buf, n, (size_t)at + 1, &" \n\t\r"[b % 4], 1);
        return;
    case 1: /* a string's character as \u00XX, or '/' as "\/" */
        if ((at = nth(buf, *n, a, is_string_char)) < 0) return;
        if (buf[at] == '/' && (b & 1)) snprintf(tmp, sizeof tmp, "\\/");
        else snprintf(tmp, sizeof tmp, b & 2 ? "\\u%04x" : "\\u%04X", (unsigned char)buf[at]);
        erase(buf, n, (size_t)at, 1);
        insert(buf, n, (size_t)at, tmp, strlen(tmp));
        return;
    case 2: /* a field added to an object */
        if ((at = nth(buf, *n, a, is_open)) < 0 || in_string(buf, (size_t)at)) return;
        snprintf(tmp, sizeof tmp, "\"x%u\":%u,", b % 8, b);
        insert(buf, n, (size_t)at + 1, tmp, strlen(tmp));
        return;
    case 3: /* a batch's first item duplicated */
        dup_item(buf, n);
        return;
    default: /* a trailing newline */
        insert(buf, n, *n, "\n", 1);
        return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[BUF_MAX];
    char id[256], type[128];
    if (!schemes[0].v) setup();
    if (size < 1) return 0;
    struct scheme *s = &schemes[data[0] % NSCHEMES];
    if (!s->enabled) return 0;
    size_t n = s->body_n;
    memcpy(buf, s->body, n);
    for (size_t i = 1; i + 3 <= size && i / 3 < MAX_OPS; i += 3) {
        if (data[i] == 0xff) { /* any byte changed, or deleted */
            size_t at = ((size_t)data[i + 1] * 256 + data[i + 2]) % (n ? n : 1);
            if (n && data[i + 2] & 1) erase(buf, &n, at, 1);
            else if (n) buf[at] ^= (char)(data[i + 1] | 1);
            continue;
        }
        apply(s, buf, &n, data[i], data[i + 1], data[i + 2]);
    }
    s->tried++;
    if (verify(s, buf, n, id, type)) return 0; /* refused */
    s->verified++;
    if (strcmp(id, s->id) || (s->type_signed && strcmp(type, s->type))) {
        fprintf(stderr, "fuzz_replay: %s replay verified as another event: id %s type %s (the original: %s %s)\nbody: %.*s\n",
                s->provider, id, type, s->id, s->type, (int)n, buf);
        abort();
    }
    return 0;
}
