/* http_client.c - POSTs over a libcurl multi handle, bounded answers, Retry-After. */
#define _POSIX_C_SOURCE 200809L
#include "delivery/http_client.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#define MAX_EXTRA_FDS 8
#define RETRY_AFTER_MAX_S (30LL * 86400)

/* One transfer. Invariant: easy is attached to the multi handle from wi_http_start() until
 * wi_http_next() returns it; body holds at most WI_HTTP_BODY_MAX bytes plus a NUL. */
struct xfer {
    CURL *easy;
    struct curl_slist *headers; /* the request's headers, alive as long as the transfer */
    void *user;
    char *body;                 /* the answer so far */
    size_t body_len, body_cap;
    char retry_after[64];       /* the last response's Retry-After value, "" if none */
    struct xfer *prev, *next;   /* the client's list of attached transfers */
};

struct wi_http {
    CURLM *multi;
    struct xfer *head; /* attached transfers */
    int in_flight;     /* started, not yet returned by wi_http_next() */
};

static void unlink_xfer(struct wi_http *h, struct xfer *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        h->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

int wi_http_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

struct wi_http *wi_http_new(struct wi_err *err)
{
    struct wi_http *h = calloc(1, sizeof *h);
    if (!h) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (!(h->multi = curl_multi_init())) {
        free(h);
        wi_err_set(err, WI_ERR_IO, "curl_multi_init failed");
        return NULL;
    }
    return h;
}

static void xfer_free(struct xfer *x)
{
    struct curl_slist *l;

    if (!x)
        return;
    if (x->easy)
        curl_easy_cleanup(x->easy);
    for (l = x->headers; l; l = l->next) { /* Authorization: wiped, like every secret */
        volatile char *p = l->data;
        while (*p)
            *p++ = '\0';
    }
    curl_slist_free_all(x->headers);
    free(x->body);
    free(x);
}

void wi_http_free(struct wi_http *h)
{
    if (!h)
        return;
    /* Detach and free whatever is still attached (a stop during transfers). */
    while (h->head) {
        struct xfer *x = h->head;
        unlink_xfer(h, x);
        curl_multi_remove_handle(h->multi, x->easy);
        xfer_free(x);
    }
    curl_multi_cleanup(h->multi);
    free(h);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct xfer *x = arg;
    size_t n = size * nmemb, room = WI_HTTP_BODY_MAX - x->body_len, take = n < room ? n : room;

    if (take > 0) {
        if (x->body_len + take + 1 > x->body_cap) {
            size_t cap = x->body_cap ? x->body_cap * 2 : 1024;
            char *b;
            while (cap < x->body_len + take + 1)
                cap *= 2;
            if (cap > WI_HTTP_BODY_MAX + 1)
                cap = WI_HTTP_BODY_MAX + 1;
            if (!(b = realloc(x->body, cap)))
                return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
            x->body = b;
            x->body_cap = cap;
        }
        memcpy(x->body + x->body_len, data, take);
        x->body_len += take;
        x->body[x->body_len] = '\0';
    }
    return n; /* beyond the bound: read and dropped */
}

static size_t on_header(char *data, size_t size, size_t nitems, void *arg)
{
    struct xfer *x = arg;
    size_t n = size * nitems;

    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) { /* a new response (after 1xx): forget the last one's */
        x->retry_after[0] = '\0';
    } else if (n > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        size_t vl = n - 12;
        while (vl > 0 && (data[12 + vl - 1] == '\r' || data[12 + vl - 1] == '\n'))
            vl--;
        if (vl >= sizeof x->retry_after)
            vl = sizeof x->retry_after - 1;
        memcpy(x->retry_after, data + 12, vl);
        x->retry_after[vl] = '\0';
    }
    return n;
}

int wi_http_start(struct wi_http *h, const struct wi_http_req *req, struct wi_err *err)
{
    struct xfer *x = calloc(1, sizeof *x);
    struct curl_slist *l;
    int i;

    if (!x)
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    if (!(x->easy = curl_easy_init()))
        goto nomem;
    x->user = req->user;
    /* "Expect:" off: no 100-continue round trip for larger bodies. */
    if (!(l = curl_slist_append(NULL, "Content-Type: application/json")))
        goto nomem;
    x->headers = l;
    if (!(l = curl_slist_append(x->headers, "Expect:")))
        goto nomem;
    for (i = 0; i < req->nheaders; i++)
        if (!(l = curl_slist_append(x->headers, req->headers[i])))
            goto nomem;
    curl_easy_setopt(x->easy, CURLOPT_URL, req->url);
    curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(x->easy, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(x->easy, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(x->easy, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_POST, 1L);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    curl_easy_setopt(x->easy, CURLOPT_COPYPOSTFIELDS, req->body);
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(x->easy, CURLOPT_USERAGENT, "webhook-inbox-sidecar");
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, req->connect_timeout_ms);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    if (curl_multi_add_handle(h->multi, x->easy) != CURLM_OK) {
        xfer_free(x);
        return wi_err_set(err, WI_ERR_IO, "curl_multi_add_handle failed");
    }
    x->next = h->head;
    if (h->head)
        h->head->prev = x;
    h->head = x;
    h->in_flight++;
    return 0;
nomem:
    xfer_free(x);
    return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
}

int wi_http_in_flight(const struct wi_http *h)
{
    return h->in_flight;
}

int wi_http_perform(struct wi_http *h, struct wi_err *err)
{
    int running;
    if (curl_multi_perform(h->multi, &running) != CURLM_OK)
        return wi_err_set(err, WI_ERR_IO, "curl_multi_perform failed");
    return 0;
}

int wi_http_wait(struct wi_http *h, struct pollfd *extra, int nextra, int timeout_ms, struct wi_err *err)
{
    struct curl_waitfd w[MAX_EXTRA_FDS];
    int running, i, n = nextra < MAX_EXTRA_FDS ? nextra : MAX_EXTRA_FDS;
    CURLMcode rc;

    if (curl_multi_perform(h->multi, &running) != CURLM_OK)
        return wi_err_set(err, WI_ERR_IO, "curl_multi_perform failed");
    /* A transfer that finished in that perform leaves nothing to wake the poll (its answer is
     * read already): look at the extra fds and return without waiting. */
    if (running < h->in_flight)
        timeout_ms = 0;
    for (i = 0; i < n; i++) {
        w[i].fd = extra[i].fd;
        w[i].events = CURL_WAIT_POLLIN;
        w[i].revents = 0;
    }
    rc = curl_multi_poll(h->multi, w, (unsigned)n, timeout_ms, NULL);
    if (rc != CURLM_OK)
        return wi_err_set(err, WI_ERR_IO, "curl_multi_poll: %s", curl_multi_strerror(rc));
    for (i = 0; i < n; i++)
        extra[i].revents = (short)(w[i].revents ? POLLIN : 0);
    if (curl_multi_perform(h->multi, &running) != CURLM_OK)
        return wi_err_set(err, WI_ERR_IO, "curl_multi_perform failed");
    return 0;
}

int wi_http_next(struct wi_http *h, struct wi_http_res *res)
{
    CURLMsg *m;
    int left;

    memset(res, 0, sizeof *res);
    while ((m = curl_multi_info_read(h->multi, &left)) != NULL) {
        struct xfer *x = NULL;
        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        res->user = x->user;
        res->retry_after_ms = -1;
        if (m->data.result == CURLE_OK) {
            curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &res->status);
            if (x->retry_after[0])
                (void)wi_http_parse_retry_after(x->retry_after, strlen(x->retry_after), time(NULL),
                                                &res->retry_after_ms);
            res->body = x->body;
            res->body_len = x->body_len;
            x->body = NULL;
        } else {
            /* curl's generic text: the error buffer could quote the URL (its query string). */
            res->timed_out = m->data.result == CURLE_OPERATION_TIMEDOUT;
            snprintf(res->error, sizeof res->error, "curl %d: %s", (int)m->data.result,
                     curl_easy_strerror(m->data.result));
        }
        curl_multi_remove_handle(h->multi, x->easy);
        unlink_xfer(h, x);
        xfer_free(x);
        h->in_flight--;
        return 1;
    }
    return 0;
}

void wi_http_res_free(struct wi_http_res *res)
{
    if (!res)
        return;
    free(res->body);
    res->body = NULL;
    res->body_len = 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static long long days_from_civil(long long y, unsigned m, unsigned d)
{
    long long era;
    unsigned yoe, doy, doe;
    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

static int digits(const char *s, int n, int *out)
{
    int i, v = 0;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int wi_http_parse_retry_after(const char *v, size_t n, time_t now, long long *ms)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    static const char days[] = "MonTueWedThuFriSatSun";
    const char *s = v, *e = v + n;
    size_t len;

    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    len = (size_t)(e - s);
    if (len == 0)
        return -1;
    if (s[0] >= '0' && s[0] <= '9') { /* delta-seconds */
        long long secs = 0;
        size_t i;
        for (i = 0; i < len; i++) {
            if (s[i] < '0' || s[i] > '9')
                return -1;
            if (secs < RETRY_AFTER_MAX_S)
                secs = secs * 10 + (s[i] - '0');
        }
        *ms = (secs > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S : secs) * 1000;
        return 0;
    }
    /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
    if (len == 29 && s[3] == ',' && s[4] == ' ' && s[7] == ' ' && s[11] == ' ' && s[16] == ' ' && s[19] == ':' &&
        s[22] == ':' && s[25] == ' ' && memcmp(s + 26, "GMT", 3) == 0) {
        int day, year, hh, mm, ss, mon = -1, i, dayname = 0;
        long long t;
        for (i = 0; i < 7; i++)
            if (memcmp(s, days + 3 * i, 3) == 0)
                dayname = 1;
        for (i = 0; i < 12; i++)
            if (memcmp(s + 8, months + 3 * i, 3) == 0)
                mon = i + 1;
        if (!dayname || mon < 0 || digits(s + 5, 2, &day) < 0 || digits(s + 12, 4, &year) < 0 ||
            digits(s + 17, 2, &hh) < 0 || digits(s + 20, 2, &mm) < 0 || digits(s + 23, 2, &ss) < 0 || day < 1 ||
            day > 31 || hh > 23 || mm > 59 || ss > 60)
            return -1;
        t = days_from_civil(year, (unsigned)mon, (unsigned)day) * 86400LL + hh * 3600LL + mm * 60LL + ss;
        t -= (long long)now;
        if (t < 0)
            t = 0;
        if (t > RETRY_AFTER_MAX_S)
            t = RETRY_AFTER_MAX_S;
        *ms = t * 1000;
        return 0;
    }
    return -1;
}
