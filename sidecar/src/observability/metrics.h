/* metrics.h - process counters (events by outcome, by event type; duration histograms;
 * reconcile walks by endpoint), their Prometheus text rendering, and the `stats` subcommand
 * (inbox health read from webhook_inbox_stats() and webhook_inbox_unrouted()). */
#ifndef WI_METRICS_H
#define WI_METRICS_H

#include <stdio.h>
#include "pg/pgw.h"

/* WI_M_WAITING: runs that found no route and left the event pending (--unrouted=wait). */
/* WI_M_PRUNED: done events deleted by the scheduled retention (--retain); WI_M_PRUNED_EFFECTS:
 * delivered outbox effects deleted by it. */
/* WI_M_EMPTY_CLAIMS: claims that found nothing due (a transaction each; many per event
 * mean workers woken for nothing). */
/* WI_M_IDLE_WAITS: times a worker went idle (nothing it could claim was due right after its
 * batch) and waited for a notification, a due time or the poll interval. */
/* WI_M_PAUSED, WI_M_THROTTLED: runs that left the event pending, uncharged, because its
 * route or scope is paused / over its rate (db/015). */
/* WI_M_BATCH_FALLBACKS: batch handler calls (db/019) whose events the row handlers ran
 * instead, after a defer (NOTICE WIB04) or an error (WARNING WIB03); counted as the server
 * says so, whether or not that transaction then commits. */
enum { WI_M_DONE, WI_M_QUARANTINED, WI_M_RETRY, WI_M_WAITING, WI_M_BATCHES, WI_M_RECONNECTS, WI_M_PRUNED,
       WI_M_PRUNED_EFFECTS, WI_M_EMPTY_CLAIMS, WI_M_IDLE_WAITS,
       WI_M_PAUSED, WI_M_THROTTLED, WI_M_BATCH_FALLBACKS,
       WI_M_COUNT };

/* At most this many distinct event_type label values; later types count as "other", as do
 * types longer than WI_METRICS_TYPE_MAX bytes, not UTF-8, holding control characters, or
 * named "other" (so no two series share a label set). */
#define WI_METRICS_MAX_TYPES 200
#define WI_METRICS_TYPE_MAX 128

/* wi_pg_set_notice_hook's hook: counts WI_M_BATCH_FALLBACKS. Thread-safe. */
void wi_metrics_server_notice(const char *sqlstate);

/* Thread-safe increment of counter which (WI_M_*). */
void wi_metrics_add(int which, long n);
long wi_metrics_get(int which);

/* Records one event whose result is durable (its transaction committed): result is "done",
 * "quarantined" or "retry" (others are ignored here); receipt_to_done_s is observed for
 * "done" when >= 0. Thread-safe; copies event_type when it becomes a new label. */
void wi_metrics_event(const char *event_type, const char *result, double receipt_to_done_s);

/* Records one committed batch of events that took seconds on the worker (BEGIN to the
 * COMMIT reply): the batch histogram gets one observation, the handler histogram one per
 * event of seconds / events. Thread-safe. */
void wi_metrics_batch(int events, double seconds);

/* Reconcile walks scheduled by `run --reconcile` (reconcile_sched.c), per endpoint name
 * ([a-z][a-z0-9_]{0,62}, operator-configured: a bounded label); the first
 * WI_METRICS_MAX_ENDPOINTS names get their own counters, later ones count as "other". */
#define WI_METRICS_MAX_ENDPOINTS 64
enum { WI_M_RC_COMPLETE, /* the walk reached its end */
       WI_M_RC_FAILED,   /* it stopped on an error (cursor kept: the next walk resumes) */
       WI_M_RC_LOCKED,   /* another sidecar held the endpoint's lock: not walked here */
       WI_M_RC_RESULTS };

/* Declares endpoint's counters at 0 (so the first walk is an increase, not a new series).
 * Thread-safe; copies endpoint. */
void wi_metrics_reconcile_endpoint(const char *endpoint);

/* Counts one walk of endpoint with result WI_M_RC_* and the events it recovered (inserted,
 * or redeliveries asked for; a failed walk keeps the pages it committed). Thread-safe. */
void wi_metrics_reconcile(const char *endpoint, int result, long recovered);

/* At most this many destinations get outbox gauges (the first by name; the exporter logs
 * when there are more), and delivery counters (the first configured; later ones count as
 * "other"). */
#define WI_METRICS_MAX_DESTS 100

/* The deliverer's outcomes (webhook_inbox_effects_total{destination, outcome}). */
enum { WI_M_EF_DELIVERED, /* a 2xx saved */
       WI_M_EF_RETRY,     /* a failure saved as pending again */
       WI_M_EF_QUARANTINED, /* a 4xx, or max attempts */
       WI_M_EF_LEASE_LOST,  /* an answer not saved: the lease had passed to another sidecar */
       WI_M_EF_RESULTS };

/* Declares destination's counters at 0 (so the first delivery is an increase, not a new
 * series). Thread-safe; copies destination. */
void wi_metrics_effect_destination(const char *destination);

/* Counts one saved delivery (or lost lease) to destination with outcome WI_M_EF_*. Thread-safe. */
void wi_metrics_effect(const char *destination, int outcome);

/* One destination's row of webhook_inbox_outbox_stats(). */
struct wi_metrics_dest {
    char name[64];                /* [a-z][a-z0-9_]{0,62} by the outbox's CHECK */
    long pending, quarantined;
    double oldest_pending_age_s;  /* 0 when none is pending */
};

/* At most this many pause and rate rules get gauges (the first by kind and target). */
#define WI_METRICS_MAX_FLOWS 100

/* One row of webhook_inbox_flow_stats(). */
struct wi_metrics_flow {
    char kind[16];                /* route, scope, destination */
    char target[256];             /* <= 255 characters by the table's CHECK (cut if wider in bytes) */
    int paused;
    double rate;                  /* events/s; 0 when unlimited */
    long pending;
};

/* What the cleanup (VACUUM) of the inbox's processed rows waits for, by holder: a session of
 * this database (its snapshot or its transaction id), a replica's hot_standby_feedback (its
 * walsender's xmin), a replication slot's xmin, a prepared transaction. */
enum { WI_M_HOLD_SESSION, WI_M_HOLD_REPLICA, WI_M_HOLD_SLOT, WI_M_HOLD_PREPARED, WI_M_HOLD_COUNT };

/* Inbox gauges read from the database by the exporter; valid = 0: the last read failed.
 * The outbox's are read after them, on the same connection: outbox_valid = 0 when that
 * read failed (or the inbox's did), whatever valid says. */
struct wi_metrics_gauges {
    int valid;
    double age_s;                 /* seconds since the values were read (valid only) */
    long pending, quarantined, retrying, waiting_for_route;
    double oldest_pending_age_s;
    int outbox_valid;
    int ndests;                   /* dests[0..ndests) */
    struct wi_metrics_dest dests[WI_METRICS_MAX_DESTS];
    int flow_valid;               /* the rules were read (schema v15 and on) */
    int nflows;                   /* flows[0..nflows) */
    struct wi_metrics_flow flows[WI_METRICS_MAX_FLOWS];
    int horizon_valid;            /* the cleanup horizon was read (see WI_M_HOLD_*) */
    double horizon_xid_age[WI_M_HOLD_COUNT]; /* transactions since the oldest xmin each holds; 0: none */
    double horizon_age_s;         /* seconds the oldest holding session's (or prepared) transaction is open */
};

/* Writes every metric in Prometheus text format 0.0.4 (HELP and TYPE lines, then samples)
 * to out, with the gauges g (NULL: no database gauges). Thread-safe. */
void wi_metrics_render(FILE *out, const struct wi_metrics_gauges *g);

/* Writes v as a Prometheus label value (without the quotes): \\, \" and \n escaped. */
void wi_metrics_write_label(FILE *out, const char *v);

/* Forgets the event_type labels and zeroes every counter (frees the copies). */
void wi_metrics_reset(void);

/* Logs one summary line of the counters. */
void wi_metrics_log_summary(void);

/* Connects to conninfo, checks the schema (wi_schema_require: a missing, stale or too new
 * schema is an error), prints the inbox stats (text or JSON) on out, with the pending
 * events that wait for a route. Returns 0, or -1 with *err. */
int wi_metrics_stats(const char *conninfo, int json, FILE *out, struct wi_err *err);

#endif
