/* sig_jwt.c - deliveries signed by a JWT in a header (Vonage HS256, Plaid ES256): the token
 * is parsed strictly (jwt.c), its signature checked under the configured keys, then its
 * body-hash claim against the body and its iat against the tolerance. */
#include "sig_jwt.h"

#include <openssl/crypto.h>
#include <string.h>
#include <strings.h>
#include "json.h"
#include "sig_engine.h"
#include "sig_header.h"

/* 1 when a key signs t (*key: its index), 0 when none, -1 on a crypto failure. An ES256
 * token naming a kid is tried only under keys with that kid (or none). */
static int token_signed(const struct wi_sig_verifier *v, const struct wi_jwt *t, size_t *key, struct wi_err *err)
{
    unsigned char mac[WI_HMAC_MAX], der[WI_PKEY_SIG_MAX];
    long dn = 0;
    int found = 0, es256 = v->p.versions[0].alg == WI_ALG_ECDSA_P256;

    if (t->sig_n != (es256 ? 64u : 32u)) return 0;
    if (es256 && (dn = wi_pkey_p256_raw_to_der(t->sig, der, err)) < 0) return -1;
    for (size_t k = 0; k < v->nkeys && !found; k++) {
        const struct wi_sig_key *sk = &v->keys[k];
        if (sk->hmac) {
            int n = wi_hmac_compute(sk->hmac, &t->signing_input, 1, mac, err);
            if (n < 0) return -1;
            found = n == 32 && wi_ct_equal(mac, t->sig, 32);
        } else {
            if (t->kid.p && sk->kid[0] && (strlen(sk->kid) != t->kid.n || memcmp(sk->kid, t->kid.p, t->kid.n))) continue;
            int r = wi_pkey_verify(sk->pk, &t->signing_input, 1, der, (size_t)dn, err);
            if (r < 0) return -1;
            found = r;
        }
        if (found) *key = k;
    }
    OPENSSL_cleanse(mac, sizeof mac);
    return found;
}

/* An integer NumericDate claim. Returns 1 and sets *out, 0 when absent, -1 otherwise. */
static int numeric_date(const struct wi_json_field *f, int64_t *out)
{
    if (f->kind == WI_JSON_ABSENT) return 0;
    if (f->kind != WI_JSON_NUMBER || wi_parse_unix_ts(f->value, out)) return -1;
    return 1;
}

int wi_sig_jwt(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
               struct wi_sig_event *ev, struct wi_err *err)
{
    const struct wi_provider *p = &v->p;
    const char *alg = p->versions[0].alg == WI_ALG_ECDSA_P256 ? "ES256" : "HS256";
    struct wi_slice tok = wi_sig_present(req->hdr[0]);
    struct wi_json_field c[3] = {{.name = p->jwt_claim}, {.name = "iat"}, {.name = "exp"}}, tsf;
    unsigned char want[32], got[32];
    struct wi_jwt t;
    size_t key = 0, pl = p->prefix ? strlen(p->prefix) : 0;
    int64_t iat = 0, exp = 0;
    int r, has_iat, has_exp;

    if (!tok.p) return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "%s header is missing", p->headers[0]);
    if (pl) { /* an auth scheme ("Bearer ") is case-insensitive */
        if (tok.n <= pl || strncasecmp(tok.p, p->prefix, pl))
            return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "%s header lacks the %s prefix", p->headers[0], p->prefix);
        tok.p += pl, tok.n -= pl;
    }
    if (wi_jwt_parse(tok.p, tok.n, alg, &t, err)) {
        if (err) err->code = WI_SIG_E_MALFORMED_SIGNATURE;
        return -1;
    }
    if ((r = token_signed(v, &t, &key, err)) < 0) return -1;
    if (!r) return wi_sig_mismatch(err);
    /* the token is genuine; now it must be about this body, and recent */
    wi_json_scan(t.claims, t.claims_n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, c, 3, NULL, NULL);
    if (wi_sig_unique(c, 3, err)) return -1;
    if (c[0].kind != WI_JSON_STRING || c[0].escaped || wi_hex_decode_lower(c[0].value.p, c[0].value.n, want, 32) != 32)
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "token has no hex SHA-256 %s claim", p->jwt_claim);
    if (wi_sha256(req->body.p, req->body.n, got, err)) return -1;
    if (!wi_ct_equal(want, got, 32))
        return wi_err_set(err, WI_SIG_E_SIGNATURE_MISMATCH, "the token's %s is not the body's SHA-256", p->jwt_claim);
    if ((has_iat = numeric_date(&c[1], &iat)) < 0 || (has_exp = numeric_date(&c[2], &exp)) < 0)
        return wi_err_set(err, WI_SIG_E_MALFORMED_TIMESTAMP, "token iat or exp is not an integer of unix seconds");
    if (v->cfg.tolerance >= 0) {
        if (!has_iat) return wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP, "token has no iat claim");
        if (wi_sig_check_time(v, req, iat, err)) return -1;
        if (has_exp && req->now > exp)
            return wi_err_set(err, WI_SIG_E_TIMESTAMP_OUT_OF_TOLERANCE, "token expired %lld s ago",
                              (long long)(req->now - exp));
    }
    ev->has_timestamp = has_iat;
    ev->timestamp = iat;
    wi_hex_encode(got, 32, ev->body_sha256);
    return wi_sig_body_fields(v, req->body, ev, &tsf, err);
}
