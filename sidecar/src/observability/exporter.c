/* exporter.c - the metrics endpoint: a poll() loop over one listening socket and at most
 * WI_EXPORTER_MAX_CONNS connections (thread 1), and the cached inbox and outbox gauges refreshed
 * from webhook_inbox_stats() and webhook_inbox_outbox_stats() on a connection of their own (thread 2). One request per
 * connection (Connection: close); every socket is non-blocking; deadlines are absolute. */
#define _POSIX_C_SOURCE 200809L
#include "core/clock.h"
#include "observability/exporter.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "observability/http.h"
#include "observability/metrics.h"
#include "pg/pgw.h"
#include "pg/schema.h"

/* C_WAIT: a GET /metrics that found the gauges older than the refresh interval waits for
 * the stats thread's next read (at most WI_EXPORTER_WAIT_S), then is answered. */
enum { C_FREE = 0, C_READ, C_WAIT, C_WRITE, C_DRAIN };

/* Invariant: fd >= 0 exactly when state != C_FREE; resp is owned and set in C_WRITE/C_DRAIN. */
struct conn {
    int state;
    int fd;
    double deadline;   /* monotonic seconds: the connection is dropped (C_WAIT: answered) at this time */
    double active;     /* monotonic seconds of the last byte read or sent (or the accept) */
    int head_only;     /* C_WAIT: a HEAD request */
    size_t got;        /* bytes of head[] received */
    char *resp;        /* status line, headers and body */
    size_t resp_len, sent;
    char head[WI_EXPORTER_MAX_HEAD];
};

struct wi_exporter {
    int listen_fd;
    int stop_pipe[2];          /* written once by wi_exporter_stop: both threads end */
    int wake_pipe[2];          /* a scrape that found stale gauges pokes the stats thread */
    int fresh_pipe[2];         /* the stats thread ends each read with a byte: waiting scrapes go on */
    const char *conninfo;      /* borrowed */
    /* The --destination names configured here (copied at start): always in the effects
     * gauges, at 0 when the outbox has no row for them, so an alert never sees them vanish. */
    char dest_names[WI_METRICS_MAX_DESTS][64];
    int ndest_names;
    pthread_t http_thread, stats_thread;
    int http_started, stats_started;
    pthread_mutex_t mu;        /* guards gauges, read_at, tried_at */
    struct wi_metrics_gauges gauges;
    double read_at;            /* monotonic time of the last successful read */
    double tried_at;           /* monotonic time the last read ended, failed or not; -INFINITY before the first */
    _Atomic long long last_scrape_ms; /* monotonic ms of the last GET /metrics; 0 = none yet */
    struct conn conns[WI_EXPORTER_MAX_CONNS];
};

static int set_flags(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -1;
    return 0;
}

static int make_pipe(int fds[2])
{
    if (pipe(fds) < 0)
        return -1;
    if (set_flags(fds[0]) < 0 || set_flags(fds[1]) < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    return 0;
}

int wi_exporter_split_address(const char *listen, char *host, size_t hostsz, char *port, size_t portsz)
{
    const char *colon, *h = listen;
    size_t hlen;

    if (!listen || !*listen)
        return -1;
    if (*listen == '[') {
        const char *close_b = strchr(listen, ']');
        if (!close_b || close_b[1] != ':')
            return -1;
        h = listen + 1;
        hlen = (size_t)(close_b - h);
        colon = close_b + 1;
    } else {
        colon = strrchr(listen, ':');
        if (!colon || memchr(listen, ':', (size_t)(colon - listen))) /* a bare IPv6 address needs brackets */
            return -1;
        hlen = (size_t)(colon - listen);
    }
    if (hlen >= hostsz || strlen(colon + 1) >= portsz || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return -1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    strcpy(port, colon + 1);
    return atol(port) > 65535 ? -1 : 0;
}

/* Binds and listens on listen; returns the socket or -1 with *err. */
static int bind_listener(const char *listen_addr, struct wi_err *err)
{
    char host[256], port[16], shown[300];
    struct addrinfo hints, *res = NULL, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = -1, rc, one = 1;

    if (wi_exporter_split_address(listen_addr, host, sizeof host, port, sizeof port) < 0)
        return wi_err_set(err, WI_ERR_ARG, "metrics-listen must be HOST:PORT, [IPv6]:PORT or :PORT");
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if ((rc = getaddrinfo(*host ? host : NULL, port, &hints, &res)) != 0)
        return wi_err_set(err, WI_ERR_ARG, "metrics-listen %.200s: %s", listen_addr, gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
        if ((fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol)) < 0)
            continue;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (set_flags(fd) == 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
            break;
        rc = errno;
        close(fd);
        fd = -1;
        errno = rc;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return wi_err_set(err, WI_ERR_IO, "metrics-listen %.200s: %s", listen_addr, strerror(errno));
    shown[0] = '\0';
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        char nh[128], np[16];
        if (getnameinfo((struct sockaddr *)&ss, sl, nh, sizeof nh, np, sizeof np, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
            snprintf(shown, sizeof shown, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", nh, np);
    }
    log_info("metrics_listening", "address=%s path=/metrics", shown[0] ? shown : "?");
    return fd;
}

/* ---- the inbox and outbox gauges (stats thread) ---- */

static const struct wi_pg_stmt stats_stmts[] = {
    {"wi_metrics_timeout", "SELECT set_config('statement_timeout', '5s', false)"},
    /* webhook_inbox_unrouted() groups the pending rows only. */
    {"wi_metrics_stats", "SELECT s.pending, s.oldest_pending_age_s, s.quarantined, s.retrying,"
                         " (SELECT coalesce(sum(u.pending), 0) FROM webhook_inbox_unrouted() u)"
                         " FROM webhook_inbox_stats() s"},
};

/* Prepared on its own (and again after a failure): a database without it still gets the
 * inbox gauges. Reads pending, quarantined and last-hour rows through partial indexes (v6). */
static const struct wi_pg_stmt outbox_stmt = {
    "wi_metrics_outbox", "SELECT destination, pending, oldest_pending_age_s, quarantined FROM webhook_inbox_outbox_stats()"};

/* Reads the outbox gauges into *g (outbox_valid set on success), then adds the configured
 * destinations the outbox has no row for, at 0. Returns 0, or -1 with *err; the connection
 * is then left to the caller (wi_pg_ok says whether it is still usable). */
static int read_outbox(const struct wi_exporter *ex, struct wi_pg *pg, struct wi_metrics_gauges *g, struct wi_err *err)
{
    PGresult *res;
    int i, j, n;

    if (wi_pg_prepare(pg, &outbox_stmt, 1, err) < 0 || !(res = wi_pg_exec(pg, outbox_stmt.name, 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    n = PQntuples(res);
    if (n > WI_METRICS_MAX_DESTS && wi_log_every("metrics_destinations_truncated", 3600))
        log_warnx("metrics_destinations_truncated", "destinations=%d shown=%d", n, WI_METRICS_MAX_DESTS);
    for (i = 0; i < n && g->ndests < WI_METRICS_MAX_DESTS; i++) {
        struct wi_metrics_dest *d = &g->dests[g->ndests++];
        snprintf(d->name, sizeof d->name, "%s", PQgetvalue(res, i, 0));
        d->pending = atol(PQgetvalue(res, i, 1));
        d->oldest_pending_age_s = PQgetisnull(res, i, 2) ? 0 : atof(PQgetvalue(res, i, 2));
        d->quarantined = atol(PQgetvalue(res, i, 3));
    }
    PQclear(res);
    n = g->ndests; /* the rows read */
    for (i = 0; i < ex->ndest_names && g->ndests < WI_METRICS_MAX_DESTS; i++) {
        for (j = 0; j < n && strcmp(g->dests[j].name, ex->dest_names[i]); j++)
            ;
        if (j == n) {
            memset(&g->dests[g->ndests], 0, sizeof g->dests[g->ndests]);
            snprintf(g->dests[g->ndests++].name, sizeof g->dests[0].name, "%s", ex->dest_names[i]);
        }
    }
    g->outbox_valid = 1;
    return 0;
}

/* Prepared on its own, like the outbox's. */
static const struct wi_pg_stmt flow_stmt = {
    "wi_metrics_flow", "SELECT kind, target, paused, rate, pending FROM webhook_inbox_flow_stats()"};

/* Reads the pause and rate rules into *g (flow_valid set on success). Returns 0, or -1 with *err. */
static int read_flows(struct wi_pg *pg, struct wi_metrics_gauges *g, struct wi_err *err)
{
    PGresult *res;
    int i;

    if (wi_pg_prepare(pg, &flow_stmt, 1, err) < 0 || !(res = wi_pg_exec(pg, flow_stmt.name, 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    for (i = 0; i < PQntuples(res) && g->nflows < WI_METRICS_MAX_FLOWS; i++) {
        struct wi_metrics_flow *f = &g->flows[g->nflows++];
        snprintf(f->kind, sizeof f->kind, "%s", PQgetvalue(res, i, 0));
        snprintf(f->target, sizeof f->target, "%s", PQgetvalue(res, i, 1));
        f->paused = !strcmp(PQgetvalue(res, i, 2), "t");
        f->rate = PQgetisnull(res, i, 3) ? 0 : atof(PQgetvalue(res, i, 3));
        f->pending = atol(PQgetvalue(res, i, 4));
    }
    PQclear(res);
    g->flow_valid = 1;
    return 0;
}

/* The cleanup horizon (issue 33): the oldest xmin each kind of holder keeps, as an age in
 * transactions, and how long the oldest holding transaction has been open. This session's own
 * statement and autovacuum are left out; a session counts by its snapshot (backend_xmin) or its
 * transaction id (backend_xid: an idle transaction that wrote). Other roles' sessions show
 * their xmin only to a role with pg_read_all_stats (pg_monitor); never reads query texts. */
static const struct wi_pg_stmt horizon_stmt = {
    "wi_metrics_horizon",
    "WITH s AS (SELECT greatest(age(backend_xmin), age(backend_xid)) AS age, xact_start FROM pg_stat_activity"
    "            WHERE datname = current_database() AND pid <> pg_backend_pid()"
    "              AND backend_type <> 'autovacuum worker'"
    "              AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL))"
    " SELECT (SELECT coalesce(max(age), 0) FROM s),"
    "        (SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_replication),"
    "        (SELECT coalesce(max(age(xmin)), 0) FROM pg_replication_slots),"
    "        (SELECT coalesce(max(age(transaction)), 0) FROM pg_prepared_xacts),"
    "        coalesce(extract(epoch FROM now() - least((SELECT min(xact_start) FROM s),"
    "                                                  (SELECT min(prepared) FROM pg_prepared_xacts))), 0)"};

/* Reads the cleanup horizon into *g (horizon_valid set on success). Returns 0, or -1 with *err. */
static int read_horizon(struct wi_pg *pg, struct wi_metrics_gauges *g, struct wi_err *err)
{
    PGresult *res;
    int i;

    if (wi_pg_prepare(pg, &horizon_stmt, 1, err) < 0 ||
        !(res = wi_pg_exec(pg, horizon_stmt.name, 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    if (PQntuples(res) != 1 || PQnfields(res) != WI_M_HOLD_COUNT + 1) {
        wi_err_set(err, WI_ERR_PG, "the cleanup horizon read returned %d rows", PQntuples(res));
        PQclear(res);
        return -1;
    }
    for (i = 0; i < WI_M_HOLD_COUNT; i++)
        g->horizon_xid_age[i] = atof(PQgetvalue(res, 0, i));
    g->horizon_age_s = atof(PQgetvalue(res, 0, WI_M_HOLD_COUNT));
    PQclear(res);
    g->horizon_valid = 1;
    return 0;
}

/* One read of the gauges into *g; *pg is (re)connected as needed and freed on a connection
 * error. Returns 0, or -1 with *err (g->valid is then 0). */
static int read_gauges(struct wi_exporter *ex, struct wi_pg **pg, struct wi_metrics_gauges *g, struct wi_err *err)
{
    PGresult *res = NULL;

    memset(g, 0, sizeof *g);
    if (!*pg) {
        if (!(*pg = wi_pg_connect(ex->conninfo, wi_schema_stmts, wi_schema_stmts_count, err)))
            return -1;
        if (wi_schema_require(*pg, err) < 0 ||
            wi_pg_prepare(*pg, stats_stmts, (int)(sizeof stats_stmts / sizeof stats_stmts[0]), err) < 0 ||
            wi_pg_cmd(*pg, "wi_metrics_timeout", 0, NULL, err) < 0) {
            wi_pg_free(*pg);
            *pg = NULL;
            return -1;
        }
    }
    if (!(res = wi_pg_exec(*pg, "wi_metrics_stats", 0, NULL, PGRES_TUPLES_OK, err)) || PQntuples(res) != 1) {
        if (res)
            wi_err_set(err, WI_ERR_PG, "webhook_inbox_stats() returned %d rows", PQntuples(res));
        PQclear(res);
        if (!res || !wi_pg_ok(*pg) || wi_schema_require(*pg, err) < 0) { /* a dropped schema: connect again later */
            wi_pg_free(*pg);
            *pg = NULL;
        }
        return -1;
    }
    g->valid = 1;
    g->pending = atol(PQgetvalue(res, 0, 0));
    g->oldest_pending_age_s = PQgetisnull(res, 0, 1) ? 0 : atof(PQgetvalue(res, 0, 1));
    g->quarantined = atol(PQgetvalue(res, 0, 2));
    g->retrying = atol(PQgetvalue(res, 0, 3));
    g->waiting_for_route = atol(PQgetvalue(res, 0, 4));
    PQclear(res);
    if (read_flows(*pg, g, err) < 0) {
        if (wi_log_every("metrics_flow_failed", 60))
            log_warnx("metrics_flow_failed", "error=%s", WI_LOG_Q(err->msg));
        if (!wi_pg_ok(*pg)) {
            wi_pg_free(*pg);
            *pg = NULL;
            return 0;
        }
    }
    if (read_horizon(*pg, g, err) < 0) {
        if (wi_log_every("metrics_horizon_failed", 60))
            log_warnx("metrics_horizon_failed", "error=%s", WI_LOG_Q(err->msg));
        if (!wi_pg_ok(*pg)) {
            wi_pg_free(*pg);
            *pg = NULL;
            return 0;
        }
    }
    if (read_outbox(ex, *pg, g, err) < 0) {
        if (wi_log_every("metrics_outbox_failed", 60))
            log_warnx("metrics_outbox_failed", "error=%s note=\"serving the inbox gauges with webhook_inbox_effects_stats_up 0\"",
                      WI_LOG_Q(err->msg));
        if (!wi_pg_ok(*pg)) { /* lost meanwhile: connect again next time; this read's inbox gauges stand */
            wi_pg_free(*pg);
            *pg = NULL;
        }
    }
    return 0;
}

/* Reads the gauges and publishes them (or their failure) for the scrapes, then wakes the
 * scrapes that wait. A connection found lost (PostgreSQL restarted since the last read) is
 * replaced at once and read again, so the first scrape after a restart gets values. */
static void refresh(struct wi_exporter *ex, struct wi_pg **pg)
{
    struct wi_metrics_gauges g;
    struct wi_err err;
    int had = *pg != NULL, rc = read_gauges(ex, pg, &g, &err);

    if (rc < 0 && had && !*pg)
        rc = read_gauges(ex, pg, &g, &err);
    if (rc < 0 && wi_log_every("metrics_stats_failed", 60))
        log_warnx("metrics_stats_failed", "error=%s note=\"serving the process counters with webhook_inbox_stats_up 0\"",
                  WI_LOG_Q(err.msg));
    pthread_mutex_lock(&ex->mu);
    ex->gauges = g; /* valid = 0 after a failure: the gauges are left out */
    ex->tried_at = wi_clock_s();
    if (rc == 0)
        ex->read_at = ex->tried_at;
    pthread_mutex_unlock(&ex->mu);
    (void)!write(ex->fresh_pipe[1], "f", 1);
}

static void *stats_main(void *arg)
{
    struct wi_exporter *ex = arg;
    struct wi_pg *pg = NULL;
    double last_try = -INFINITY;

    for (;;) {
        struct pollfd p[2] = {{ex->stop_pipe[0], POLLIN, 0}, {ex->wake_pipe[0], POLLIN, 0}};
        long long scraped = atomic_load(&ex->last_scrape_ms);
        double now = wi_clock_s(), wait_s;
        /* Read at start (the first scrape then has values), then only while scraped. */
        int wanted = last_try == -INFINITY || (scraped && now * 1000 - (double)scraped < WI_EXPORTER_IDLE_S * 1000);
        char buf[64];

        if (wanted && now - last_try >= WI_EXPORTER_REFRESH_S) {
            refresh(ex, &pg);
            last_try = wi_clock_s();
            now = last_try;
        }
        wait_s = wanted ? WI_EXPORTER_REFRESH_S - (now - last_try) : -1;
        if (poll(p, 2, wait_s < 0 ? -1 : (int)(wait_s * 1000) + 1) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            break;
        while (read(ex->wake_pipe[0], buf, sizeof buf) > 0)
            ;
    }
    wi_pg_free(pg);
    return NULL;
}

/* ---- the listener (http thread) ---- */

static void conn_close(struct conn *c)
{
    if (c->state == C_FREE)
        return;
    close(c->fd);
    free(c->resp);
    c->resp = NULL;
    c->fd = -1;
    c->state = C_FREE;
}

/* Builds the response; body may be NULL (then "" ). Takes ownership of body. */
static void respond(struct conn *c, int status, const char *reason, const char *ctype, const char *extra,
                    char *body, size_t body_len, int head_only)
{
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                     "%sConnection: close\r\n\r\n",
                     status, reason, ctype, body_len, extra ? extra : "");
    size_t total = (size_t)n + (head_only ? 0 : body_len);

    c->resp = malloc(total ? total : 1);
    if (!c->resp) {
        free(body);
        conn_close(c);
        return;
    }
    memcpy(c->resp, hdr, (size_t)n);
    if (!head_only && body_len)
        memcpy(c->resp + n, body, body_len);
    free(body);
    c->resp_len = total;
    c->sent = 0;
    c->state = C_WRITE;
    c->deadline = wi_clock_s() + WI_EXPORTER_WRITE_TIMEOUT_S;
}

static void respond_text(struct conn *c, int status, const char *reason, const char *extra, const char *text)
{
    char *body = strdup(text);
    respond(c, status, reason, "text/plain; charset=utf-8", extra, body, body ? strlen(body) : 0, 0);
}

/* 1 when the last read of the gauges (failed or not) ended within the refresh interval. */
static int gauges_fresh(struct wi_exporter *ex, double now)
{
    int fresh;
    pthread_mutex_lock(&ex->mu);
    fresh = now - ex->tried_at <= WI_EXPORTER_REFRESH_S;
    pthread_mutex_unlock(&ex->mu);
    return fresh;
}

/* Answers GET /metrics with the cached gauges, or without them (webhook_inbox_stats_up 0)
 * when they are older than the refresh interval: never old values as current ones. */
static void answer_metrics(struct wi_exporter *ex, struct conn *c, int head_only)
{
    struct wi_metrics_gauges g;
    char *body = NULL;
    size_t len = 0;
    double now = wi_clock_s();
    FILE *f;

    pthread_mutex_lock(&ex->mu);
    g = ex->gauges;
    g.age_s = now - ex->read_at;
    if (now - ex->tried_at > WI_EXPORTER_REFRESH_S)
        g.valid = g.outbox_valid = 0;
    pthread_mutex_unlock(&ex->mu);
    if (!(f = open_memstream(&body, &len))) {
        respond_text(c, 500, "Internal Server Error", NULL, "out of memory\n");
        return;
    }
    wi_metrics_render(f, &g);
    if (fclose(f) != 0) {
        free(body);
        respond_text(c, 500, "Internal Server Error", NULL, "out of memory\n");
        return;
    }
    respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", NULL, body, len, head_only);
}

/* A scrape: answered now when the gauges are fresh, else it waits for the read it asks the
 * stats thread for (idle since the last scrape, or its last read is late). */
static void serve_metrics(struct wi_exporter *ex, struct conn *c, int head_only)
{
    double now = wi_clock_s();

    atomic_store(&ex->last_scrape_ms, (long long)(now * 1000));
    if (gauges_fresh(ex, now)) {
        answer_metrics(ex, c, head_only);
        return;
    }
    (void)!write(ex->wake_pipe[1], "w", 1);
    c->state = C_WAIT;
    c->head_only = head_only;
    c->deadline = now + WI_EXPORTER_WAIT_S;
}

/* Reads what arrived; answers once the head is complete, malformed or too large. */
static void on_readable(struct wi_exporter *ex, struct conn *c)
{
    struct wi_http_req req;
    ssize_t n;
    long r;

    n = read(c->fd, c->head + c->got, sizeof c->head - c->got);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c);
        return;
    }
    if (n < 0)
        return;
    c->got += (size_t)n;
    c->active = wi_clock_s();
    r = wi_http_parse(c->head, c->got, &req);
    if (r < 0)
        respond_text(c, 400, "Bad Request", NULL, "bad request\n");
    else if (r == 0 && c->got == sizeof c->head)
        respond_text(c, 431, "Request Header Fields Too Large", NULL, "request head too large\n");
    else if (r == 0)
        return;
    else if (!wi_http_path_is(&req, "/metrics"))
        respond_text(c, 404, "Not Found", NULL, "not found: the metrics are at /metrics\n");
    else if (!wi_http_method_is(&req, "GET") && !wi_http_method_is(&req, "HEAD"))
        respond_text(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n", "method not allowed\n");
    else
        serve_metrics(ex, c, wi_http_method_is(&req, "HEAD"));
}

static void on_writable(struct conn *c)
{
    ssize_t n = send(c->fd, c->resp + c->sent, c->resp_len - c->sent, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_close(c);
        return;
    }
    c->sent += (size_t)n;
    c->active = wi_clock_s();
    if (c->sent < c->resp_len)
        return;
    /* Sent: half-close, then read until the client closes (closing with unread bytes would
     * reset the connection and could cut the response short), for at most one second. */
    (void)shutdown(c->fd, SHUT_WR);
    c->state = C_DRAIN;
    c->deadline = wi_clock_s() + 1.0;
}

static void on_drain(struct conn *c)
{
    char buf[512];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        conn_close(c);
}

/* When a full table must give a slot away: a connection whose response is all sent first
 * (C_DRAIN only waits for the client's close), else the one idle the longest - a head that
 * stopped coming, a response the client does not read. A scrape waiting for fresh gauges
 * counts as active: it is answered within WI_EXPORTER_WAIT_S. */
static double idle_since(const struct conn *c)
{
    return c->state == C_DRAIN ? -INFINITY : c->state == C_WAIT ? INFINITY : c->active;
}

static void accept_all(struct wi_exporter *ex, double now)
{
    for (;;) {
        struct conn *slot = NULL, *oldest = NULL;
        int fd = accept(ex->listen_fd, NULL, NULL), i;

        if (fd < 0)
            return; /* EAGAIN, or an error of one connection (ECONNABORTED, EMFILE): poll again */
        if (set_flags(fd) < 0) {
            close(fd);
            continue;
        }
        for (i = 0; i < WI_EXPORTER_MAX_CONNS && !slot; i++) {
            struct conn *c = &ex->conns[i];
            if (c->state == C_FREE)
                slot = c;
            else if (!oldest || idle_since(c) < idle_since(oldest))
                oldest = c;
        }
        if (!slot) { /* full: the idlest gives way (no client holds every slot, reading or not) */
            conn_close(oldest);
            slot = oldest;
        }
        slot->fd = fd;
        slot->state = C_READ;
        slot->got = 0;
        slot->deadline = now + WI_EXPORTER_READ_TIMEOUT_S;
        slot->active = now;
    }
}

static void *http_main(void *arg)
{
    struct wi_exporter *ex = arg;
    struct pollfd p[WI_EXPORTER_MAX_CONNS + 3];
    int idx[WI_EXPORTER_MAX_CONNS + 3];

    for (;;) {
        double now = wi_clock_s(), next = INFINITY;
        int n = 3, i, timeout, fresh = gauges_fresh(ex, now);
        char buf[64];

        p[0] = (struct pollfd){ex->stop_pipe[0], POLLIN, 0};
        p[1] = (struct pollfd){ex->listen_fd, POLLIN, 0};
        p[2] = (struct pollfd){ex->fresh_pipe[0], POLLIN, 0};
        for (i = 0; i < WI_EXPORTER_MAX_CONNS; i++) {
            struct conn *c = &ex->conns[i];
            if (c->state == C_WAIT && (fresh || c->deadline <= now))
                answer_metrics(ex, c, c->head_only); /* fresh, or left out at the deadline */
            if (c->state == C_FREE)
                continue;
            if (c->deadline <= now) {
                conn_close(c);
                continue;
            }
            if (c->deadline < next)
                next = c->deadline;
            idx[n] = i;
            p[n++] = (struct pollfd){c->fd, (short)(c->state == C_WRITE ? POLLOUT : c->state == C_WAIT ? 0 : POLLIN), 0};
        }
        timeout = next == INFINITY ? -1 : (int)((next - now) * 1000) + 1;
        if (poll(p, (nfds_t)n, timeout) < 0) {
            if (errno == EINTR)
                continue;
            log_warn("metrics_poll_failed", NULL);
            break;
        }
        if (p[0].revents)
            break;
        while (p[2].revents && read(ex->fresh_pipe[0], buf, sizeof buf) > 0)
            ;
        for (i = 3; i < n; i++) {
            struct conn *c = &ex->conns[idx[i]];
            if (!p[i].revents)
                continue;
            if (c->state == C_WAIT)
                conn_close(c); /* gone meanwhile (POLLHUP, POLLERR) */
            else if (c->state == C_READ)
                on_readable(ex, c);
            else if (c->state == C_WRITE)
                on_writable(c);
            else if (c->state == C_DRAIN)
                on_drain(c);
        }
        if (p[1].revents)
            accept_all(ex, wi_clock_s());
    }
    return NULL;
}

struct wi_exporter *wi_exporter_start(const char *listen_addr, const char *conninfo, const struct wi_dest_list *dests,
                                      struct wi_err *err)
{
    struct wi_exporter *ex = calloc(1, sizeof *ex);
    int i;

    if (!ex) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    ex->stop_pipe[0] = ex->stop_pipe[1] = ex->wake_pipe[0] = ex->wake_pipe[1] = ex->fresh_pipe[0] = ex->fresh_pipe[1] = -1;
    for (i = 0; i < WI_EXPORTER_MAX_CONNS; i++)
        ex->conns[i].fd = -1;
    ex->conninfo = conninfo;
    for (i = 0; dests && i < dests->n && ex->ndest_names < WI_METRICS_MAX_DESTS; i++)
        snprintf(ex->dest_names[ex->ndest_names++], sizeof ex->dest_names[0], "%s", dests->v[i].name);
    ex->read_at = wi_clock_s();
    ex->tried_at = -INFINITY; /* the first scrape waits for the first read */
    pthread_mutex_init(&ex->mu, NULL);
    if ((ex->listen_fd = bind_listener(listen_addr, err)) < 0)
        goto fail;
    if (make_pipe(ex->stop_pipe) < 0 || make_pipe(ex->wake_pipe) < 0 || make_pipe(ex->fresh_pipe) < 0) {
        wi_err_set(err, WI_ERR_IO, "pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&ex->stats_thread, NULL, stats_main, ex) != 0) {
        wi_err_set(err, WI_ERR_IO, "cannot start the metrics threads");
        goto fail;
    }
    ex->stats_started = 1;
    if (pthread_create(&ex->http_thread, NULL, http_main, ex) != 0) {
        wi_err_set(err, WI_ERR_IO, "cannot start the metrics threads");
        goto fail;
    }
    ex->http_started = 1;
    return ex;
fail:
    wi_exporter_stop(ex);
    return NULL;
}

void wi_exporter_stop(struct wi_exporter *ex)
{
    int i;

    if (!ex)
        return;
    if (ex->stop_pipe[1] >= 0)
        (void)!write(ex->stop_pipe[1], "s", 1);
    if (ex->http_started)
        pthread_join(ex->http_thread, NULL);
    if (ex->stats_started)
        pthread_join(ex->stats_thread, NULL);
    for (i = 0; i < WI_EXPORTER_MAX_CONNS; i++)
        conn_close(&ex->conns[i]);
    for (i = 0; i < 2; i++) {
        if (ex->stop_pipe[i] >= 0)
            close(ex->stop_pipe[i]);
        if (ex->wake_pipe[i] >= 0)
            close(ex->wake_pipe[i]);
        if (ex->fresh_pipe[i] >= 0)
            close(ex->fresh_pipe[i]);
    }
    if (ex->listen_fd >= 0)
        close(ex->listen_fd);
    pthread_mutex_destroy(&ex->mu);
    free(ex);
}
