/* sig_url.c - {url}, {params} and bodySHA256: what a URL-signed provider (Twilio, Square,
 * HubSpot v3) signs besides the body, built per request from the URL the binding passes. */
#include "sig_url.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "form.h"

static struct wi_slice slice_of(const char *s) { return (struct wi_slice){s, strlen(s)}; }

/* url with its scheme's default port (":443" for https, ":80" for http) removed when it
 * names it, or added when it names no port, into *buf (malloc'd); absent for other URLs. */
static int port_variant(struct wi_slice url, char **buf, struct wi_slice *alt, struct wi_err *err)
{
    static const struct { const char *scheme, *port; } known[] = {{"https://", ":443"}, {"http://", ":80"}};
    *alt = (struct wi_slice){NULL, 0};
    for (size_t i = 0; i < 2; i++) {
        size_t sl = strlen(known[i].scheme), pl = strlen(known[i].port), a = sl;
        if (url.n < sl || strncasecmp(url.p, known[i].scheme, sl)) continue;
        while (a < url.n && url.p[a] != '/' && url.p[a] != '?' && url.p[a] != '#') a++;
        const char *host = url.p + sl, *close = memchr(host, ']', a - sl), *colon;
        colon = memchr(close ? close : host, ':', (size_t)(url.p + a - (close ? close : host)));
        if (colon && memchr(host, '@', a - sl)) return 0; /* user:password@: left alone */
        if (!(*buf = malloc(url.n + pl))) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        if (!colon) { /* no port: add the default one */
            memcpy(*buf, url.p, a);
            memcpy(*buf + a, known[i].port, pl);
            memcpy(*buf + a + pl, url.p + a, url.n - a);
            *alt = (struct wi_slice){*buf, url.n + pl};
        } else if ((size_t)(url.p + a - colon) == pl && !memcmp(colon, known[i].port, pl)) {
            size_t c = (size_t)(colon - url.p);
            memcpy(*buf, url.p, c);
            memcpy(*buf + c, url.p + a, url.n - a);
            *alt = (struct wi_slice){*buf, url.n - pl};
        }
        return 0;
    }
    return 0;
}

int wi_sig_url_prepare(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                       struct wi_sig_url_parts *u, struct wi_err *err)
{
    const struct wi_provider *p = &v->p;
    memset(u, 0, sizeof *u);
    if (v->signs_method && !req->method.p)
        return wi_err_set(err, WI_ERR_ARG, "%s signs the request method; none was given", p->name);
    if (!v->signs_url && !v->signs_params) return 0;
    if (v->signs_url && !req->url.p)
        return wi_err_set(err, WI_ERR_ARG,
                          "%s signs the URL it called: configure public_url: or verify with a Rack env", p->name);
    u->url = req->url;
    if (u->url.p && p->url_unescape) {
        if (!(u->own[0] = malloc(u->url.n ? u->url.n : 1))) return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        u->url = (struct wi_slice){u->own[0], wi_url_unescape(req->url.p, req->url.n, p->url_unescape, u->own[0])};
    }
    if (u->url.p && p->url_ports && port_variant(u->url, &u->own[1], &u->alt, err)) return -1;
    if (!v->signs_params) return 0;
    u->params = slice_of("");
    if (p->url_hash_param && u->url.p) {
        const char *q = memchr(u->url.p, '?', u->url.n);
        if (q) u->body_hash = wi_form_find(q + 1, (size_t)(u->url.p + u->url.n - q - 1), p->url_hash_param);
        if (u->body_hash.p) return 0; /* the body is signed through its hash: no form */
    }
    size_t n;
    if (wi_form_sorted(req->body.p, req->body.n, &u->own[2], &n, WI_SIG_E_MALFORMED_PAYLOAD, err)) return -1;
    if (u->own[2]) u->params = (struct wi_slice){u->own[2], n};
    return 0;
}

int wi_sig_url_check_body(const struct wi_sig_url_parts *u, struct wi_slice body, struct wi_err *err)
{
    unsigned char want[32], got[32];
    if (!u->body_hash.p) return 0;
    if (wi_sha256(body.p, body.n, got, err)) return -1;
    if (wi_hex_decode_lower(u->body_hash.p, u->body_hash.n, want, sizeof want) != 32 || !wi_ct_equal(want, got, 32))
        return wi_err_set(err, WI_SIG_E_SIGNATURE_MISMATCH, "the body is not the one the signed URL's hash names");
    return 0;
}

void wi_sig_url_free(struct wi_sig_url_parts *u)
{
    for (size_t i = 0; i < sizeof u->own / sizeof *u->own; i++) free(u->own[i]);
}
