/* sig_didit.c - Didit's scheme, too irregular for a table entry: X-Signature over the raw
 * body, X-Signature-V2 over the canonical JSON (canon.c), opt-in X-Signature-Simple over four
 * body fields; the time is the body's signed timestamp field. */
#include "sig_didit.h"

#include <stdlib.h>
#include <string.h>
#include "canon.h"
#include "json.h"
#include "sig_engine.h"

/* 1 when a and b (fields scanned from two JSON texts) hold the same value: strings
 * compared after unescaping, numbers by their text; 0 when not; -1 out of memory. */
static int same_field(const struct wi_json_field *a, const struct wi_json_field *b)
{
    char *da, *db;
    size_t na, nb;
    int same;
    if (a->kind != b->kind) return 0;
    if (a->kind == WI_JSON_NUMBER)
        return a->value.n == b->value.n && !memcmp(a->value.p, b->value.p, a->value.n);
    if (a->kind != WI_JSON_STRING) return 1;
    if (!a->escaped && !b->escaped)
        return a->value.n == b->value.n && !memcmp(a->value.p, b->value.p, a->value.n);
    if (!(da = malloc(a->value.n + b->value.n + 1))) return -1;
    db = da + a->value.n;
    na = wi_json_unescape(a->value.p, a->value.n, da);
    nb = wi_json_unescape(b->value.p, b->value.n, db);
    same = na == nb && !memcmp(da, db, na);
    free(da);
    return same;
}

/* V2 signs the canonical form, where the last of duplicate keys wins and escaped keys are
 * decoded; f[] comes from the raw body (first unescaped key wins). Returns 0 when the raw
 * body's event_id, webhook_type and timestamp are the ones the canonical form holds, else
 * -1 with *err filled: a replayed body must not bring its own id or a fresh timestamp. */
static int v2_fields_signed(const char *canon, size_t cn, const struct wi_json_field *f,
                            struct wi_err *err)
{
    struct wi_json_field c[3] = {{.name = f[0].name}, {.name = f[1].name}, {.name = f[2].name}};
    wi_json_scan(canon, cn, WI_JSON_STOP_EARLY, c, 3, NULL, NULL);
    for (int i = 0; i < 3; i++) {
        int s = same_field(&f[i], &c[i]);
        if (s < 0) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        if (!s)
            return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD,
                              "body has a duplicate or escaped %s key: not the value X-Signature-V2 signs",
                              f[i].name);
    }
    return 0;
}

/* Didit: X-Signature (raw body), X-Signature-V2 (canonical JSON), X-Signature-Simple (opt-in).
 * The raw signature is tried first and is cheapest; a raw mismatch does not stop V2, which
 * exists for bodies that something re-serialized on the way (providers.md). V2's pre-key
 * cost is bounded by wi_canon_didit's output limit instead. Without a string event_id the
 * fallback id is the SHA-256 of the content the matching signature covers (the canonical
 * form for V2), so a replay that only re-spaces the body keeps its id.
 * Simple signs timestamp, session_id, status and webhook_type only: its event id is always
 * the SHA-256 of that four-field string (never the unsigned event_id), so a body re-sent
 * with another event_id or decision is a duplicate, and ev->simple tells the caller that
 * nothing else in the body is verified.
 * The time is the body's timestamp field, which every Didit signature covers; X-Timestamp
 * is covered by none and never read: without the field the event is refused as
 * WI_SIG_E_MISSING_TIMESTAMP (unless the time check is off), as a captured delivery would
 * otherwise verify again whenever it is sent with a fresh header. */
int wi_sig_didit(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                 struct wi_sig_event *ev, struct wi_err *err)
{
    static const char *const names[] = {"event_id", "webhook_type", "timestamp", "session_id", "status"};
    struct wi_json_field f[5];
    struct wi_sig_group g;
    struct wi_slice raw = wi_sig_present(req->hdr[0]), v2 = wi_sig_present(req->hdr[1]),
                    simple = wi_sig_present(req->hdr[2]);
    int usable = 0, compared = 0, r = 0, bad_json = 0, rc = -1, simple_matched = 0;
    char *canon = NULL, *buf = NULL;
    struct wi_err cerr = {0};

    for (int i = 0; i < 5; i++) f[i].name = names[i];
    if (!raw.p && !v2.p && !(simple.p && v->cfg.allow_simple))
        return wi_err_set(err, WI_SIG_E_MISSING_SIGNATURE,
                          simple.p ? "only X-Signature-Simple was sent and allow_simple is off"
                                   : "no X-Signature or X-Signature-V2 header");
    wi_json_scan(req->body.p, req->body.n, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, f, 5, NULL, NULL);

    if (raw.p) {
        memset(&g, 0, sizeof g);
        if (wi_sig_offer(v, &g, raw, WI_SIG_HEX, 0)) {
            usable = compared = 1;
            g.parts[0] = req->body;
            g.nparts = 1;
            if ((r = wi_sig_match(v, &g, NULL, err)) != 0) goto matched;
        }
    }
    if (v2.p) {
        memset(&g, 0, sizeof g);
        if (wi_sig_offer(v, &g, v2, WI_SIG_HEX, 0)) {
            size_t cn;
            usable = 1;
            if (wi_canon_didit(req->body.p, req->body.n, WI_CANON_MAX_OUT(req->body.n), req->cancel,
                               &canon, &cn, &cerr)) {
                if (cerr.code == WI_ERR_NOMEM) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
                if (cerr.code == WI_CANON_E_INTERRUPTED) {
                    *err = cerr;
                    return -1;
                }
                bad_json = 1;
            } else {
                compared = 1;
                g.parts[0] = (struct wi_slice){canon, cn};
                g.nparts = 1;
                r = wi_sig_match(v, &g, NULL, err);
                if (r > 0 && (wi_sig_unique(f, 5, err) || v2_fields_signed(canon, cn, f, err))) r = -1;
                if (r) goto matched;
                wi_canon_free(canon);
                canon = NULL;
            }
        }
    }
    if (simple.p && v->cfg.allow_simple) {
        memset(&g, 0, sizeof g);
        if (wi_sig_offer(v, &g, simple, WI_SIG_HEX, 0)) {
            /* "<timestamp>:<session_id>:<status>:<webhook_type>", missing fields empty */
            static const int order[] = {2, 3, 4, 1};
            size_t total = 0;
            usable = compared = 1;
            for (int i = 0; i < 4; i++) total += f[order[i]].value.n;
            if (!(buf = malloc(total + 4))) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            char *o = buf;
            for (int i = 0; i < 4; i++) {
                const struct wi_json_field *x = &f[order[i]];
                size_t n = 0;
                if (x->kind == WI_JSON_STRING && x->escaped) n = wi_json_unescape(x->value.p, x->value.n, o);
                else if (x->kind == WI_JSON_STRING || x->kind == WI_JSON_NUMBER) memcpy(o, x->value.p, n = x->value.n);
                o += n;
                if (i < 3) *o++ = ':';
            }
            g.parts[0] = (struct wi_slice){buf, (size_t)(o - buf)};
            g.nparts = 1;
            simple_matched = 1;
            if ((r = wi_sig_match(v, &g, NULL, err)) != 0) goto matched;
            simple_matched = 0;
            free(buf);
            buf = NULL;
        }
    }
    if (!usable) return wi_err_set(err, WI_SIG_E_MALFORMED_SIGNATURE, "no Didit signature is well-formed hex");
    if (bad_json && cerr.code == WI_CANON_E_TOO_LARGE) {
        *err = cerr;
        err->code = WI_SIG_E_PAYLOAD_TOO_LARGE;
        return -1;
    }
    if (!compared && bad_json)
        return wi_err_set(err, WI_SIG_E_MALFORMED_PAYLOAD, "X-Signature-V2 needs a JSON body; the body is not valid JSON");
    return wi_sig_mismatch(err);
matched:
    if (r < 0 || wi_sig_unique(f, 5, err)) goto out;
    if (simple_matched) {
        static const int signed_order[] = {3, 4, 2, 1}; /* session_id, status, timestamp, webhook_type */
        ev->simple = 1;
        for (int i = 0; i < 4; i++) ev->simple_fields[i] = f[signed_order[i]];
    } else if (f[0].kind == WI_JSON_STRING && f[0].value.n) {
        ev->id = f[0].value, ev->id_escaped = f[0].escaped;
    }
    if (f[1].kind == WI_JSON_STRING && f[1].value.n) ev->type = f[1].value, ev->type_escaped = f[1].escaped;
    if (f[2].kind != WI_JSON_ABSENT) {
        if (wi_sig_body_ts(&f[2], &ev->timestamp, err)) goto out;
        ev->has_timestamp = 1;
    }
    if (v->cfg.tolerance >= 0) {
        if (!ev->has_timestamp) {
            wi_err_set(err, WI_SIG_E_MISSING_TIMESTAMP,
                       "no timestamp field in the body (X-Timestamp is covered by no Didit signature)");
            goto out;
        }
        if (wi_sig_check_time(v, req, ev->timestamp, err)) goto out;
    }
    if ((!ev->id.p || v->cfg.id_from_body) && wi_sig_signed_sha256(g.parts[0], ev, err)) goto out;
    rc = 0;
out:
    wi_canon_free(canon);
    free(buf);
    return rc;
}

