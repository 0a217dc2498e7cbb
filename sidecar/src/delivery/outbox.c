/* outbox.c - the deliverer: lease due effects per destination, POST them concurrently (libcurl
 * multi, per-destination limit), save the answers under their leases (one statement for all
 * those collected together). Stats and requeue: outbox_admin.c. */
#define _POSIX_C_SOURCE 200809L
#include "core/clock.h"
#include "delivery/outbox.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "claim/retry.h"
#include "core/log.h"
#include "core/runtime.h"
#include "delivery/destination.h"
#include "delivery/http_client.h"
#include "hmac.h"
#include "observability/metrics.h"
#include "observability/otlp.h"
#include "pg/pgarray.h"
#include "pg/schema.h"

#define SCHEMA_RETRY_S 3.0
#define DONE_MAX 64                  /* answers held unsaved at most (the database away: more are dropped) */
#define BATCH_MAX 64                 /* answers saved by one statement at most */
#define BATCH_BODY_BYTES (256 * 1024) /* answer bytes per statement at most (the first one always goes) */
#define SAVE_RETRY_S 1.0             /* a failing save (connection up) is tried again this often */
#define SAVE_GATHER 64               /* answers gathered for one save while more are in flight... */
#define SAVE_DELAY_S 0.02            /* ...for this long at most */
#define LEASE_MARGIN_S 0.5           /* a queued effect starts only with its timeout + this left of its lease */
#define AHEAD_ROUNDS 5               /* claimed ahead: this many rounds of `concurrency` beyond the slots, */
#define AHEAD_MAX 256                /* but at most this many effects (their payloads are held) */

static const struct wi_pg_stmt stmts[] = {
    {"wi_outbox_listen", "LISTEN webhook_inbox_outbox"},
    {"wi_outbox_claim", "SELECT operation_id, payload, attempts, trace_context"
                        " FROM webhook_inbox_outbox_claim($1, $2, $3, $4, $5)"},
    {"wi_outbox_save_batch", "SELECT operation_id, new_status, new_attempts, retry_in_ms"
                             " FROM webhook_inbox_outbox_save_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"},
    /* The deliverer's commits (claims, saves) do not wait for the WAL flush; see connect_deliverer. */
    {"wi_outbox_async_commit", "SET synchronous_commit = off"},
    {"wi_outbox_next_due", "SELECT webhook_inbox_outbox_next_due($1::text[])"},
};

/* A claimed effect waiting for a free slot (claimed ahead). */
struct queued {
    struct delivery *dl;
    char *payload;             /* owned */
    size_t len;
    double lease_end;          /* monotonic seconds; from before the claim was sent (early, never late) */
};

/* Per destination, derived once from the configuration at start. Invariants:
 * in_flight <= limit; in_flight + nqueued <= limit + ahead() <= qcap = limit + ahead_max at a
 * claim;
 * q[(qhead + k) % qcap] for k < nqueued are the queued effects, oldest claim first. */
struct dstate {
    const struct wi_dest *d;
    int limit;                 /* deliveries in flight at most */
    int in_flight;
    int maybe_due;             /* a claim may find something: a NOTIFY, a freed slot, a timer */
    struct queued *q;          /* qcap entries: claimed, waiting for a slot */
    int qcap, qhead, nqueued;
    int ahead_max;             /* min(AHEAD_ROUNDS * limit, AHEAD_MAX) */
    double latency;            /* recent answers' latency in s (max, decaying): gates claiming ahead */
    long timeout_ms, connect_ms, lease_ms;
    char *auth;                /* "Authorization: Bearer ..." or NULL; wiped on free */
    struct wi_hmac_key *key;   /* Standard Webhooks signing key, or NULL */
};

/* One delivery in flight: the transfer's user pointer. */
struct delivery {
    int dest;
    int attempts;              /* including this one */
    char *operation_id;
    double started;            /* monotonic seconds */
    double finished;           /* monotonic seconds, when the answer was collected */
    int traced;                /* --otlp-endpoint and the effect has a trace context: span and traceparent */
    struct wi_traceparent span;   /* traced: this delivery's span (the receipt's trace, its own id) */
    unsigned char parent_id[8];   /* traced: the receipt span's id (the effect's stored context) */
    long long start_ns;           /* traced: Unix ns when the POST started */
};

struct wi_outbox {
    struct wi_runtime *rt;
    pthread_t thread;
    struct dstate *ds;
    int nds;
    char owner[40];            /* lease owner: random, per process */
    char due_array[4096];      /* '{name,...}' for next_due */
    struct wi_http *http;
    struct wi_pg *pg;
    struct wi_pgarray arr[6];  /* the batched save's per-delivery arguments, buffers reused */
};

/* The configuration a loop iteration works with (read under rt->lock). */
struct knobs {
    int max_attempts, log_events;
    long long base_ms, cap_ms;
};

static atomic_long n_delivered, n_retry, n_quarantined, n_lease_lost;

void wi_outbox_text_sanitize(char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len, k;
        uint32_t cp;
        if (c == 0) {
            s[i++] = '?';
            continue;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            s[i++] = '?';
            continue;
        }
        for (k = 1; k < len && i + k < n && ((unsigned char)s[i + k] & 0xC0) == 0x80; k++)
            cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
        if (k != len || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            s[i++] = '?'; /* the bytes after it are judged on their own */
            continue;
        }
        i += len;
    }
}

/* "v1,<base64 HMAC-SHA256(key, id.ts.body)>" into out (at least 64 bytes). id is the
 * webhook-id "<destination path> <operation id>": every destination of an app may share one
 * secret, so the signed content names the endpoint and an effect captured on its way to one
 * cannot be replayed to another (a URL path holds no space: wi_dest_parse refuses it). */
static int sign(const struct dstate *ds, const char *id, const char *ts, const char *body, size_t len, char *out,
                struct wi_err *err)
{
    unsigned char mac[WI_HMAC_MAX];
    struct wi_slice parts[5] = {{id, strlen(id)}, {".", 1}, {ts, strlen(ts)}, {".", 1}, {body, len}};
    int n = wi_hmac_compute(ds->key, parts, 5, mac, err);

    if (n < 0)
        return -1;
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac, n);
    return 0;
}

/* Starts one claimed effect's POST; takes ownership of dl. Returns 0, or -1 (dl freed). */
static int start(struct wi_outbox *o, struct delivery *dl, const char *payload, size_t len)
{
    struct dstate *ds = &o->ds[dl->dest];
    char idem[240], *wid = NULL, wts[48], wsig[128] = "webhook-signature: ";
    char tp[sizeof "traceparent: " + WI_TRACEPARENT_LEN] = "traceparent: ";
    const char *headers[6];
    int nh = 0;
    struct wi_http_req req;
    struct wi_err err;

    snprintf(idem, sizeof idem, "Idempotency-Key: %s", dl->operation_id);
    headers[nh++] = idem;
    if (ds->auth)
        headers[nh++] = ds->auth;
    if (ds->key) {
        char ts[24];
        size_t plen, n;
        const char *path = wi_dest_path(ds->d->url, &plen);
        snprintf(ts, sizeof ts, "%lld", (long long)time(NULL));
        n = sizeof "webhook-id: " + plen + 1 + strlen(dl->operation_id);
        if (!(wid = malloc(n))) {
            wi_err_set(&err, WI_ERR_NOMEM, "out of memory");
            goto fail;
        }
        snprintf(wid, n, "webhook-id: %.*s %s", (int)plen, path, dl->operation_id);
        snprintf(wts, sizeof wts, "webhook-timestamp: %s", ts);
        if (sign(ds, wid + strlen("webhook-id: "), ts, payload, len, wsig + strlen(wsig), &err) < 0)
            goto fail;
        headers[nh++] = wid;
        headers[nh++] = wts;
        headers[nh++] = wsig;
    }
    if (dl->traced) { /* the delivery span's context: the destination's spans join the trace */
        wi_traceparent_format(&dl->span, tp + strlen("traceparent: "));
        headers[nh++] = tp;
        dl->start_ns = wi_otlp_now_ns();
    }
    memset(&req, 0, sizeof req);
    req.url = ds->d->url;
    req.body = payload;
    req.body_len = len;
    req.headers = headers;
    req.nheaders = nh;
    req.connect_timeout_ms = ds->connect_ms;
    req.timeout_ms = ds->timeout_ms;
    req.user = dl;
    if (wi_http_start(o->http, &req, &err) < 0) /* copies the headers */
        goto fail;
    free(wid);
    dl->started = wi_clock_s();
    ds->in_flight++;
    return 0;
fail: {
    char id[160];
    free(wid);
    log_warnx("effect_start_failed", "operation_id=%s destination=%s error=%s",
              wi_log_quote(id, sizeof id, dl->operation_id, 120), ds->d->name, WI_LOG_Q(err.msg));
    free(dl->operation_id);
    free(dl);
    return -1; /* the lease expires and the effect is claimed again */
}
}

/* How many effects destination i may hold beyond its slots (claimed, queued): ahead_max, up
 * to five rounds. The next claim is sent while the slots are busy, so a freed slot starts the
 * next POST at once instead of after a save and a claim, and claims come in batches of about
 * four rounds (a claim costs about as much for one effect as for ten). Only while answers come
 * well within the lease: a queued effect waits for a slot (up to five answers' latency) and
 * must still have its timeout left of its lease when it starts, or it is dropped (its attempt
 * spent). */
static int ahead(const struct dstate *ds)
{
    double slack = (double)(ds->lease_ms - ds->timeout_ms) / 1000 - LEASE_MARGIN_S;
    return slack >= (AHEAD_ROUNDS + 2) * ds->latency ? ds->ahead_max : 0;
}

/* Starts queued effects of destination i while it has free slots. An effect whose lease
 * ends before its timeout would is not started (another sidecar could claim it during the
 * call): logged and dropped, it is claimed again after its lease. */
static void start_queued(struct wi_outbox *o, int i)
{
    struct dstate *ds = &o->ds[i];
    double now = wi_clock_s();

    while (ds->nqueued > 0 && ds->in_flight < ds->limit) {
        struct queued *qe = &ds->q[ds->qhead];
        ds->qhead = (ds->qhead + 1) % ds->qcap;
        ds->nqueued--;
        if (qe->lease_end - now < (double)ds->timeout_ms / 1000 + LEASE_MARGIN_S) {
            char id[160];
            log_warnx("effect_lease_expiring", "operation_id=%s destination=%s lease_left_s=%.1f note=\"not started: "
                      "its lease would end during the call; claimed again after it\"",
                      wi_log_quote(id, sizeof id, qe->dl->operation_id, 120), ds->d->name, qe->lease_end - now);
            free(qe->dl->operation_id);
            free(qe->dl);
        } else {
            (void)start(o, qe->dl, qe->payload, qe->len);
        }
        free(qe->payload);
        qe->dl = NULL;
        qe->payload = NULL;
    }
}

/* Room for more claimed effects at destination i: free slots plus ahead() minus the queue. */
static int room(const struct dstate *ds)
{
    return ds->limit + ahead(ds) - ds->in_flight - ds->nqueued;
}

/* Whether destination i is claimed from now: it may have effects due, and room for all but a
 * round of ahead_max (claiming ahead: a round is still queued) or for one effect. */
static int claimable(const struct dstate *ds)
{
    int a = ahead(ds);
    return ds->maybe_due && room(ds) >= (a - ds->limit > 1 ? a - ds->limit : 1);
}

/* Makes dl a traced delivery, the child of the stored context tc[0..len) (left untraced when
 * tc is not a valid one). */
static void trace_delivery(struct delivery *dl, const char *tc, size_t len)
{
    struct wi_traceparent parent;

    if (wi_traceparent_parse(tc, len, &parent) < 0 || wi_traceparent_child(&parent, &dl->span) < 0)
        return;
    memcpy(dl->parent_id, parent.span_id, sizeof dl->parent_id);
    dl->traced = 1;
}

/* The webhook_inbox.effect span of a traced delivery whose answer was judged: outcome is
 * what the save made of it (delivered, retry, quarantined, lease_lost). */
static void effect_span(const struct wi_outbox *o, const struct delivery *dl, const struct wi_http_res *res,
                        const char *outcome)
{
    struct wi_span s;

    if (!dl->traced)
        return;
    memset(&s, 0, sizeof s);
    s.name = "webhook_inbox.effect";
    s.kind = WI_SPAN_CLIENT;
    s.ctx = dl->span;
    memcpy(s.parent_id, dl->parent_id, sizeof s.parent_id);
    s.start_ns = dl->start_ns;
    s.end_ns = dl->start_ns + (long long)((dl->finished - dl->started) * 1e9);
    s.error = strcmp(outcome, "delivered") != 0;
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.destination", o->ds[dl->dest].d->name, 0};
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.operation_id", dl->operation_id, 0};
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.result", outcome, 0};
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.attempt", NULL, dl->attempts};
    if (res->status)
        s.attrs[s.nattrs++] = (struct wi_span_attr){"http.response.status_code", NULL, res->status};
    wi_otlp_add(&s);
}

/* Claims up to room() effects of destination i, queues them and starts what the free slots
 * take. Returns how many were claimed, or -1 when the statement failed (*err). */
static int claim(struct wi_outbox *o, int i, int max_attempts, struct wi_err *err)
{
    struct dstate *ds = &o->ds[i];
    char limit[16], lease[24], maxa[16];
    const char *params[5] = {ds->d->name, limit, o->owner, lease, maxa};
    PGresult *res;
    int want = room(ds), n, r;
    double lease_end = wi_clock_s() + (double)ds->lease_ms / 1000;

    if (want <= 0) /* so the queue (qcap) never overflows */
        return 0;
    snprintf(limit, sizeof limit, "%d", want);
    snprintf(lease, sizeof lease, "%ld", ds->lease_ms);
    snprintf(maxa, sizeof maxa, "%d", max_attempts);
    if (!(res = wi_pg_exec(o->pg, "wi_outbox_claim", 5, params, PGRES_TUPLES_OK, err)))
        return -1;
    n = PQntuples(res);
    for (r = 0; r < n; r++) {
        struct delivery *dl = calloc(1, sizeof *dl);
        struct queued *qe = &ds->q[(ds->qhead + ds->nqueued) % ds->qcap];
        size_t len = (size_t)PQgetlength(res, r, 1);

        if (!dl || !(dl->operation_id = strdup(PQgetvalue(res, r, 0))) || !(qe->payload = malloc(len + 1))) {
            if (dl)
                free(dl->operation_id);
            free(dl);
            log_warnx("out_of_memory", "note=\"the effect's lease will expire\"");
            continue;
        }
        memcpy(qe->payload, PQgetvalue(res, r, 1), len + 1);
        qe->len = len;
        qe->dl = dl;
        qe->lease_end = lease_end;
        dl->dest = i;
        dl->attempts = atoi(PQgetvalue(res, r, 2));
        if (wi_otlp_on() && !PQgetisnull(res, r, 3))
            trace_delivery(dl, PQgetvalue(res, r, 3), (size_t)PQgetlength(res, r, 3));
        ds->nqueued++;
    }
    PQclear(res);
    ds->maybe_due = n >= want; /* a full claim may have left more behind */
    start_queued(o, i);
    return n;
}

/* One finished delivery's answer to the save's arguments and the log. */
struct verdict {
    const char *result;  /* delivered | retry | quarantine */
    char error[200];
};

static void judge(const struct wi_http_res *res, const struct dstate *ds, struct verdict *v)
{
    long st = res->status;
    v->error[0] = '\0';
    if (st == 0) {
        v->result = "retry";
        if (res->timed_out)
            snprintf(v->error, sizeof v->error, "timeout after %.3gs (%s)", (double)ds->timeout_ms / 1000, res->error);
        else
            snprintf(v->error, sizeof v->error, "no answer: %s", res->error);
    } else if (st >= 200 && st <= 299) {
        v->result = "delivered";
    } else if (st == 408 || st == 429 || st >= 500) {
        v->result = "retry";
        snprintf(v->error, sizeof v->error, "HTTP %ld (retried)", st);
    } else {
        v->result = "quarantine";
        snprintf(v->error, sizeof v->error, "HTTP %ld (not retried: the destination refused the effect)", st);
    }
}

static void release(struct wi_http_res *res)
{
    struct delivery *dl = res->user;
    wi_http_res_free(res);
    free(dl->operation_id);
    free(dl);
}

/* Saves the first answers of done[0..n) - at most BATCH_MAX of them and BATCH_BODY_BYTES of
 * bodies - with one statement (webhook_inbox_outbox_save_batch: one commit for the lot), then
 * counts and logs each. Returns how many were saved (those whose lease was lost included:
 * logged), or -1 when the statement failed (*err): nothing was saved, done is unchanged. */
static int save_batch(struct wi_outbox *o, struct wi_http_res *done, int n, const struct knobs *k, struct wi_err *err)
{
    struct verdict v[BATCH_MAX];
    int row_of[BATCH_MAX];
    char maxa[16], base[24], cap[24];
    const char *params[10];
    size_t bytes = 0;
    PGresult *r;
    int m, i, j;

    for (i = 0; i < 6; i++)
        wi_pgarray_reset(&o->arr[i], 64 * 1024);
    for (m = 0; m < n && m < BATCH_MAX; m++) {
        struct wi_http_res *res = &done[m];
        struct delivery *dl = res->user;
        char status[16], retry_after[24];

        if (m > 0 && bytes + res->body_len > BATCH_BODY_BYTES)
            break;
        bytes += res->body_len;
        judge(res, &o->ds[dl->dest], &v[m]);
        snprintf(status, sizeof status, "%ld", res->status);
        snprintf(retry_after, sizeof retry_after, "%lld", res->retry_after_ms);
        if (res->body)
            wi_outbox_text_sanitize(res->body, res->body_len); /* idempotent: a retried save repeats it */
        (void)wi_pgarray_add_str(&o->arr[0], dl->operation_id);
        (void)wi_pgarray_add_str(&o->arr[1], v[m].result);
        (void)wi_pgarray_add_str(&o->arr[2], v[m].error[0] ? v[m].error : NULL);
        (void)wi_pgarray_add_str(&o->arr[3], res->status ? status : NULL);
        (void)wi_pgarray_add(&o->arr[4], res->body, res->body_len);
        (void)wi_pgarray_add_str(&o->arr[5], res->retry_after_ms >= 0 ? retry_after : NULL);
    }
    snprintf(maxa, sizeof maxa, "%d", k->max_attempts);
    snprintf(base, sizeof base, "%lld", k->base_ms);
    snprintf(cap, sizeof cap, "%lld", k->cap_ms);
    params[0] = o->owner;
    for (i = 0; i < 6; i++)
        if (!(params[1 + i] = wi_pgarray_end(&o->arr[i])))
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    params[7] = maxa;
    params[8] = base;
    params[9] = cap;
    if (!(r = wi_pg_exec(o->pg, "wi_outbox_save_batch", 10, params, PGRES_TUPLES_OK, err)))
        return -1;
    /* Rows come in operation id order: match each to its delivery (the same id twice: in turn). */
    for (i = 0; i < m; i++)
        row_of[i] = -1;
    for (j = 0; j < PQntuples(r); j++)
        for (i = 0; i < m; i++)
            if (row_of[i] < 0 && !strcmp(PQgetvalue(r, j, 0), ((struct delivery *)done[i].user)->operation_id)) {
                row_of[i] = j;
                break;
            }
    for (i = 0; i < m; i++) {
        struct wi_http_res *res = &done[i];
        struct delivery *dl = res->user;
        const char *dname = o->ds[dl->dest].d->name, *st;
        char id[160];

        j = row_of[i];
        wi_log_quote(id, sizeof id, dl->operation_id, 120);
        if (j < 0 || PQgetisnull(r, j, 1)) {
            atomic_fetch_add(&n_lease_lost, 1);
            wi_metrics_effect(dname, WI_M_EF_LEASE_LOST);
            log_warnx("effect_lease_lost", "operation_id=%s destination=%s note=\"another sidecar owns it now; this "
                      "answer is not saved\"", id, dname);
            effect_span(o, dl, res, "lease_lost");
            continue;
        }
        st = PQgetvalue(r, j, 1);
        if (!strcmp(st, "delivered")) {
            atomic_fetch_add(&n_delivered, 1);
            wi_metrics_effect(dname, WI_M_EF_DELIVERED);
        } else if (!strcmp(st, "quarantined")) {
            atomic_fetch_add(&n_quarantined, 1);
            wi_metrics_effect(dname, WI_M_EF_QUARANTINED);
        } else {
            atomic_fetch_add(&n_retry, 1);
            wi_metrics_effect(dname, WI_M_EF_RETRY);
        }
        if (k->log_events || strcmp(st, "delivered"))
            log_info("effect", "operation_id=%s destination=%s outcome=%s status=%ld attempts=%s latency_ms=%.1f%s%s "
                     "error=%s", id, dname, st, res->status, PQgetvalue(r, j, 2), (dl->finished - dl->started) * 1000,
                     PQgetisnull(r, j, 3) ? "" : " retry_in_ms=", PQgetisnull(r, j, 3) ? "" : PQgetvalue(r, j, 3),
                     WI_LOG_Q(v[i].error[0] ? v[i].error : "-"));
        effect_span(o, dl, res, st);
    }
    PQclear(r);
    return m;
}

/* Saves done[0..*n) in batches, releasing and removing what was saved. Returns 0 when all
 * is saved, or -1 when a statement failed (*err; the rest stays in done, in order). */
static int flush(struct wi_outbox *o, struct wi_http_res *done, int *n, const struct knobs *k, struct wi_err *err)
{
    while (*n > 0) {
        int m = save_batch(o, done, *n, k, err), i;
        if (m < 0)
            return -1;
        for (i = 0; i < m; i++)
            release(&done[i]);
        memmove(done, done + m, (size_t)(*n - m) * sizeof *done);
        *n -= m;
    }
    return 0;
}

static struct wi_pg *connect_deliverer(struct wi_outbox *o, int *refused, struct wi_err *err)
{
    struct wi_schema found;
    struct wi_pg *pg;
    int rc;

    *refused = 0;
    if (!(pg = wi_pg_connect(o->rt->cfg.database_url, wi_schema_stmts, wi_schema_stmts_count, err)))
        return NULL;
    if ((rc = wi_schema_check(pg, &found, err)) != WI_SCHEMA_OK) {
        if (rc > 0) {
            *refused = 1;
            wi_err_set(err, WI_ERR_ARG, "%s", wi_schema_problem(rc));
        }
        wi_pg_free(pg);
        return NULL;
    }
    /* synchronous_commit = off for this session only: a claim's or a save's COMMIT returns
     * before its WAL is flushed (the WAL writer flushes it within 3 x wal_writer_delay, 600 ms
     * by default), so the deliverer waits for no fsync per statement. Safe because what a
     * PostgreSQL crash can lose this way (only that: a sidecar or connection failure loses no
     * acknowledged commit) is what the design already recovers from. A lost save leaves the
     * effect pending under its lease: after the lease it is delivered again with the same
     * Idempotency-Key, exactly as after a sidecar killed between the answer and its save (the
     * destination's idempotency makes it one effect). A lost claim leaves the effect unleased
     * and its attempt uncounted: the save of that delivery finds no lease (logged), the effect
     * is delivered again with the same key, and its attempt count can be one lower than the
     * deliveries made (one more delivery than --max-attempts is possible). A quarantine by a
     * lost claim is redone by the next claim. Nothing else depends on these rows being durable;
     * the workers' transactions keep the server's synchronous_commit. */
    if (wi_pg_prepare(pg, stmts, (int)(sizeof stmts / sizeof stmts[0]), err) < 0 ||
        wi_pg_cmd(pg, "wi_outbox_async_commit", 0, NULL, err) < 0 ||
        wi_pg_cmd(pg, "wi_outbox_listen", 0, NULL, err) < 0) {
        wi_pg_free(pg);
        return NULL;
    }
    return pg;
}

/* Seconds until the next effect may be due (poll_interval when none is pending). */
static double next_due(struct wi_outbox *o, double poll_interval)
{
    const char *params[1] = {o->due_array};
    struct wi_err err;
    PGresult *r = wi_pg_exec(o->pg, "wi_outbox_next_due", 1, params, PGRES_TUPLES_OK, &err);
    double due = poll_interval;

    if (r && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        due = atof(PQgetvalue(r, 0, 0));
    PQclear(r);
    if (due > poll_interval)
        due = poll_interval;
    return due < 0 ? 0 : due;
}

/* The answers collected, then saved together. On a failure with the connection up they
 * stay (logged once, tried again every SAVE_RETRY_S); with the connection down they wait for
 * the reconnect. */
static void save_done(struct wi_outbox *o, struct wi_http_res *done, int *ndone, int *failing,
                      const struct knobs *k)
{
    struct wi_err err;
    int i;

    if (!o->pg || *ndone == 0)
        return;
    if (flush(o, done, ndone, k, &err) == 0) {
        *failing = 0;
        return;
    }
    if (!wi_pg_ok(o->pg)) {
        log_warnx("outbox_connection_lost", "in=save unsaved=%d", *ndone);
        wi_pg_free(o->pg);
        o->pg = NULL;
        return;
    }
    if (!*failing)
        for (i = 0; i < *ndone; i++) {
            char id[160];
            log_warnx("effect_save_failed", "operation_id=%s error=%s note=\"kept; saved again shortly\"",
                      wi_log_quote(id, sizeof id, ((struct delivery *)done[i].user)->operation_id, 120),
                      WI_LOG_Q(err.msg));
        }
    *failing = 1;
}

/* Whether the answers gathered are saved now rather than with the next ones: a save costs
 * about as much for one answer as for ten. Now when there are SAVE_GATHER, when the oldest
 * waited SAVE_DELAY_S, or when no answer is coming (nothing in flight) or stopping. A gathered
 * answer is only at risk like one in flight: lost with the process, redelivered with the same
 * Idempotency-Key after its lease. */
static int save_now(int ndone, double done_since, int in_flight, int stopping)
{
    return ndone > 0 && (ndone >= SAVE_GATHER || in_flight == 0 || stopping || wi_clock_s() - done_since >= SAVE_DELAY_S);
}

/* Reads what arrived without waiting, moves the finished deliveries to done (a full done is
 * saved first; with the database away, more are dropped), fills the freed slots from the
 * queues and sends those requests, so the destination works on them during the next save or
 * claim. *since: when done[0] was collected. */
static void gather(struct wi_outbox *o, struct wi_http_res *done, int *ndone, double *since, int *failing,
                   const struct knobs *k)
{
    struct wi_http_res res;
    struct wi_err err;
    int i;

    if (wi_http_perform(o->http, &err) < 0)
        log_warnx("outbox_wait_failed", "error=%s", WI_LOG_Q(err.msg));
    while (wi_http_next(o->http, &res)) {
        struct delivery *dl = res.user;
        struct dstate *ds = &o->ds[dl->dest];
        double took;

        dl->finished = wi_clock_s();
        took = dl->finished - dl->started;
        ds->in_flight--;
        ds->maybe_due = 1; /* a slot is free */
        ds->latency = took > ds->latency * 0.9 ? took : ds->latency * 0.9;
        if (*ndone == DONE_MAX && !*failing)
            save_done(o, done, ndone, failing, k);
        if (*ndone < DONE_MAX) {
            if (*ndone == 0)
                *since = dl->finished;
            done[(*ndone)++] = res;
        } else { /* bounded: its lease expires and the delivery is repeated with the same key */
            char id[160];
            log_warnx("effect_unsaved", "operation_id=%s note=\"dropped while the database is away; redelivered "
                      "with the same Idempotency-Key after its lease\"", wi_log_quote(id, sizeof id, dl->operation_id, 120));
            release(&res);
        }
    }
    for (i = 0; i < o->nds; i++)
        start_queued(o, i);
    if (wi_http_perform(o->http, &err) < 0)
        log_warnx("outbox_wait_failed", "error=%s", WI_LOG_Q(err.msg));
}

static void *deliverer_main(void *arg)
{
    struct wi_outbox *o = arg;
    struct wi_runtime *rt = o->rt;
    /* Finished, not yet saved: the answers collected in this iteration, and those waiting
     * for the connection (it was down, or a save failed). */
    struct wi_http_res done[DONE_MAX];
    int ndone = 0, save_failing = 0, i, in_flight = 0, nqueued = 0, refused_logged = 0;
    double reconnect_delay = WI_RECONNECT_MIN_S, due_at = 0, done_since = 0; /* when done[0] was collected */
    uint64_t rng = (uint64_t)time(NULL) ^ (uint64_t)getpid() ^ 0x5DEECE66Dull;

    log_info("outbox_starting", "destinations=%d owner=%s", o->nds, o->owner);
    for (;;) {
        int claimed = 0;
        struct knobs k;
        double poll_interval, timeout;
        struct pollfd extra[2];
        struct wi_err err;
        int stopping = atomic_load(&rt->stopping);

        pthread_mutex_lock(&rt->lock);
        k.max_attempts = rt->cfg.max_attempts;
        k.base_ms = llround(rt->cfg.backoff_base * 1000);
        k.cap_ms = llround(rt->cfg.backoff_cap * 1000);
        k.log_events = rt->cfg.log_events;
        poll_interval = rt->cfg.poll_interval;
        pthread_mutex_unlock(&rt->lock);

        in_flight = wi_http_in_flight(o->http);
        nqueued = 0;
        for (i = 0; i < o->nds; i++)
            nqueued += o->ds[i].nqueued;
        /* Stopping: no new claims; what is claimed is delivered (queued effects as slots free). */
        if (stopping && in_flight == 0 && nqueued == 0 && (ndone == 0 || !o->pg))
            break;

        if (!o->pg) {
            int refused;
            double nap;
            if ((o->pg = connect_deliverer(o, &refused, &err)) == NULL) {
                if (refused && !refused_logged) /* the workers log the fix; once here */
                    log_warnx("outbox_waiting_for_schema", "note=\"no deliveries until the schema is v%d\"",
                              WI_SCHEMA_VERSION);
                refused_logged |= refused;
                if (!refused)
                    log_warnx("outbox_connect_failed", "retry_in_s=%.1f error=%s", reconnect_delay, WI_LOG_Q(err.msg));
                if (rt->cfg.once && !refused) {
                    atomic_store(&rt->failed, 1);
                    break;
                }
                if (rt->cfg.once)
                    break;
                nap = wi_retry_backoff(&reconnect_delay, &rng);
                if (in_flight == 0)
                    wi_runtime_nap(rt, refused ? SCHEMA_RETRY_S : nap);
                else
                    (void)wi_http_wait(o->http, NULL, 0, 200, &err);
                goto collect;
            }
            refused_logged = 0;
            save_failing = 0;
            for (i = 0; i < o->nds; i++)
                o->ds[i].maybe_due = 1;
            log_info("outbox_connected", "owner=%s", o->owner);
        }

        /* Answers kept while the connection was down or after a failed save, or gathered. */
        if (save_failing || save_now(ndone, done_since, in_flight, stopping))
            save_done(o, done, &ndone, &save_failing, &k);
        if (!o->pg)
            goto collect;

        if (!stopping && !save_failing) {
            if (wi_clock_s() >= due_at)
                for (i = 0; i < o->nds; i++)
                    o->ds[i].maybe_due = 1;
            for (i = 0; i < o->nds; i++) {
                int n;
                if (!claimable(&o->ds[i]))
                    continue;
                if ((n = claim(o, i, k.max_attempts, &err)) < 0) {
                    log_warnx("outbox_claim_failed", "destination=%s error=%s", o->ds[i].d->name, WI_LOG_Q(err.msg));
                    if (!wi_pg_ok(o->pg))
                        goto lost;
                    o->ds[i].maybe_due = 0;
                    continue;
                }
                claimed += n;
            }
            reconnect_delay = WI_RECONNECT_MIN_S;
        }
        in_flight = wi_http_in_flight(o->http);
        if (rt->cfg.once && claimed == 0 && in_flight == 0 && nqueued == 0 && ndone == 0 &&
            atomic_load(&rt->alive) <= 1)
            break;

        /* Wait for answers, a NOTIFY, the next due effect or a stop. A destination that may
         * have more due and has room is claimed from at once; one that has no room waits for
         * an answer (which wakes this wait); one that had nothing due needs the timer. */
        timeout = poll_interval;
        for (i = 0; i < o->nds && !stopping; i++) {
            if (claimable(&o->ds[i]))
                timeout = 0;
            else if (!o->ds[i].maybe_due && timeout > 0)
                timeout = -1;
        }
        if (save_failing) { /* no claims; try again shortly */
            timeout = SAVE_RETRY_S;
        } else if (timeout < 0) {
            double due = next_due(o, rt->cfg.once ? 0.05 : poll_interval);
            due_at = wi_clock_s() + due;
            timeout = due;
        }
        if (ndone > 0 && !save_failing && timeout > done_since + SAVE_DELAY_S - wi_clock_s())
            timeout = done_since + SAVE_DELAY_S - wi_clock_s() > 0 ? done_since + SAVE_DELAY_S - wi_clock_s() : 0;
        extra[0].fd = wi_pg_socket(o->pg);
        extra[1].fd = rt->stop_fd;
        extra[0].events = extra[1].events = POLLIN;
        extra[0].revents = extra[1].revents = 0;
        if (wi_http_wait(o->http, extra, stopping ? 0 : 2, (int)(timeout * 1000), &err) < 0) {
            log_warnx("outbox_wait_failed", "error=%s", WI_LOG_Q(err.msg));
            wi_runtime_nap(rt, 0.1);
        }
        if (extra[0].revents) {
            int got = wi_pg_drain_notifies(o->pg);
            if (got < 0)
                goto lost;
            if (got > 0)
                for (i = 0; i < o->nds; i++)
                    o->ds[i].maybe_due = 1;
        }
        goto collect;
    lost:
        log_warnx("outbox_connection_lost", "in_flight=%d unsaved=%d", wi_http_in_flight(o->http), ndone);
        wi_pg_free(o->pg);
        o->pg = NULL;
    collect:
        gather(o, done, &ndone, &done_since, &save_failing, &k);
        if (!save_failing && save_now(ndone, done_since, wi_http_in_flight(o->http), stopping)) {
            save_done(o, done, &ndone, &save_failing, &k);
            /* The slots freed during the save take queued effects now, not after the claim. */
            gather(o, done, &ndone, &done_since, &save_failing, &k);
        }
    }
    for (i = 0; i < ndone; i++)
        release(&done[i]);
    if (ndone)
        log_warnx("outbox_unsaved_at_exit", "effects=%d note=\"redelivered with the same Idempotency-Key after their "
                  "lease\"", ndone);
    log_info("outbox_exit", "delivered=%ld retry=%ld quarantined=%ld lease_lost=%ld", atomic_load(&n_delivered),
             atomic_load(&n_retry), atomic_load(&n_quarantined), atomic_load(&n_lease_lost));
    atomic_fetch_sub(&rt->alive, 1);
    (void)!write(rt->wake_fd, "o", 1);
    return NULL;
}

static void outbox_free(struct wi_outbox *o)
{
    int i;
    if (!o)
        return;
    for (i = 0; o->ds && i < o->nds; i++) {
        struct dstate *ds = &o->ds[i];
        for (; ds->q && ds->nqueued > 0; ds->nqueued--) { /* claimed, never started: their leases expire */
            struct queued *qe = &ds->q[ds->qhead];
            ds->qhead = (ds->qhead + 1) % ds->qcap;
            free(qe->payload);
            free(qe->dl->operation_id);
            free(qe->dl);
        }
        free(ds->q);
        if (o->ds[i].auth) {
            volatile char *p = o->ds[i].auth;
            while (*p)
                *p++ = '\0';
            free(o->ds[i].auth);
        }
        wi_hmac_key_free(o->ds[i].key);
    }
    free(o->ds);
    for (i = 0; i < 6; i++)
        wi_pgarray_free(&o->arr[i]);
    wi_http_free(o->http);
    wi_pg_free(o->pg);
    free(o);
}

/* Per-destination state from the configuration: limits, timeouts, lease, credentials. */
static int setup(struct wi_outbox *o, struct wi_err *err)
{
    const struct wi_config *cfg = &o->rt->cfg;
    unsigned char rnd[16];
    size_t used = 1;
    int i;

    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return wi_err_set(err, WI_ERR_CRYPTO, "no random bytes for the lease owner");
    wi_hex_encode(rnd, sizeof rnd, o->owner);
    if (!(o->ds = calloc((size_t)cfg->destinations.n, sizeof *o->ds)))
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    o->nds = cfg->destinations.n;
    o->due_array[0] = '{';
    for (i = 0; i < o->nds; i++) {
        struct dstate *ds = &o->ds[i];
        const struct wi_dest *d = &cfg->destinations.v[i];
        double timeout = d->timeout > 0 ? d->timeout : cfg->destination_timeout;
        double lease = cfg->destination_lease > timeout + 1 ? cfg->destination_lease : timeout + 1;
        ds->d = d;
        wi_metrics_effect_destination(d->name);
        ds->limit = d->concurrency > 0 ? d->concurrency : cfg->destination_concurrency;
        ds->timeout_ms = (long)llround(timeout * 1000);
        ds->connect_ms = (long)llround((d->connect_timeout > 0 ? d->connect_timeout : cfg->destination_connect_timeout) * 1000);
        ds->lease_ms = (long)llround(lease * 1000);
        ds->maybe_due = 1;
        ds->latency = timeout; /* unknown: as slow as allowed, no claiming ahead until answers show otherwise */
        ds->ahead_max = ds->limit <= AHEAD_MAX / AHEAD_ROUNDS ? AHEAD_ROUNDS * ds->limit : AHEAD_MAX;
        ds->qcap = ds->limit + ds->ahead_max;
        if (!(ds->q = calloc((size_t)ds->qcap, sizeof *ds->q)))
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        if (d->token) {
            size_t n = strlen(d->token) + sizeof "Authorization: Bearer ";
            if (!(ds->auth = malloc(n)))
                return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            snprintf(ds->auth, n, "Authorization: Bearer %s", d->token);
        }
        if (d->sign == WI_DEST_SIGN_STANDARD_WEBHOOKS) {
            unsigned char key[256];
            long kl = wi_b64_decode(d->secret + 6, strlen(d->secret) - 6, key, sizeof key);
            ds->key = kl > 0 ? wi_hmac_key_new(WI_HMAC_SHA256, key, (size_t)kl, err) : NULL;
            memset(key, 0, sizeof key);
            if (!ds->key)
                return kl > 0 ? -1 : wi_err_set(err, WI_ERR_ARG, "destination %s: bad signing secret", d->name);
        }
        used += (size_t)snprintf(o->due_array + used, sizeof o->due_array - used, "%s%s", i ? "," : "", d->name);
        if (used >= sizeof o->due_array - 2)
            return wi_err_set(err, WI_ERR_ARG, "too many destinations");
    }
    o->due_array[used] = '}';
    o->due_array[used + 1] = '\0';
    if (!(o->http = wi_http_new(err)))
        return -1;
    return 0;
}

struct wi_outbox *wi_outbox_start(struct wi_runtime *rt)
{
    struct wi_outbox *o;
    struct wi_err err;
    sigset_t all, old;
    int rc;

    if (rt->cfg.destinations.n == 0)
        return NULL;
    if (!(o = calloc(1, sizeof *o))) {
        log_errorx("outbox_not_started", "error=\"out of memory\"");
        return NULL;
    }
    o->rt = rt;
    if (wi_http_global_init() < 0 || setup(o, &err) < 0) {
        if (wi_http_global_init() < 0)
            wi_err_set(&err, WI_ERR_IO, "curl_global_init failed");
        log_errorx("outbox_not_started", "error=%s", WI_LOG_Q(err.msg));
        outbox_free(o);
        atomic_store(&rt->failed, 1);
        return NULL;
    }
    atomic_fetch_add(&rt->alive, 1);
    sigfillset(&all); /* only the main thread handles signals */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&o->thread, NULL, deliverer_main, o);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        atomic_fetch_sub(&rt->alive, 1);
        log_errorx("outbox_not_started", "error=\"thread\"");
        outbox_free(o);
        atomic_store(&rt->failed, 1);
        return NULL;
    }
    return o;
}

void wi_outbox_join(struct wi_outbox *o)
{
    if (!o)
        return;
    pthread_join(o->thread, NULL);
    outbox_free(o);
}
