/* sig_paddle.c - Paddle Classic: p_signature signs the other form fields, sorted by name and
 * serialized the way PHP's serialize() writes a string array: a:N:{s:len:"name";s:len:"value";...}. */
#include "sig_paddle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "form.h"
#include "sig_engine.h"

#define SIG_FIELD "p_signature"
#define RSA_SIG_MAX 1024 /* RSA-8192 */

/* A name PHP keeps as a string key and orders bytewise: it starts with a letter or '_' (a
 * numeric name would become an integer key and sort by value). */
static int plain_name(const struct wi_form_pair *f)
{
    unsigned char c = f->nlen ? (unsigned char)f->name[0] : 0;
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* The decoded value of the sorted field named name, or NULL. */
static const struct wi_form_pair *field(const struct wi_form_pair *f, size_t nf, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    for (size_t i = 0; name && i < nf; i++)
        if (f[i].nlen == n && !memcmp(f[i].name, name, n)) return &f[i];
    return NULL;
}

/* Copies the decoded value of field name (when present, non-empty and shorter than cap)
 * into copy and points *out at it: an id or type is what the signature covers, the decoded
 * value, however the form escaped it. Returns 1 when set. */
static int decoded_value(const struct wi_form_pair *f, size_t nf, const char *name, char *copy, size_t cap,
                         struct wi_slice *out)
{
    const struct wi_form_pair *x = field(f, nf, name);
    if (!x || !x->vlen || x->vlen >= cap) return 0;
    memcpy(copy, x->value, x->vlen);
    copy[x->vlen] = '\0';
    *out = (struct wi_slice){copy, x->vlen};
    return 1;
}

int wi_sig_paddle_classic(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                          struct wi_sig_event *ev, struct wi_err *err)
{
    struct wi_form_pair *f = NULL, *sig = NULL;
    unsigned char raw[RSA_SIG_MAX];
    char *dec = NULL, *ser = NULL;
    size_t nf = 0, o = 0, cap;
    long sl;
    int rc = -1, found = 0;

    if (wi_form_sorted_pairs(req->body.p, req->body.n, &f, &nf, &dec, WI_SIG_E_MALFORMED_PAYLOAD, err)) return -1;
    for (size_t i = 0; i < nf; i++) {
        if (i && f[i].nlen == f[i - 1].nlen && !memcmp(f[i].name, f[i - 1].name, f[i].nlen)) {
            wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "form field %.*s occurs twice", (int)(f[i].nlen < 40 ? f[i].nlen : 40),
                       f[i].name);
            goto out;
        }
        if (f[i].nlen == strlen(SIG_FIELD) && !memcmp(f[i].name, SIG_FIELD, f[i].nlen)) sig = &f[i];
        else if (!plain_name(&f[i])) {
            wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "a form field name does not start with a letter or _");
            goto out;
        }
    }
    if (!sig) {
        wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "form has no " SIG_FIELD " field");
        goto out;
    }
    if ((sl = wi_b64_decode(sig->value, sig->vlen, raw, sizeof raw)) < 256) {
        wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, SIG_FIELD " is not a base64 RSA signature");
        goto out;
    }
    cap = req->body.n + 32 * nf + 32;
    if (!(ser = malloc(cap))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto out;
    }
    o += (size_t)snprintf(ser, cap, "a:%zu:{", nf - 1);
    for (size_t i = 0; i < nf; i++) {
        if (&f[i] == sig) continue;
        o += (size_t)snprintf(ser + o, cap - o, "s:%zu:\"", f[i].nlen);
        memcpy(ser + o, f[i].name, f[i].nlen), o += f[i].nlen;
        o += (size_t)snprintf(ser + o, cap - o, "\";s:%zu:\"", f[i].vlen);
        memcpy(ser + o, f[i].value, f[i].vlen), o += f[i].vlen;
        ser[o++] = '"', ser[o++] = ';';
    }
    ser[o++] = '}';
    struct wi_slice part = {ser, o};
    for (size_t k = 0; k < v->nkeys && !found; k++) {
        int r = v->keys[k].pk ? wi_pkey_verify(v->keys[k].pk, &part, 1, raw, (size_t)sl, err) : 0;
        if (r < 0) goto out;
        found = r;
    }
    if (!found) {
        wi_sig_mismatch(err);
        goto out;
    }
    /* identity from the signed fields only: the decoded alert_id, else the SHA-256 of the
     * serialized fields that were signed (never of the raw form: its order and escapes are
     * not signed) */
    const struct wi_form_pair *aid = field(f, nf, v->p.id_fields[0]);
    if (aid && aid->vlen >= sizeof ev->id_copy) {
        wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "%s is longer than %zu bytes", v->p.id_fields[0], sizeof ev->id_copy - 1);
        goto out;
    }
    if (wi_sig_signed_sha256(part, ev, err)) goto out;
    decoded_value(f, nf, v->p.id_fields[0], ev->id_copy, sizeof ev->id_copy, &ev->id);
    decoded_value(f, nf, v->p.type_fields[0], ev->type_copy, sizeof ev->type_copy, &ev->type);
    rc = 0;
out:
    free(ser);
    free(dec);
    free(f);
    return rc;
}
