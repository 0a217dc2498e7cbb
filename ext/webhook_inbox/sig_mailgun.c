/* sig_mailgun.c - Mailgun: the signature, its timestamp and its token travel in the body's
 * "signature" object; the HMAC covers timestamp + token only, so the token is the event id. */
#include "sig_mailgun.h"

#include <string.h>
#include "json.h"
#include "sig_engine.h"

int wi_sig_mailgun(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                   struct wi_sig_event *ev, struct wi_err *err)
{
    struct wi_json_field sig, tsf, tok;
    struct wi_sig_group g;
    size_t key = 0;
    int64_t t;
    int r;

    memset(&g, 0, sizeof g);
    if (wi_sig_field_at(req->body, v->p.sig_field, &sig, err)) return -1;
    if (sig.kind == WI_JSON_ABSENT) return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE, "body has no %s", v->p.sig_field);
    if (sig.kind != WI_JSON_STRING || sig.escaped || !wi_sig_offer(v, &g, sig.value, WI_SIG_HEX, 0))
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "%s is not a hex HMAC-SHA256", v->p.sig_field);
    /* before the key, only the two signed fields: the event-data, however shaped, is read
     * after the match, so its shape costs nothing unauthenticated */
    if (wi_sig_field_at(req->body, v->p.id_fields[0], &tok, err) || wi_sig_field_at(req->body, v->p.ts_field, &tsf, err))
        return -1;
    if (tok.kind != WI_JSON_STRING || !tok.value.n || tok.escaped)
        return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "body has no plain signature.token string");
    if (tsf.kind == WI_JSON_ABSENT)
        return wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP, "body has no signature.timestamp");
    if (tsf.escaped || (tsf.kind != WI_JSON_STRING && tsf.kind != WI_JSON_NUMBER) || wi_sig_body_ts(&tsf, &t, err))
        return wi_err_set(err, WI_SIG_E_MALFORMED_TIMESTAMP, "signature.timestamp is not unix seconds");
    g.parts[0] = tsf.value;
    g.parts[1] = tok.value;
    g.nparts = 2;
    if ((r = wi_sig_match(v, &g, &key, err)) < 0) return -1;
    if (!r) return wi_sig_mismatch(err);
    /* the entry's id_fields, type_fields and ts_field (signature.token, event-data.event,
     * signature.timestamp), refusing a top-level key that occurs twice */
    if (wi_sig_body_fields(v, req->body, ev, &tsf, err)) return -1;
    if (ev->id.p != tok.value.p || ev->id.n != tok.value.n)
        return wi_err_set(err, WI_SIG_E_DUPLICATE_KEY, "body has the signature object more than once");
    if (wi_sig_check_time(v, req, t, err)) return -1;
    ev->has_timestamp = 1;
    ev->timestamp = t;
    return 0;
}
