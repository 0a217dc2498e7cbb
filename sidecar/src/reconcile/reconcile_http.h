/* reconcile_http.h - one blocking HTTP request to a provider's API (libcurl easy handle):
 * verified TLS, no redirects, a bounded answer, Retry-After and Link read, abortable. */
#ifndef WI_RECONCILE_HTTP_H
#define WI_RECONCILE_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include "wi_err.h"

#define WI_RC_BODY_MAX (32L << 20) /* a larger answer fails the request (a page is far smaller) */

struct wi_rc_req {
    const char *method;         /* "GET" or "POST" (POST sends body, or an empty JSON object) */
    const char *url;
    const char *const *headers; /* "Name: value" lines (Authorization among them), nheaders */
    int nheaders;
    long timeout_ms;            /* the whole request */
    atomic_int *stopping;       /* set: the transfer is aborted (may be NULL) */
    const char *body;           /* POST: the JSON sent (NULL: "{}"); borrowed */
};

/* An answer. status 0: none (error says why: refused, timeout, TLS, cut off, stopped). */
struct wi_rc_res {
    long status;
    char *body;                 /* NUL-terminated, owned; NULL when status is 0 */
    size_t body_len;
    long long retry_after_ms;   /* a valid Retry-After, else -1 */
    char link_next[1024];       /* the URL of the Link header's rel="next", "" when none */
    char error[160];            /* "" after an answer; never holds the URL or credentials */
};

/* Runs req. Returns 0 with *res filled (an answer of any status, or status 0 and error),
 * or -1 with *err when the request could not be set up. Free *res with wi_rc_res_free. */
int wi_rc_http(const struct wi_rc_req *req, struct wi_rc_res *res, struct wi_err *err);

/* Frees res's body; accepts NULL. */
void wi_rc_res_free(struct wi_rc_res *res);

/* The value of query parameter name in url (percent-encoding kept) into out[0..n); 0, or
 * -1 when absent, empty, too long, or holding anything but [A-Za-z0-9_.~%=-]. */
int wi_rc_query_param(const char *url, const char *name, char *out, size_t n);

#endif
