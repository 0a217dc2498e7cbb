/* sig_paypal.c - PayPal: PAYPAL-TRANSMISSION-SIG is the RSA-SHA256 signature, by the
 * certificate PAYPAL-CERT-URL names, of "transmission_id|transmission_time|webhook_id|crc32"
 * (the body's CRC-32 in decimal). Certificates are configured per secret; a secret of a bare
 * webhook id holds none (the gem fetches the certificate: lib/webhook_inbox/paypal_certificates.rb). */
#include "sig_paypal.h"

#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include "sig_engine.h"

#define SIG_MAX 1024 /* RSA-8192 */
#define ALGO "SHA256withRSA"
#define ID_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
#define PEM_BEGIN "-----BEGIN CERTIFICATE-----"

enum { H_ID, H_TIME, H_SIG, H_CERT_URL, H_ALGO };

/* PayPal's certificate endpoints (REST API hosts, live and sandbox); nothing else is trusted
 * as a PAYPAL-CERT-URL. */
static const char *const cert_prefixes[] = {
    "https://api.paypal.com/v1/notifications/certs/", "https://api-m.paypal.com/v1/notifications/certs/",
    "https://api.sandbox.paypal.com/v1/notifications/certs/", "https://api-m.sandbox.paypal.com/v1/notifications/certs/"};

/* Length of the id at s[0..n): 1..max bytes of ID_CHARS up to stop (or the end); 0 when none. */
static size_t id_len(const char *s, size_t n, char stop, size_t max)
{
    size_t i = 0;
    while (i < n && s[i] != stop && s[i] && strchr(ID_CHARS, s[i])) i++;
    return i > 0 && i <= max && (i == n || s[i] == stop) ? i : 0;
}

int wi_sig_paypal_key(const char *s, size_t n, struct wi_sig_key *k, struct wi_err *err)
{
    size_t wl = id_len(s, n, ':', WI_JWT_KID_MAX), cl;
    if (wl && wl == n) { /* a bare webhook id: no certificate, k->pk stays NULL */
        memcpy(k->account, s, wl);
        k->account[wl] = '\0';
        return 0;
    }
    cl = wl && wl < n ? id_len(s + wl + 1, n - wl - 1, ':', WI_JWT_KID_MAX) : 0;
    const char *pem = s + wl + 1 + cl + 1;
    if (!wl || !cl || wl + cl + 2 > n || (size_t)(s + n - pem) < strlen(PEM_BEGIN) || memcmp(pem, PEM_BEGIN, strlen(PEM_BEGIN)))
        return wi_err_set(err, WI_ERR_ARG,
                          "not WEBHOOK_ID:CERT_ID:<PEM certificate> or WEBHOOK_ID (ids of letters, digits, '-', '_', '.')");
    if (!(k->pk = wi_pkey_from_cert(pem, (size_t)(s + n - pem), &k->not_before, &k->not_after, err))) return -1;
    memcpy(k->account, s, wl);
    k->account[wl] = '\0';
    memcpy(k->kid, s + wl + 1, cl);
    k->kid[cl] = '\0';
    return 0;
}

uint32_t wi_sig_paypal_crc32(const char *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    return (uint32_t)crc32_z(c, (const Bytef *)p, n);
}

/* n decimal digits at s as a number, or -1. */
static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400, doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

int wi_sig_paypal_time(struct wi_slice s, int64_t *out)
{
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const char *p = s.p;
    size_t i = 19;
    if (!p || s.n < 20 || p[4] != '-' || p[7] != '-' || (p[10] != 'T' && p[10] != 't') || p[13] != ':' || p[16] != ':')
        return -1;
    int y = digits(p, 4), mo = digits(p + 5, 2), d = digits(p + 8, 2), h = digits(p + 11, 2), mi = digits(p + 14, 2),
        se = digits(p + 17, 2), off = 0;
    int leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] - (mo == 2 && !leap) || h < 0 || h > 23 || mi < 0 ||
        mi > 59 || se < 0 || se > 60)
        return -1;
    if (p[i] == '.') { /* a fraction of a second: ignored */
        size_t f = ++i;
        while (i < s.n && p[i] >= '0' && p[i] <= '9') i++;
        if (i == f || i - f > 9) return -1;
    }
    if (i + 1 == s.n && (p[i] == 'Z' || p[i] == 'z')) {
        off = 0;
    } else if (i + 6 == s.n && (p[i] == '+' || p[i] == '-') && p[i + 3] == ':') {
        int oh = digits(p + i + 1, 2), om = digits(p + i + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59) return -1;
        off = (p[i] == '-' ? -1 : 1) * (oh * 3600 + om * 60);
    } else {
        return -1;
    }
    *out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off;
    return 0;
}

int wi_sig_paypal_cert_id(struct wi_slice url, struct wi_slice *id, struct wi_err *err)
{
    for (size_t i = 0; i < sizeof cert_prefixes / sizeof *cert_prefixes; i++) {
        size_t pl = strlen(cert_prefixes[i]);
        if (url.n <= pl || memcmp(url.p, cert_prefixes[i], pl)) continue;
        size_t n = id_len(url.p + pl, url.n - pl, '\0', WI_JWT_KID_MAX);
        if (n != url.n - pl || url.p[pl] == '.') break; /* no "..": the id is one path segment */
        *id = (struct wi_slice){url.p + pl, n};
        return 0;
    }
    return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE,
                      "paypal-cert-url is not https://api.paypal.com/v1/notifications/certs/<id> (or "
                      "api.sandbox.paypal.com, api-m.*): refused");
}

/* 1 when a configured certificate named cid, valid at now, signs the content for its webhook
 * id; 0 when none (err says why: WI_SIG_E_UNKNOWN_KEY, outside its validity, or a mismatch); -1 on a
 * crypto failure. */
static int match(const struct wi_sig_verifier *v, struct wi_slice cid, int64_t now, struct wi_slice id,
                 struct wi_slice time, uint32_t crc, const unsigned char *sig, size_t sl, struct wi_err *err)
{
    char tail[16];
    size_t named = 0, valid = 0;
    int tl = snprintf(tail, sizeof tail, "|%lu", (unsigned long)crc);
    for (size_t k = 0; k < v->nkeys; k++) {
        const struct wi_sig_key *sk = &v->keys[k];
        if (!sk->pk || strlen(sk->kid) != cid.n || memcmp(sk->kid, cid.p, cid.n)) continue;
        named++;
        if (now < sk->not_before || now > sk->not_after) continue;
        valid++;
        struct wi_slice parts[6] = {id, {"|", 1}, time, {"|", 1}, {sk->account, strlen(sk->account)}, {tail, (size_t)tl}};
        int r = wi_pkey_verify(sk->pk, parts, 6, sig, sl, err);
        if (r) return r;
    }
    if (!named)
        wi_err_set(err, WI_SIG_E_UNKNOWN_KEY,
                   "no configured certificate %.*s: download it from paypal-cert-url and add it as a secret "
                   "WEBHOOK_ID:%.*s:<PEM>",
                   (int)cid.n, cid.p, (int)cid.n, cid.p);
    else if (!valid)
        wi_err_set(err, WI_SIG_E_SIGNATURE_MISMATCH, "certificate %.*s is not valid now (expired or not yet valid)",
                   (int)cid.n, cid.p);
    else
        wi_sig_mismatch(err);
    return 0;
}

int wi_sig_paypal(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                  struct wi_sig_event *ev, struct wi_err *err)
{
    struct wi_slice h[5], cid = {NULL, 0};
    struct wi_json_field tsf;
    unsigned char sig[SIG_MAX];
    int64_t t;
    long sl;
    int r;

    for (int i = 0; i < 5; i++) h[i] = wi_sig_present(req->hdr[i]);
    if (!h[H_SIG].p) return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "paypal-transmission-sig header is missing");
    if (!h[H_ID].p) return wi_err_set(err, WI_SIG_E_MISSING_ID, "paypal-transmission-id header is missing");
    if (!h[H_TIME].p) return wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP, "paypal-transmission-time header is missing");
    if (wi_sig_paypal_time(h[H_TIME], &t))
        return wi_err_set(err, WI_SIG_E_MALFORMED_TIMESTAMP, "paypal-transmission-time is not an RFC 3339 time");
    /* unsigned, and only RSA-SHA256 is ever tried: absent is taken as SHA256withRSA (a kept
     * delivery has none: request_headers never keeps a name holding "auth") */
    if (h[H_ALGO].p && (h[H_ALGO].n != strlen(ALGO) || memcmp(h[H_ALGO].p, ALGO, h[H_ALGO].n)))
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "paypal-auth-algo is not " ALGO);
    if (!h[H_CERT_URL].p) return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "paypal-cert-url header is missing");
    if (wi_sig_paypal_cert_id(h[H_CERT_URL], &cid, err)) return -1;
    if ((sl = wi_b64_decode(h[H_SIG].p, h[H_SIG].n, sig, sizeof sig)) < 256)
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "paypal-transmission-sig is not a base64 RSA signature");
    /* Everything that needs no certificate first (the time too): a delivery refused here never
     * reaches the certificate lookup, nor a fetch of an unknown one (PaypalCertificates). */
    if (wi_sig_check_time(v, req, t, err)) return -1;
    /* the id and time are signed as sent (header values, trimmed) */
    r = match(v, cid, req->now, h[H_ID], h[H_TIME], wi_sig_paypal_crc32(req->body.p, req->body.n), sig, (size_t)sl, err);
    if (r <= 0) return -1;
    ev->has_timestamp = 1;
    ev->timestamp = t;
    return wi_sig_body_fields(v, req->body, ev, &tsf, err);
}
