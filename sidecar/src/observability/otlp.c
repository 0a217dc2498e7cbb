/* otlp.c - the span queue and its exporter thread: OTLP/HTTP JSON over libcurl. */
#define _POSIX_C_SOURCE 200809L
#include "observability/otlp.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "core/log.h"
#include "delivery/http_client.h"

#define BATCH_MAX 512            /* spans in one request at most */
#define EXPORT_EVERY_S 1         /* a partial batch waits this long at most */
#define EXPORT_TIMEOUT_MS 5000L  /* one request, connect included */
#define SPAN_JSON_MAX 4096       /* a rendered span (attributes are ids and outcomes) */

/* The exporter. Invariant: q[(head + k) % cap] for k < n are the queued spans' JSON texts
 * (owned), oldest first; n <= cap. on is 1 from start to stop. */
static struct {
    atomic_int on;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    char **q;
    int cap, head, n;
    int stopping;               /* under lock: flush and end */
    char *url;                  /* owned */
} ex = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static atomic_long n_exported, n_dropped; /* for the process's life (metrics.c shows them) */

void wi_otlp_counts(long *exported, long *dropped)
{
    *exported = atomic_load(&n_exported);
    *dropped = atomic_load(&n_dropped);
}

long long wi_otlp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int wi_otlp_on(void)
{
    return atomic_load_explicit(&ex.on, memory_order_acquire);
}

/* A JSON string of s (quoted, escaped) appended at *p within end; 0, or -1 when it does not fit. */
static int put_str(char **p, const char *end, const char *s)
{
    char *o = *p;

    if (o >= end)
        return -1;
    *o++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (end - o < 8)
            return -1;
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += snprintf(o, 7, "\\u%04x", c);
        } else {
            *o++ = (char)c;
        }
    }
    if (end - o < 1)
        return -1;
    *o++ = '"';
    *p = o;
    return 0;
}

/* Appends printf text at *p within end; 0, or -1 when it does not fit. */
static int put(char **p, const char *end, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int put(char **p, const char *end, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(*p, (size_t)(end - *p), fmt, ap);
    va_end(ap);
    if (n < 0 || n >= end - *p)
        return -1;
    *p += n;
    return 0;
}

/* s as one OTLP JSON span object, malloc'd; NULL when out of memory or too large. */
static char *render(const struct wi_span *s)
{
    char *buf = malloc(SPAN_JSON_MAX), *p = buf, *end = buf + SPAN_JSON_MAX;
    char trace[33], span[17], parent[17];
    int i;

    if (!buf)
        return NULL;
    wi_traceparent_hex(s->ctx.trace_id, 16, trace);
    wi_traceparent_hex(s->ctx.span_id, 8, span);
    wi_traceparent_hex(s->parent_id, 8, parent);
    if (put(&p, end, "{\"traceId\":\"%s\",\"spanId\":\"%s\",\"parentSpanId\":\"%s\",\"name\":", trace, span,
            parent) < 0 ||
        put_str(&p, end, s->name) < 0 ||
        put(&p, end, ",\"kind\":%d,\"startTimeUnixNano\":\"%lld\",\"endTimeUnixNano\":\"%lld\",\"attributes\":[", s->kind,
            s->start_ns, s->end_ns) < 0)
        goto fail;
    for (i = 0; i < s->nattrs && i < WI_OTLP_ATTRS_MAX; i++) {
        const struct wi_span_attr *a = &s->attrs[i];
        if (put(&p, end, "%s{\"key\":", i ? "," : "") < 0 || put_str(&p, end, a->key) < 0)
            goto fail;
        if (a->str ? put(&p, end, ",\"value\":{\"stringValue\":") < 0 || put_str(&p, end, a->str) < 0 || put(&p, end, "}}") < 0
                   : put(&p, end, ",\"value\":{\"intValue\":\"%lld\"}}", a->num) < 0)
            goto fail;
    }
    if (put(&p, end, "],\"status\":{\"code\":%d}}", s->error ? 2 : 0) < 0)
        goto fail;
    return buf;
fail:
    free(buf);
    return NULL;
}

void wi_otlp_add(const struct wi_span *s)
{
    char *json;

    if (!wi_otlp_on())
        return;
    if (!(json = render(s))) {
        atomic_fetch_add(&n_dropped, 1);
        return;
    }
    pthread_mutex_lock(&ex.lock);
    if (ex.n >= ex.cap || ex.stopping) {
        pthread_mutex_unlock(&ex.lock);
        free(json);
        atomic_fetch_add(&n_dropped, 1);
        return;
    }
    ex.q[(ex.head + ex.n) % ex.cap] = json;
    if (++ex.n >= BATCH_MAX)
        pthread_cond_signal(&ex.wake);
    pthread_mutex_unlock(&ex.lock);
}

static size_t discard(char *ptr, size_t size, size_t nmemb, void *user)
{
    (void)ptr;
    (void)user;
    return size * nmemb;
}

/* POSTs spans[0..n) as one ExportTraceServiceRequest. Returns 0 on a 2xx, else -1 (logged at
 * most once a minute). */
static int post(CURL *curl, char **spans, int n)
{
    static const char head[] = "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
                               "\"value\":{\"stringValue\":\"webhook-inbox-sidecar\"}}]},\"scopeSpans\":[{\"scope\":"
                               "{\"name\":\"webhook_inbox\"},\"spans\":[";
    static const char tail[] = "]}]}]}";
    struct curl_slist *hdrs = NULL;
    size_t len = sizeof head + sizeof tail, at;
    char *body;
    long status = 0;
    CURLcode rc;
    int i;

    for (i = 0; i < n; i++)
        len += strlen(spans[i]) + 1;
    if (!(body = malloc(len)))
        return -1;
    memcpy(body, head, sizeof head - 1);
    at = sizeof head - 1;
    for (i = 0; i < n; i++) {
        size_t l = strlen(spans[i]);
        if (i)
            body[at++] = ',';
        memcpy(body + at, spans[i], l);
        at += l;
    }
    memcpy(body + at, tail, sizeof tail);
    at += sizeof tail - 1;
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)at);
    rc = curl_easy_perform(curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    free(body);
    if (rc == CURLE_OK && status >= 200 && status <= 299)
        return 0;
    if (wi_log_every("otlp_export_failed", 60.0))
        log_warnx("otlp_export_failed", "spans=%d status=%ld error=%s note=\"these spans are dropped\"", n, status,
                  WI_LOG_Q(rc == CURLE_OK ? "unexpected HTTP status" : curl_easy_strerror(rc)));
    return -1;
}

static void *exporter_main(void *arg)
{
    CURL *curl = curl_easy_init();
    char *batch[BATCH_MAX];
    int n, i, done = 0;

    (void)arg;
    if (curl) {
        curl_easy_setopt(curl, CURLOPT_URL, ex.url);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, EXPORT_TIMEOUT_MS);
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, EXPORT_TIMEOUT_MS);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
    }
    while (!done) {
        struct timespec until;

        pthread_mutex_lock(&ex.lock);
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += EXPORT_EVERY_S;
        while (!ex.stopping && ex.n < BATCH_MAX &&
               pthread_cond_timedwait(&ex.wake, &ex.lock, &until) != ETIMEDOUT)
            ;
        done = ex.stopping; /* a last send of what is queued, then the end */
        for (n = 0; n < BATCH_MAX && ex.n > 0; n++) {
            batch[n] = ex.q[ex.head];
            ex.head = (ex.head + 1) % ex.cap;
            ex.n--;
        }
        pthread_mutex_unlock(&ex.lock);
        while (n > 0) {
            if (curl && post(curl, batch, n) == 0)
                atomic_fetch_add(&n_exported, n);
            else
                atomic_fetch_add(&n_dropped, n);
            for (i = 0; i < n; i++)
                free(batch[i]);
            n = 0;
            if (done) { /* the rest of the queue, batch by batch */
                pthread_mutex_lock(&ex.lock);
                for (; n < BATCH_MAX && ex.n > 0; n++) {
                    batch[n] = ex.q[ex.head];
                    ex.head = (ex.head + 1) % ex.cap;
                    ex.n--;
                }
                pthread_mutex_unlock(&ex.lock);
            }
        }
    }
    curl_easy_cleanup(curl);
    return NULL;
}

int wi_otlp_start(const char *endpoint, int queue_max, struct wi_err *err)
{
    static const char path[] = "/v1/traces";
    size_t len;

    if (!endpoint || (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8)) || queue_max < 1)
        return wi_err_set(err, WI_ERR_ARG, "--otlp-endpoint must be an http:// or https:// URL");
    len = strlen(endpoint);
    while (len > 0 && endpoint[len - 1] == '/')
        len--;
    if (!(ex.url = malloc(len + sizeof path)) || !(ex.q = calloc((size_t)queue_max, sizeof *ex.q))) {
        free(ex.url);
        ex.url = NULL;
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    memcpy(ex.url, endpoint, len);
    ex.url[len] = '\0';
    if (len < sizeof path - 1 || strcmp(ex.url + len - (sizeof path - 1), path))
        memcpy(ex.url + len, path, sizeof path);
    ex.cap = queue_max;
    ex.head = ex.n = ex.stopping = 0;
    if (wi_http_global_init() < 0 || pthread_create(&ex.thread, NULL, exporter_main, NULL) != 0) {
        free(ex.url);
        free(ex.q);
        ex.url = NULL;
        ex.q = NULL;
        return wi_err_set(err, WI_ERR_ARG, "could not start the span exporter");
    }
    atomic_store_explicit(&ex.on, 1, memory_order_release);
    return 0;
}

void wi_otlp_stop(void)
{
    if (!wi_otlp_on())
        return;
    pthread_mutex_lock(&ex.lock);
    ex.stopping = 1;
    pthread_cond_signal(&ex.wake);
    pthread_mutex_unlock(&ex.lock);
    pthread_join(ex.thread, NULL);
    atomic_store_explicit(&ex.on, 0, memory_order_release);
    while (ex.n > 0) { /* added after the last send: dropped */
        free(ex.q[ex.head]);
        ex.head = (ex.head + 1) % ex.cap;
        ex.n--;
        atomic_fetch_add(&n_dropped, 1);
    }
    free(ex.q);
    free(ex.url);
    ex.q = NULL;
    ex.url = NULL;
}
