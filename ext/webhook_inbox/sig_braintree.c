/* sig_braintree.c - Braintree: a form whose bt_signature holds "public_key|hex" pairs, each
 * the HMAC-SHA1 of bt_payload (base64 XML) under SHA-1(private key) of that public key. */
#include "sig_braintree.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include "form.h"
#include "sig_engine.h"

#define SIG_NAME "bt_signature"
#define PAYLOAD_NAME "bt_payload"

/* The encoded value of the one pair named name into *out. Returns 0 (out->p NULL when
 * absent), or -1 (WI_SIG_E_MALFORMED_PAYLOAD) when the name occurs twice: Rack keeps the
 * last, wi_form_find the first. */
static int only_field(struct wi_slice body, const char *name, struct wi_slice *out, struct wi_err *err)
{
    struct wi_form_iter it;
    struct wi_slice k, val;
    size_t want = strlen(name);
    char buf[48]; /* room for a name of 16 bytes each written as %XX */
    *out = (struct wi_slice){NULL, 0};
    wi_form_init(&it, body.p, body.n);
    while (wi_form_next(&it, &k, &val)) {
        if (k.n < want || k.n > 3 * want || k.n > sizeof buf || wi_form_decode(k, buf) != (long)want || memcmp(buf, name, want)) continue;
        if (out->p) return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "form field %s occurs twice", name);
        *out = val;
    }
    return 0;
}

/* 1 when p[0..n) holds only what Braintree's SDKs allow in a payload (base64 and '\n'). */
static int payload_chars(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/' ||
              c == '=' || c == '\n'))
            return 0;
    }
    return n > 0;
}

/* A secret's HMACs of the payload as is and with '\n' added, computed once a call: each pair
 * naming the secret is compared with them, so a bt_signature of many pairs costs no more
 * HMACs than there are secrets. */
struct bt_macs {
    unsigned char mac[2][20];
    int have;
};

/* 1 when a secret whose public key is pub signs payload (as is or with '\n' added: *nparts
 * says which, 1 or 2) as lowercase hex, the SDKs' comparison. */
static int pair_matches(const struct wi_sig_verifier *v, struct wi_slice pub, struct wi_slice hex,
                        struct wi_slice payload, struct bt_macs *macs, size_t *nparts, struct wi_err *err)
{
    unsigned char want[20];
    struct wi_slice parts[2] = {payload, {"\n", 1}};
    int found = 0;
    if (wi_hex_decode_lower(hex.p, hex.n, want, sizeof want) != (long)sizeof want) return 0;
    for (size_t k = 0; k < v->nkeys && !found; k++) {
        const struct wi_sig_key *sk = &v->keys[k];
        if (!sk->hmac || strlen(sk->kid) != pub.n || memcmp(sk->kid, pub.p, pub.n)) continue;
        for (size_t np = 1; !macs[k].have && np <= 2; np++) {
            unsigned char mac[WI_HMAC_MAX];
            int n = wi_hmac_compute(sk->hmac, parts, np, mac, err);
            memcpy(macs[k].mac[np - 1], mac, 20);
            OPENSSL_cleanse(mac, sizeof mac);
            if (n != 20) return -1;
        }
        macs[k].have = 1;
        for (size_t np = 1; np <= 2 && !found; np++)
            if ((found = wi_ct_equal(macs[k].mac[np - 1], want, sizeof want))) *nparts = np;
    }
    return found;
}

/* The XML the base64 payload holds (its '\n's skipped), malloc'd and NUL-terminated into
 * *xml (caller frees), or -1 (WI_SIG_E_MALFORMED_PAYLOAD) when it is not a Braintree
 * notification: the SDKs parse <notification>, and requiring it keeps the bt_challenge
 * answer (an HMAC under the same key over 20-32 hex digits, which are base64 characters
 * too) from ever verifying as a delivery: hex digits never decode to a '<'. */
static int notification_xml(struct wi_slice payload, char **xml, struct wi_err *err)
{
    size_t n = 0, cap = payload.n / 4 * 3 + 3;
    char *b64 = malloc(payload.n + 1), *x = malloc(cap + 1);
    const char *p;
    long xl;
    *xml = NULL;
    if (!b64 || !x) {
        free(b64), free(x);
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < payload.n; i++)
        if (payload.p[i] != '\n') b64[n++] = payload.p[i];
    xl = wi_b64_decode(b64, n, (unsigned char *)x, cap);
    free(b64);
    if (xl > 0) {
        x[xl] = '\0';
        p = x + strspn(x, " \t\r\n");
        if (!strncmp(p, "<?xml", 5) && (p = strstr(p, "?>"))) p += 2 + strspn(p + 2, " \t\r\n");
        if (p && (size_t)xl == strlen(x) && !strncmp(p, "<notification", 13) && (p[13] == '>' || p[13] == ' ')) {
            *xml = x;
            return 0;
        }
    }
    free(x);
    return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, PAYLOAD_NAME " is not a base64 <notification> XML document");
}

/* The notification's kind (<kind>..</kind> before <subject>, letters, digits and '_') from
 * its XML into ev->type_copy; no type when there is none. */
static void read_kind(const char *xml, struct wi_sig_event *ev)
{
    const char *k = strstr(xml, "<kind>"), *subject = strstr(xml, "<subject");
    if (!k || (subject && subject < k)) return;
    k += 6;
    size_t len = strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    if (!len || len >= sizeof ev->type_copy || strncmp(k + len, "</kind>", 7)) return;
    memcpy(ev->type_copy, k, len);
    ev->type_copy[len] = '\0';
    ev->type = (struct wi_slice){ev->type_copy, len};
}

int wi_sig_braintree(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                     struct wi_sig_event *ev, struct wi_err *err)
{
    struct wi_slice sig_enc, pay_enc, sig, payload, pub, hex;
    char *buf = NULL, *xml = NULL;
    struct bt_macs *macs = NULL;
    long sl, pl;
    size_t nparts = 1;
    int rc = -1, found = 0, offered = 0;

    if (only_field(req->body, SIG_NAME, &sig_enc, err) || only_field(req->body, PAYLOAD_NAME, &pay_enc, err)) return -1;
    if (!sig_enc.p || !sig_enc.n) return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "form has no " SIG_NAME " field");
    if (!(buf = malloc(sig_enc.n + pay_enc.n + 2))) /* room for a newline after the payload */ return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    if ((sl = wi_form_decode(sig_enc, buf)) < 0 || (pl = wi_form_decode(pay_enc, buf + sl)) < 0) {
        wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "a form field has a malformed %%-escape");
        goto out;
    }
    sig = (struct wi_slice){buf, (size_t)sl};
    payload = (struct wi_slice){buf + sl, (size_t)pl};
    if (!pay_enc.p || !payload_chars(payload.p, payload.n)) {
        wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "form has no " PAYLOAD_NAME " of base64 characters");
        goto out;
    }
    if (!(macs = calloc(v->nkeys, sizeof *macs))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (const char *p = sig.p, *end = sig.p + sig.n; p && p < end && !found;) {
        const char *amp = memchr(p, '&', (size_t)(end - p)), *stop = amp ? amp : end;
        const char *bar = memchr(p, '|', (size_t)(stop - p));
        if (bar && stop - bar - 1 == 40) {
            pub = (struct wi_slice){p, (size_t)(bar - p)};
            hex = (struct wi_slice){bar + 1, 40};
            offered++;
            if ((found = pair_matches(v, pub, hex, payload, macs, &nparts, err)) < 0) goto out;
        }
        p = amp ? amp + 1 : NULL;
    }
    if (!found) {
        if (offered) wi_sig_mismatch(err);
        else wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, SIG_NAME " has no public_key|hex SHA-1 pair");
        goto out;
    }
    if (notification_xml(payload, &xml, err)) goto out; /* never a signed bt_challenge */
    /* the id is the SHA-256 of what was signed: the payload with the newline the matching
     * signature covers, whether or not the form carried it */
    if (nparts == 2) buf[sl + pl] = '\n', payload.n++;
    if (wi_sig_signed_sha256(payload, ev, err)) goto out;
    read_kind(xml, ev);
    rc = 0;
out:
    if (macs) OPENSSL_cleanse(macs, v->nkeys * sizeof *macs);
    free(macs);
    free(xml);
    free(buf);
    return rc;
}

long wi_sig_braintree_challenge(const struct wi_sig_verifier *v, struct wi_slice challenge, char *out, size_t cap,
                                struct wi_err *err)
{
    unsigned char mac[WI_HMAC_MAX];
    const struct wi_sig_key *sk = NULL;
    for (size_t k = 0; k < v->nkeys && !sk; k++)
        if (v->keys[k].hmac) sk = &v->keys[k];
    if (v->p.challenge != WI_CHALLENGE_BRAINTREE_GET) return wi_err_set(err, WI_ERR_ARG, "bt_challenge is Braintree's");
    size_t hex = 0;
    while (hex < challenge.n && ((challenge.p[hex] >= '0' && challenge.p[hex] <= '9') ||
                                 (challenge.p[hex] >= 'a' && challenge.p[hex] <= 'f')))
        hex++;
    if (challenge.n < WI_BT_CHALLENGE_MIN || challenge.n > WI_BT_CHALLENGE_MAX || hex < challenge.n) /* [a-f0-9]{20,32} */
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "bt_challenge is not 20 to 32 lowercase hex digits");
    if (!sk) return wi_err_set(err, WI_SIG_E_NO_SECRET, "no secret configured");
    size_t pl = strlen(sk->kid);
    if (cap < pl + 1 + 40 + 1) return wi_err_set(err, WI_ERR_ARG, "challenge answer buffer too small");
    if (wi_hmac_compute(sk->hmac, &challenge, 1, mac, err) != 20) return -1;
    memcpy(out, sk->kid, pl);
    out[pl] = '|';
    wi_hex_encode(mac, 20, out + pl + 1);
    out[pl + 41] = '\0';
    OPENSSL_cleanse(mac, sizeof mac);
    return (long)(pl + 41);
}
