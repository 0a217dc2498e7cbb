/* reconcile_http.c - a blocking libcurl request for reconcile: provider API pages and
 * redelivery calls. TLS peer and host are always verified; only http and https. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile_http.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "delivery/http_client.h"

struct acc {
    struct wi_rc_res *res;
    size_t cap;
    int too_big;
    char retry_after[64];
    atomic_int *stopping;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct acc *a = arg;
    struct wi_rc_res *r = a->res;
    size_t n = size * nmemb;

    if (r->body_len + n > (size_t)WI_RC_BODY_MAX) {
        a->too_big = 1;
        return 0; /* CURLE_WRITE_ERROR */
    }
    if (r->body_len + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 16384;
        char *b;
        while (cap < r->body_len + n + 1)
            cap *= 2;
        if (!(b = realloc(r->body, cap)))
            return 0;
        r->body = b;
        a->cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return n;
}

/* Link: <url>; rel="next", <url>; rel="last" - keeps the next one's URL. */
static void read_link(const char *v, size_t n, char *out, size_t outsz)
{
    const char *end = v + n, *p = v;
    while (p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p)), *gt, *stop;
        if (!lt || !(gt = memchr(lt, '>', (size_t)(end - lt))))
            return;
        stop = memchr(gt, ',', (size_t)(end - gt));
        if (!stop)
            stop = end;
        for (const char *q = gt; q + 10 <= stop; q++)
            if (!strncmp(q, "rel=\"next\"", 10)) {
                size_t len = (size_t)(gt - lt - 1);
                if (len < outsz) {
                    memcpy(out, lt + 1, len);
                    out[len] = '\0';
                }
                return;
            }
        p = stop + 1;
    }
}

static size_t on_header(char *data, size_t size, size_t nitems, void *arg)
{
    struct acc *a = arg;
    size_t n = size * nitems, vl;

    while (n > 0 && (data[n - 1] == '\r' || data[n - 1] == '\n'))
        n--;
    if (n >= 5 && !memcmp(data, "HTTP/", 5)) { /* a new response (after 1xx) */
        a->retry_after[0] = '\0';
        a->res->link_next[0] = '\0';
    } else if (n > 12 && !strncasecmp(data, "Retry-After:", 12)) {
        vl = n - 12 < sizeof a->retry_after - 1 ? n - 12 : sizeof a->retry_after - 1;
        memcpy(a->retry_after, data + 12, vl);
        a->retry_after[vl] = '\0';
    } else if (n > 5 && !strncasecmp(data, "Link:", 5)) {
        read_link(data + 5, n - 5, a->res->link_next, sizeof a->res->link_next);
    }
    return size * nitems;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct acc *a = arg;
    (void)dt, (void)dn, (void)ut, (void)un;
    return a->stopping && atomic_load(a->stopping) ? 1 : 0;
}

int wi_rc_http(const struct wi_rc_req *req, struct wi_rc_res *res, struct wi_err *err)
{
    struct acc a;
    struct curl_slist *hl = NULL, *l;
    CURL *c;
    CURLcode cc;
    int i, rc = -1;

    memset(res, 0, sizeof *res);
    res->retry_after_ms = -1;
    memset(&a, 0, sizeof a);
    a.res = res;
    a.stopping = req->stopping;
    if (!(c = curl_easy_init()))
        return wi_err_set(err, WI_ERR_NOMEM, "curl_easy_init failed");
    for (i = 0; i < req->nheaders; i++) {
        if (!(l = curl_slist_append(hl, req->headers[i]))) {
            wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            goto out;
        }
        hl = l;
    }
    curl_easy_setopt(c, CURLOPT_URL, req->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "webhook-inbox-sidecar");
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, ""); /* whatever curl can decode */
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, req->timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &a);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    if (!strcmp(req->method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "{}");
    }
    cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res->status);
        if (!res->body && !(res->body = calloc(1, 1))) {
            wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (a.retry_after[0])
            (void)wi_http_parse_retry_after(a.retry_after, strlen(a.retry_after), time(NULL), &res->retry_after_ms);
    } else {
        /* an answer cut off halfway is no answer: its page is asked for again */
        snprintf(res->error, sizeof res->error, "%s", a.too_big ? "answer larger than 32 MiB"
                                                    : cc == CURLE_ABORTED_BY_CALLBACK ? "stopping"
                                                    : curl_easy_strerror(cc));
        free(res->body);
        res->body = NULL;
        res->body_len = 0;
        res->status = 0;
    }
    rc = 0;
out:
    for (l = hl; l; l = l->next) { /* Authorization: wiped, like every secret */
        volatile char *p = l->data;
        while (*p)
            *p++ = '\0';
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return rc;
}

void wi_rc_res_free(struct wi_rc_res *res)
{
    if (!res)
        return;
    free(res->body);
    res->body = NULL;
    res->body_len = 0;
}

int wi_rc_query_param(const char *url, const char *name, char *out, size_t n)
{
    const char *q = strchr(url, '?');
    size_t nl = strlen(name);

    while (q) {
        const char *p = q + 1;
        size_t len = strcspn(p, "&#");
        if (len > nl && !strncmp(p, name, nl) && p[nl] == '=') {
            const char *v = p + nl + 1;
            size_t vl = len - nl - 1;
            if (vl == 0 || vl >= n || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~%=-") < vl)
                return -1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return 0;
        }
        q = p[len] == '&' ? p + len : NULL;
    }
    return -1;
}
