/* metrics.c - outcome counters of this process (also by event type, with duration
 * histograms; scheduled reconcile walks by endpoint), their Prometheus text, and the stats
 * subcommand. */
#define _POSIX_C_SOURCE 200809L
#include "observability/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "admin/flow_admin.h"
#include "admin/outbox_admin.h"
#include "core/log.h"
#include "observability/otlp.h"
#include "pg/schema.h"

static atomic_long counters[WI_M_COUNT];

void wi_metrics_add(int which, long n) { atomic_fetch_add(&counters[which], n); }
long wi_metrics_get(int which) { return atomic_load(&counters[which]); }

/* Fixed histogram buckets (upper bounds, seconds). */
static const double handler_le[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double batch_le[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double receipt_le[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400};
#define MAX_BUCKETS 16

/* Invariant: counts[i] counts observations in (le[i-1], le[i]]; counts[n] those above le[n-1]. */
struct hist {
    const double *le;
    int n;
    unsigned long counts[MAX_BUCKETS + 1];
    double sum;
};

enum { OUT_DONE, OUT_QUARANTINED, OUT_RETRY, OUT_COUNT };
static const char *const out_names[] = {"done", "quarantined", "retry"};

/* One event_type label value; the slot at index WI_METRICS_MAX_TYPES is "other". */
struct type_row {
    char *type;                      /* owned; NULL for "other" */
    unsigned long n[OUT_COUNT];
};

#define SLOTS 512 /* open addressing over WI_METRICS_MAX_TYPES rows: at most 40% full */

/* Everything below is guarded by mu (a few updates per committed batch: no contention). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct type_row rows[WI_METRICS_MAX_TYPES + 1];
static int nrows;
static short slots[SLOTS]; /* row index + 1; 0 = empty */
/* Label values an operator configures ([a-z][a-z0-9_]{0,62}: reconcile endpoints, effect
 * destinations): the first max names get a row of their own, in order; any later or unusable
 * name counts in row max, "other". */
struct names {
    char (*v)[64];
    int n, max;
};

/* Reconcile counters per endpoint; the row at WI_METRICS_MAX_ENDPOINTS is "other". */
struct rc_row {
    unsigned long walks[WI_M_RC_RESULTS];
    unsigned long recovered;
};
static char rc_name_v[WI_METRICS_MAX_ENDPOINTS][64];
static struct names rc_names = {rc_name_v, 0, WI_METRICS_MAX_ENDPOINTS};
static struct rc_row rc_rows[WI_METRICS_MAX_ENDPOINTS + 1];
/* The deliverer's outcomes per destination; the row at WI_METRICS_MAX_DESTS is "other". */
static char ef_name_v[WI_METRICS_MAX_DESTS][64];
static struct names ef_names = {ef_name_v, 0, WI_METRICS_MAX_DESTS};
static unsigned long ef_rows[WI_METRICS_MAX_DESTS + 1][WI_M_EF_RESULTS];
static struct hist h_handler = {handler_le, (int)(sizeof handler_le / sizeof handler_le[0]), {0}, 0};
static struct hist h_batch = {batch_le, (int)(sizeof batch_le / sizeof batch_le[0]), {0}, 0};
static struct hist h_receipt = {receipt_le, (int)(sizeof receipt_le / sizeof receipt_le[0]), {0}, 0};

static void observe(struct hist *h, double v, unsigned long times)
{
    int i;
    for (i = 0; i < h->n && v > h->le[i]; i++)
        ;
    h->counts[i] += times;
    h->sum += v * (double)times;
}

/* 1 if s may be a label value of its own: short, valid UTF-8, no control characters. */
static int labelable(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = 0;

    while (*p) {
        int extra, i;
        unsigned cp;
        if (*p < 0x20 || *p == 0x7f)
            return 0;
        if (*p < 0x80) {
            p++;
            len++;
            continue;
        }
        if ((*p & 0xe0) == 0xc0) {
            extra = 1;
            cp = *p & 0x1f;
        } else if ((*p & 0xf0) == 0xe0) {
            extra = 2;
            cp = *p & 0x0f;
        } else if ((*p & 0xf8) == 0xf0) {
            extra = 3;
            cp = *p & 0x07;
        } else {
            return 0;
        }
        for (i = 1; i <= extra; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += extra + 1;
        len += (size_t)extra + 1;
    }
    return len > 0 && len <= WI_METRICS_TYPE_MAX;
}

/* The row counting type: its own, a new one while there is room, else "other". Under mu. */
static struct type_row *row_for(const char *type)
{
    uint32_t h = 2166136261u;
    const unsigned char *p;
    unsigned i;

    if (!type || !labelable(type) || strcmp(type, "other") == 0)
        return &rows[WI_METRICS_MAX_TYPES];
    for (p = (const unsigned char *)type; *p; p++)
        h = (h ^ *p) * 16777619u;
    for (i = h % SLOTS;; i = (i + 1) % SLOTS) {
        if (slots[i] == 0) {
            char *copy;
            if (nrows >= WI_METRICS_MAX_TYPES || !(copy = strdup(type)))
                return &rows[WI_METRICS_MAX_TYPES];
            rows[nrows].type = copy;
            slots[i] = (short)(++nrows);
            return &rows[nrows - 1];
        }
        if (strcmp(rows[slots[i] - 1].type, type) == 0)
            return &rows[slots[i] - 1];
    }
}

void wi_metrics_event(const char *event_type, const char *result, double receipt_to_done_s)
{
    int o;
    for (o = 0; o < OUT_COUNT && strcmp(result, out_names[o]) != 0; o++)
        ;
    if (o == OUT_COUNT)
        return;
    pthread_mutex_lock(&mu);
    row_for(event_type)->n[o]++;
    if (o == OUT_DONE && receipt_to_done_s >= 0)
        observe(&h_receipt, receipt_to_done_s, 1);
    pthread_mutex_unlock(&mu);
}

/* The row counting name in t: its own, a new one while there is room, else t->max ("other"). Under mu. */
static int name_row(struct names *t, const char *name)
{
    int i;

    if (!name || !*name || strlen(name) >= sizeof t->v[0] || !labelable(name) || !strcmp(name, "other"))
        return t->max;
    for (i = 0; i < t->n; i++)
        if (!strcmp(t->v[i], name))
            return i;
    if (t->n >= t->max)
        return t->max;
    strcpy(t->v[t->n], name);
    return t->n++;
}

/* Row i's label value in t. */
static const char *name_of(const struct names *t, int i)
{
    return i < t->max ? t->v[i] : "other";
}

void wi_metrics_reconcile_endpoint(const char *endpoint)
{
    pthread_mutex_lock(&mu);
    (void)name_row(&rc_names, endpoint);
    pthread_mutex_unlock(&mu);
}

void wi_metrics_reconcile(const char *endpoint, int result, long recovered)
{
    struct rc_row *r;

    if (result < 0 || result >= WI_M_RC_RESULTS)
        return;
    pthread_mutex_lock(&mu);
    r = &rc_rows[name_row(&rc_names, endpoint)];
    r->walks[result]++;
    if (recovered > 0)
        r->recovered += (unsigned long)recovered;
    pthread_mutex_unlock(&mu);
}

void wi_metrics_effect_destination(const char *destination)
{
    pthread_mutex_lock(&mu);
    (void)name_row(&ef_names, destination);
    pthread_mutex_unlock(&mu);
}

void wi_metrics_effect(const char *destination, int outcome)
{
    if (outcome < 0 || outcome >= WI_M_EF_RESULTS)
        return;
    pthread_mutex_lock(&mu);
    ef_rows[name_row(&ef_names, destination)][outcome]++;
    pthread_mutex_unlock(&mu);
}

void wi_metrics_batch(int events, double seconds)
{
    if (events <= 0 || seconds < 0)
        return;
    pthread_mutex_lock(&mu);
    observe(&h_batch, seconds, 1);
    observe(&h_handler, seconds / events, (unsigned long)events);
    pthread_mutex_unlock(&mu);
}

void wi_metrics_reset(void)
{
    int i;
    pthread_mutex_lock(&mu);
    for (i = 0; i <= WI_METRICS_MAX_TYPES; i++) {
        free(rows[i].type);
        memset(&rows[i], 0, sizeof rows[i]);
    }
    nrows = 0;
    memset(slots, 0, sizeof slots);
    memset(rc_rows, 0, sizeof rc_rows);
    rc_names.n = 0;
    memset(ef_rows, 0, sizeof ef_rows);
    ef_names.n = 0;
    memset(h_handler.counts, 0, sizeof h_handler.counts);
    memset(h_batch.counts, 0, sizeof h_batch.counts);
    memset(h_receipt.counts, 0, sizeof h_receipt.counts);
    h_handler.sum = h_batch.sum = h_receipt.sum = 0;
    pthread_mutex_unlock(&mu);
    for (i = 0; i < WI_M_COUNT; i++)
        atomic_store(&counters[i], 0);
}

void wi_metrics_write_label(FILE *out, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            fputs("\\\\", out);
        else if (*v == '"')
            fputs("\\\"", out);
        else if (*v == '\n')
            fputs("\\n", out);
        else
            fputc(*v, out);
    }
}

static void head(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(FILE *out, const char *name, const char *help, long v)
{
    head(out, name, "counter", help);
    fprintf(out, "%s %ld\n", name, v);
}

static void gauge(FILE *out, const char *name, const char *help, double v)
{
    head(out, name, "gauge", help);
    fprintf(out, "%s %.15g\n", name, v);
}

/* Cumulative buckets, le="+Inf" equal to _count, then _sum and _count. Under mu. */
static void histogram(FILE *out, const char *name, const char *help, const struct hist *h)
{
    unsigned long cum = 0;
    int i;

    head(out, name, "histogram", help);
    for (i = 0; i < h->n; i++) {
        cum += h->counts[i];
        fprintf(out, "%s_bucket{le=\"%g\"} %lu\n", name, h->le[i], cum);
    }
    cum += h->counts[h->n];
    fprintf(out, "%s_bucket{le=\"+Inf\"} %lu\n%s_sum %.17g\n%s_count %lu\n", name, cum, name, h->sum, name, cum);
}

/* One gauge per destination: name{destination="..."} v. */
static void dest_gauge(FILE *out, const struct wi_metrics_gauges *g, const char *name, const char *help, int which)
{
    int i;

    head(out, name, "gauge", help);
    for (i = 0; i < g->ndests; i++) {
        const struct wi_metrics_dest *d = &g->dests[i];
        double v = which == 0 ? (double)d->pending : which == 1 ? d->oldest_pending_age_s : (double)d->quarantined;
        fprintf(out, "%s{destination=\"", name);
        wi_metrics_write_label(out, d->name);
        fprintf(out, "\"} %.15g\n", v);
    }
}

/* The outbox per destination (webhook_inbox_outbox_stats(), read with the inbox gauges). */
static void outbox_gauges(FILE *out, const struct wi_metrics_gauges *g)
{
    gauge(out, "webhook_inbox_effects_stats_up", "1 if the last read of webhook_inbox_outbox_stats() succeeded, else 0 "
          "(the effects gauges are then left out; the inbox gauges and the counters are still served)",
          g->outbox_valid);
    if (!g->outbox_valid)
        return;
    dest_gauge(out, g, "webhook_inbox_effects_pending",
               "Pending outbox effects per destination (due, leased or waiting for a retry)", 0);
    dest_gauge(out, g, "webhook_inbox_effects_oldest_pending_age_seconds",
               "Seconds since the oldest pending effect of the destination was emitted (0 when none is pending)", 1);
    dest_gauge(out, g, "webhook_inbox_effects_quarantined",
               "Quarantined outbox effects per destination (wait for a fix and requeue --effects)", 2);
}

/* The pause and rate rules (webhook_inbox_flow_stats(), read with the inbox gauges). A
 * scope is never a label value (it can name a tenant): the paused scopes are one series. */
static void flow_gauges(FILE *out, const struct wi_metrics_gauges *g)
{
    long scoped = 0;
    int i, k, scopes = 0;

    if (!g->flow_valid)
        return;
    for (k = 0; k < 2; k++) {
        const char *name = k ? "webhook_inbox_rate_limit_per_second" : "webhook_inbox_paused_pending";
        head(out, name, "gauge", k ? "Rate limit of a route or destination in events/s, over all sidecars (resume --rate)"
                                   : "Pending events (effects) held by a paused route or destination; kind=\"scope\": "
                                     "those of every paused scope together");
        for (i = 0; i < g->nflows; i++) {
            const struct wi_metrics_flow *f = &g->flows[i];
            if (k ? f->rate <= 0 : !f->paused)
                continue;
            if (!strcmp(f->kind, "scope")) {
                scopes = 1;
                scoped += f->pending;
                continue;
            }
            fprintf(out, "%s{kind=\"%s\",target=\"", name, f->kind);
            wi_metrics_write_label(out, f->target);
            fprintf(out, "\"} %.15g\n", k ? f->rate : (double)f->pending);
        }
        if (!k && scopes)
            fprintf(out, "%s{kind=\"scope\"} %ld\n", name, scoped);
    }
}

/* 1 if rc_rows[i] is rendered: a declared endpoint, or "other" once it counted a walk. Under mu. */
static int rc_shown(int i)
{
    const struct rc_row *r = &rc_rows[i];
    return i < WI_METRICS_MAX_ENDPOINTS ? i < rc_names.n : (r->walks[0] | r->walks[1] | r->walks[2]) != 0;
}

/* The scheduled reconcile walks per endpoint (HELP and TYPE even without endpoints); the
 * "other" row only once it counted something. Under mu. */
static void reconcile_counters(FILE *out)
{
    const char *const results[WI_M_RC_RESULTS] = {"complete", "failed", "locked"};
    int i, k;

    head(out, "webhook_inbox_reconcile_walks_total", "counter",
         "Reconcile walks scheduled by run --reconcile in this process, by endpoint and result: complete, failed "
         "(the next walk resumes at the kept cursor), locked (another sidecar walked the endpoint)");
    for (i = 0; i <= WI_METRICS_MAX_ENDPOINTS; i++) {
        const struct rc_row *r = &rc_rows[i];
        if (!rc_shown(i))
            continue;
        for (k = 0; k < WI_M_RC_RESULTS; k++) {
            fputs("webhook_inbox_reconcile_walks_total{endpoint=\"", out);
            wi_metrics_write_label(out, name_of(&rc_names, i));
            fprintf(out, "\",result=\"%s\"} %lu\n", results[k], r->walks[k]);
        }
    }
    head(out, "webhook_inbox_reconcile_recovered_total", "counter",
         "Events reconcile recovered in this process's scheduled walks, by endpoint: inserted from the provider's "
         "list, or redeliveries asked for (GitHub); each one a delivery the inbox had missed");
    for (i = 0; i <= WI_METRICS_MAX_ENDPOINTS; i++) {
        const struct rc_row *r = &rc_rows[i];
        if (!rc_shown(i))
            continue;
        fputs("webhook_inbox_reconcile_recovered_total{endpoint=\"", out);
        wi_metrics_write_label(out, name_of(&rc_names, i));
        fprintf(out, "\"} %lu\n", r->recovered);
    }
}

/* The deliverer's outcomes in this process per destination (HELP and TYPE even without
 * destinations); the "other" row only once it counted something. Under mu. */
static void effect_counters(FILE *out)
{
    const char *const outcomes[WI_M_EF_RESULTS] = {"delivered", "retry", "quarantined", "lease_lost"};
    int i, k;

    head(out, "webhook_inbox_effects_total", "counter",
         "Outbox deliveries saved by this process, by destination and outcome: delivered (2xx), retry (pending "
         "again), quarantined (4xx or max attempts), lease_lost (the answer came after the lease passed to another "
         "sidecar: not saved)");
    for (i = 0; i <= WI_METRICS_MAX_DESTS; i++) {
        if (i < WI_METRICS_MAX_DESTS ? i >= ef_names.n
                                      : !(ef_rows[i][0] | ef_rows[i][1] | ef_rows[i][2] | ef_rows[i][3]))
            continue;
        for (k = 0; k < WI_M_EF_RESULTS; k++) {
            fputs("webhook_inbox_effects_total{destination=\"", out);
            wi_metrics_write_label(out, name_of(&ef_names, i));
            fprintf(out, "\",outcome=\"%s\"} %lu\n", outcomes[k], ef_rows[i][k]);
        }
    }
}

/* The cleanup horizon (exporter.c's read_horizon): what keeps VACUUM from removing the row
 * versions processed events leave behind, so claims walk over them (issue 33). */
static void horizon_gauges(FILE *out, const struct wi_metrics_gauges *g)
{
    static const char *const holders[WI_M_HOLD_COUNT] = {"session", "replica", "slot", "prepared"};
    int i;

    gauge(out, "webhook_inbox_cleanup_horizon_up", "1 if the last read of the cleanup horizon (pg_stat_activity, "
          "pg_stat_replication, pg_replication_slots, pg_prepared_xacts) succeeded, else 0", g->horizon_valid);
    if (!g->horizon_valid)
        return;
    head(out, "webhook_inbox_cleanup_horizon_xid_age", "gauge",
         "Transactions since the oldest xmin that keeps VACUUM from removing processed rows, by holder: a session of "
         "this database (snapshot or transaction id), a replica with hot_standby_feedback, a replication slot, a "
         "prepared transaction; 0 when none holds one");
    for (i = 0; i < WI_M_HOLD_COUNT; i++)
        fprintf(out, "webhook_inbox_cleanup_horizon_xid_age{holder=\"%s\"} %.15g\n", holders[i], g->horizon_xid_age[i]);
    gauge(out, "webhook_inbox_cleanup_horizon_age_seconds",
          "Seconds the oldest transaction holding back cleanup (a session of this database or a prepared transaction) "
          "has been open; 0 when none", g->horizon_age_s);
}

void wi_metrics_render(FILE *out, const struct wi_metrics_gauges *g)
{
    long spans_exported, spans_dropped;
    int i, o;

    if (g) {
        gauge(out, "webhook_inbox_stats_up", "1 if the last read of webhook_inbox_stats() succeeded, else 0 "
              "(the inbox gauges are then left out; the process counters are still served)", g->valid);
        if (g->valid) {
            gauge(out, "webhook_inbox_stats_age_seconds",
                  "Age of the inbox gauges: they are read at most once per refresh interval, whatever the scrape rate",
                  g->age_s);
            gauge(out, "webhook_inbox_events_pending", "Pending events (due or waiting for a retry or a route)",
                  (double)g->pending);
            gauge(out, "webhook_inbox_oldest_pending_age_seconds",
                  "Seconds since the oldest pending event was received (0 when none is pending)",
                  g->oldest_pending_age_s);
            gauge(out, "webhook_inbox_events_quarantined", "Quarantined events (wait for a fix and a requeue)",
                  (double)g->quarantined);
            gauge(out, "webhook_inbox_events_retrying", "Pending events that failed at least once",
                  (double)g->retrying);
            gauge(out, "webhook_inbox_events_waiting_for_route",
                  "Pending events whose event type has no route now", (double)g->waiting_for_route);
        }
    }

    if (g && g->valid)
        horizon_gauges(out, g);
    if (g) {
        outbox_gauges(out, g);
        flow_gauges(out, g);
    }

    pthread_mutex_lock(&mu);
    head(out, "webhook_inbox_handled_total", "counter",
         "Events handled by this process, by event type (at most 200 values, then \"other\") and outcome: "
         "done, quarantined, retry (a transient failure charged one attempt)");
    for (i = 0; i <= WI_METRICS_MAX_TYPES; i++) {
        const struct type_row *r = &rows[i];
        if (i < WI_METRICS_MAX_TYPES && !r->type)
            continue;
        for (o = 0; o < OUT_COUNT; o++) {
            if (i == WI_METRICS_MAX_TYPES && !r->n[o])
                continue;
            fputs("webhook_inbox_handled_total{event_type=\"", out);
            wi_metrics_write_label(out, r->type ? r->type : "other");
            fprintf(out, "\",outcome=\"%s\"} %lu\n", out_names[o], r->n[o]);
        }
    }
    histogram(out, "webhook_inbox_handler_duration_seconds",
              "Handler run time per event, measured per batch: the worker's time for one transaction "
              "(BEGIN, every handler, COMMIT) divided by its events (SQL does not report each handler's own time)",
              &h_handler);
    histogram(out, "webhook_inbox_batch_duration_seconds",
              "Worker time per committed transaction of events (BEGIN to the COMMIT reply)", &h_batch);
    histogram(out, "webhook_inbox_receipt_to_done_seconds",
              "Receipt to done, per event: received_at to the start of its successful run (server clock), plus "
              "the worker's time for that run's transaction (an upper bound by at most one batch)",
              &h_receipt);
    reconcile_counters(out);
    effect_counters(out);
    pthread_mutex_unlock(&mu);

    counter(out, "webhook_inbox_unrouted_waits_total",
            "Runs that found no route and left the event pending (--unrouted=wait)", wi_metrics_get(WI_M_WAITING));
    counter(out, "webhook_inbox_paused_runs_total",
            "Runs that found their route or scope paused and left the event pending, uncharged (held until resume)",
            wi_metrics_get(WI_M_PAUSED));
    counter(out, "webhook_inbox_throttled_runs_total",
            "Runs over their route's rate: the event left pending, uncharged, due at its rate slot",
            wi_metrics_get(WI_M_THROTTLED));
    counter(out, "webhook_inbox_batches_total", "Transactions of events committed by this process",
            wi_metrics_get(WI_M_BATCHES));
    counter(out, "webhook_inbox_empty_claims_total",
            "Claims that found no due event (each a transaction; many per event processed mean idle workers woken for nothing)",
            wi_metrics_get(WI_M_EMPTY_CLAIMS));
    counter(out, "webhook_inbox_idle_waits_total",
            "Times a worker went idle after a claim: nothing it could claim was due, so it waited for a notification, a due time or the poll interval",
            wi_metrics_get(WI_M_IDLE_WAITS));
    counter(out, "webhook_inbox_batch_handler_fallbacks_total",
            "Batch handler calls whose events the row handler ran instead, one by one: the batch handler deferred them or failed (a failure also logs server_warning)",
            wi_metrics_get(WI_M_BATCH_FALLBACKS));
    wi_otlp_counts(&spans_exported, &spans_dropped);
    counter(out, "webhook_inbox_trace_spans_exported_total",
            "Trace spans sent to --otlp-endpoint (accepted with a 2xx)", spans_exported);
    counter(out, "webhook_inbox_trace_spans_dropped_total",
            "Trace spans dropped: the export queue was full (the claim loop never waits for it) or an export failed",
            spans_dropped);
    counter(out, "webhook_inbox_reconnects_total", "Worker reconnections after a lost or failed connection",
            wi_metrics_get(WI_M_RECONNECTS));
    counter(out, "webhook_inbox_retention_deleted_total",
            "Done events pruned (emptied; keys kept --remember-pruned) by the scheduled retention (--retain) run by this process", wi_metrics_get(WI_M_PRUNED));
    counter(out, "webhook_inbox_retention_effects_deleted_total",
            "Delivered outbox effects deleted by the scheduled retention (--retain) run by this process",
            wi_metrics_get(WI_M_PRUNED_EFFECTS));
}

void wi_metrics_log_summary(void)
{
    log_info("summary", "done=%ld quarantined=%ld retry=%ld batches=%ld reconnects=%ld waiting=%ld idle_waits=%ld "
             "batch_fallbacks=%ld",
             wi_metrics_get(WI_M_DONE), wi_metrics_get(WI_M_QUARANTINED), wi_metrics_get(WI_M_RETRY),
             wi_metrics_get(WI_M_BATCHES), wi_metrics_get(WI_M_RECONNECTS), wi_metrics_get(WI_M_WAITING),
             wi_metrics_get(WI_M_IDLE_WAITS), wi_metrics_get(WI_M_BATCH_FALLBACKS));
}

void wi_metrics_server_notice(const char *sqlstate)
{
    if (!strcmp(sqlstate, "WIB03") || !strcmp(sqlstate, "WIB04"))
        wi_metrics_add(WI_M_BATCH_FALLBACKS, 1);
}

static const struct wi_pg_stmt stmts[] = {
    /* Ages and latencies rounded to 0.1 (numeric: prints as written, valid JSON). */
    {"wi_stats", "SELECT pending, round(oldest_pending_age_s::numeric, 1), pending_attempts, retrying,"
                 " quarantined, done, round(latency_p50_ms::numeric, 1), round(latency_p95_ms::numeric, 1),"
                 " round(latency_p99_ms::numeric, 1) FROM webhook_inbox_stats()"},
    {"wi_stats_hist", "SELECT attempts, events FROM webhook_inbox_attempts_histogram()"},
    /* Event types are provider text: JSON-escaped by the server for --json. */
    {"wi_stats_unrouted", "SELECT coalesce(sum(pending), 0), coalesce(jsonb_object_agg(event_type, pending), '{}')::text"
                          " FROM webhook_inbox_unrouted()"},
    {"wi_stats_unrouted_types", "SELECT event_type, pending FROM webhook_inbox_unrouted()"},
};

static const char *names[] = {"pending", "oldest_pending_age_s", "pending_attempts_sum", "retrying",
                              "quarantined", "done", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"};

int wi_metrics_stats(const char *conninfo, int json, FILE *out, struct wi_err *err)
{
    struct wi_pg *pg = wi_pg_connect(conninfo, wi_schema_stmts, wi_schema_stmts_count, err);
    PGresult *res = NULL, *hist = NULL, *unrouted = NULL;
    int i, rc = -1;

    if (!pg)
        return -1;
    if (wi_schema_require(pg, err) < 0 || wi_pg_prepare(pg, stmts, (int)(sizeof stmts / sizeof stmts[0]), err) < 0)
        goto done;
    if (!(res = wi_pg_exec(pg, "wi_stats", 0, NULL, PGRES_TUPLES_OK, err)))
        goto done;
    if (!(hist = wi_pg_exec(pg, "wi_stats_hist", 0, NULL, PGRES_TUPLES_OK, err)))
        goto done;
    if (!(unrouted = wi_pg_exec(pg, json ? "wi_stats_unrouted" : "wi_stats_unrouted_types", 0, NULL, PGRES_TUPLES_OK,
                                err)))
        goto done;
    if (json)
        fputc('{', out);
    for (i = 0; i < 9; i++) {
        const char *v = PQgetisnull(res, 0, i) ? NULL : PQgetvalue(res, 0, i);
        if (json)
            fprintf(out, "%s\"%s\":%s", i ? "," : "", names[i], v ? v : "null");
        else
            fprintf(out, "%-22s %s\n", names[i], v ? v : "-");
    }
    if (json)
        fputs(",\"attempts_histogram\":{", out);
    else
        fputs("attempts_histogram     (pending + quarantined)\n", out);
    for (i = 0; i < PQntuples(hist); i++) {
        if (json)
            fprintf(out, "%s\"%s\":%s", i ? "," : "", PQgetvalue(hist, i, 0), PQgetvalue(hist, i, 1));
        else
            fprintf(out, "  attempts=%-5s %s\n", PQgetvalue(hist, i, 0), PQgetvalue(hist, i, 1));
    }
    if (json) {
        fprintf(out, "},\"waiting_for_route\":%s,\"waiting_for_route_types\":%s", PQgetvalue(unrouted, 0, 0),
                PQgetvalue(unrouted, 0, 1));
        if (wi_outbox_stats(pg, json, out, err) < 0 || wi_flow_stats(pg, json, out, err) < 0) /* ,"outbox":{...},"flow":[...] */
            goto done;
        fputs("}\n", out);
    } else {
        long total = 0;
        for (i = 0; i < PQntuples(unrouted); i++)
            total += atol(PQgetvalue(unrouted, i, 1));
        fprintf(out, "%-22s %ld\n", "waiting_for_route", total);
        for (i = 0; i < PQntuples(unrouted); i++) {
            char type[160];
            fprintf(out, "  type=%-17s %s\n", wi_log_quote(type, sizeof type, PQgetvalue(unrouted, i, 0), 120),
                    PQgetvalue(unrouted, i, 1));
        }
        if (wi_outbox_stats(pg, json, out, err) < 0 || wi_flow_stats(pg, json, out, err) < 0)
            goto done;
    }
    rc = 0;
done:
    PQclear(unrouted);
    PQclear(hist);
    PQclear(res);
    wi_pg_free(pg);
    return rc;
}
