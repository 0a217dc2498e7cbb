/* config.h - the sidecar's configuration: one declarative table filling struct wi_config
 * from defaults, an optional key = value file, the environment and command-line flags. */
#ifndef WI_CONFIG_H
#define WI_CONFIG_H

#include <stdio.h>
#include "delivery/destination.h"
#include "wi_err.h"

/* What happens to an event whose type has no route (the SQL's p_unrouted, by name). */
enum { WI_UNROUTED_WAIT = 0, WI_UNROUTED_IGNORE = 1, WI_UNROUTED_QUARANTINE = 2, WI_UNROUTED_RETRY = 3 };

/* A repeatable option's values in the order given (file, environment, flags); heap-owned. */
struct wi_strlist {
    char **v;
    int n;
};

/* Invariant after a successful wi_config_load(): every value is within its table bounds,
 * backoff_cap >= backoff_base, strings are heap-owned by the struct (or NULL). */
struct wi_config {
    char *database_url;   /* libpq conninfo or URI; "" = libpq defaults (PG* env) */
    char *config_file;    /* optional key = value file, re-read on SIGHUP */
    int concurrency;      /* worker connections (threads) */
    int batch_size;       /* events per transaction */
    int max_attempts;     /* transient failures before quarantine */
    double backoff_base;  /* seconds: first retry delay */
    double backoff_cap;   /* seconds: largest retry delay */
    double poll_interval; /* seconds: fallback poll when no NOTIFY arrives */
    double batch_linger;  /* seconds: pause after a partial batch (0: claim again at once) */
    double lock_timeout;  /* seconds: session lock_timeout; a handler waiting longer is retried */
    int unrouted;         /* WI_UNROUTED_* */
    double unrouted_delay; /* seconds: an unrouted event (wait) is looked at again after this */
    int citus_direct;     /* Citus layout: 1 = each shard's batch straight to its worker (citus.h), 0 = via the coordinator */
    struct wi_strlist citus_nodes; /* --citus-node NAME[:PORT]=HOST[:PORT]: how this sidecar reaches a worker */
    char *metrics_listen; /* run: HOST:PORT of the /metrics listener; NULL/"" = none */
    double retain;        /* run: seconds; done events and delivered effects older than this are pruned on a schedule; 0 = off */
    double retain_interval; /* run --retain: seconds between prunes */
    double remember_pruned; /* run --retain, prune: seconds a pruned event's key is kept after its payload */
    int log_level;        /* WI_LOG_* */
    int log_events;       /* 1: one info line per event */
    /* the outbox (db/006_outbox.sql): not reloadable */
    struct wi_dest_list destinations;   /* --destination NAME=URL ..., repeatable */
    int destination_concurrency;        /* deliveries in flight per destination */
    double destination_timeout;         /* seconds, whole request */
    double destination_connect_timeout; /* seconds */
    double destination_lease;           /* seconds a claimed effect is owned (at least timeout + 1s) */
    /* recovery from providers' APIs (reconcile.h): not reloadable */
    struct wi_strlist endpoints;        /* --endpoint NAME=PROVIDER:SCOPE ... (reconcile: bare NAMEs select) */
    struct wi_strlist reconciles;       /* run --reconcile NAME=INTERVAL */
    /* operational notifications (observability/notify.h): not reloadable */
    struct wi_strlist notifies;         /* run --notify NAME[:json|:slack]: destinations told */
    struct wi_strlist notify_settings;  /* run --notify-setting KEY=NUMBER: thresholds */
    double notify_interval;             /* run --notify: seconds between checks */
    /* traces (observability/otlp.h): not reloadable */
    char *otlp_endpoint;                /* run: OTLP/HTTP base URL; NULL/"" = no spans, no traceparent */
    int otlp_queue;                     /* spans held for export at most */
    /* command options (flags only, not reloaded, not printed) */
    int once;             /* run: drain what is due, then exit */
    int test;             /* notify: send a test message */
    int json;             /* stats: JSON output */
    int all;              /* requeue: every quarantined event */
    int replay;           /* requeue: done events back to pending (run again) instead of quarantined ones */
    char *actor;          /* requeue, prune: who acts, for webhook_inbox_actions (default $USER@host) */
    int effects;          /* requeue: outbox effects instead of inbox events */
    char *operation_id;   /* requeue --effects: one effect */
    char *rate;           /* resume: events/s (text, checked by flow_admin.c); NULL = unlimited */
    char *effects_destination; /* requeue --effects --destination NAME (a flag without =URL): one destination */
    char *id;             /* requeue: SCOPE/EVENT_ID */
    char *event_id;       /* requeue: event id in any scope */
    char *type;           /* requeue: event type */
    char *scope;          /* requeue, prune: source scope */
    double since;         /* reconcile: seconds back to list (run --reconcile: the first walk's reach) */
    double older_than;    /* prune: seconds; done rows received (delivered effects processed) before now - older_than go */
    int print_config;     /* print the effective configuration and exit */
    int help;             /* print usage and exit */
};

/* Fills *cfg: defaults, then the file named by --config / WEBHOOK_INBOX_CONFIG, then
 * environment (DATABASE_URL, WEBHOOK_INBOX_*), then argv[0..argc). Returns 0, or -1 and
 * fills *err (cfg is then freed and zeroed). The caller frees with wi_config_free(). */
int wi_config_load(struct wi_config *cfg, int argc, char **argv, struct wi_err *err);

/* Copies the reloadable fields of src into dst; reports non-reloadable changes via log. */
void wi_config_apply_reload(struct wi_config *dst, const struct wi_config *src);

/* Releases the strings; accepts NULL; leaves *cfg zeroed. */
void wi_config_free(struct wi_config *cfg);

/* Writes "name = value" lines of the effective configuration; the passwords in
 * database_url and the destinations' query strings and credentials are masked. */
void wi_config_print(const struct wi_config *cfg, FILE *out);

/* The name of a WI_UNROUTED_* value ("wait", "ignore", "quarantine", "retry"). */
const char *wi_config_unrouted_name(int unrouted);

/* Writes the option list for --help. */
void wi_config_usage(FILE *out);

#endif
