/* config.c - the configuration table and its sources: defaults < file < environment < flags. */
#define _POSIX_C_SOURCE 200809L
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "core/duration.h"
#include "citus/citus_node.h"
#include "core/log.h"
#include "redact.h"
#include "retention/prune.h"

enum cf_type { CF_STR, CF_INT, CF_DURATION, CF_ENUM, CF_BOOL, CF_DEST, CF_LIST }; /* CF_DEST: repeatable, destination.h;
                                                                             * CF_LIST: repeatable strings */

enum { CF_RELOAD = 1, CF_CLI = 2 }; /* reloadable on SIGHUP; flag only (no env/file/print) */

struct cf_entry {
    const char *name;      /* flag --name, file key, env WEBHOOK_INBOX_NAME (upper, '-' -> '_') */
    enum cf_type type;
    size_t offset;         /* into struct wi_config */
    const char *def;       /* default, parsed like any other source; NULL = unset */
    int flags;             /* CF_RELOAD, CF_CLI */
    long min, max;         /* CF_INT bounds; CF_DURATION: min and max seconds (max 0 = none) */
    const char *const *enums; /* CF_ENUM names, index = value */
    const char *help;
};

static const char *const unrouted_names[] = {"wait", "ignore", "quarantine", "retry", NULL}; /* WI_UNROUTED_* */
static const char *const level_names[] = {"debug", "info", "warn", "error", NULL};

#define F(field) offsetof(struct wi_config, field)
static const struct cf_entry table[] = {
    {"database-url", CF_STR, F(database_url), "", 0, 0, 0, NULL,
     "libpq conninfo or URI (also DATABASE_URL)"},
    {"config", CF_STR, F(config_file), NULL, 0, 0, 0, NULL,
     "key = value file, re-read on SIGHUP"},
    {"concurrency", CF_INT, F(concurrency), "2", 0, 1, 256, NULL,
     "worker connections (one thread each)"},
    {"batch-size", CF_INT, F(batch_size), "20", CF_RELOAD, 1, 10000, NULL,
     "events per transaction (one savepoint each)"},
    {"max-attempts", CF_INT, F(max_attempts), "10", CF_RELOAD, 1, 1000000, NULL,
     "transient failures before an event is quarantined"},
    {"backoff-base", CF_DURATION, F(backoff_base), "1s", CF_RELOAD, 0, 30 * 86400, NULL,
     "first retry delay; doubles per attempt, with jitter"},
    {"backoff-cap", CF_DURATION, F(backoff_cap), "1h", CF_RELOAD, 0, 30 * 86400, NULL,
     "largest retry delay"},
    {"batch-linger", CF_DURATION, F(batch_linger), NULL, CF_RELOAD, 0, 1, NULL,
     "after a batch smaller than --batch-size, wait this long before claiming again (when something arrived), so the next "
     "batch gathers what arrives meanwhile (fewer commits under steady load; adds at most this latency; off when unset)"},
    {"poll-interval", CF_DURATION, F(poll_interval), "5s", CF_RELOAD, 0, 86400, NULL,
     "look for due events at least this often (NOTIFY wakes workers sooner)"},
    {"lock-timeout", CF_DURATION, F(lock_timeout), "500ms", 0, 0, 86400, NULL,
     "lock_timeout of worker sessions: a handler blocked longer on a row lock fails transiently (retried)"},
    {"unrouted", CF_ENUM, F(unrouted), "wait", CF_RELOAD, 0, 0, unrouted_names,
     "event types without a route: wait (pending, not charged, looked at again after --unrouted-delay), "
     "ignore (done, outcome 'ignored: no route'), quarantine, retry (charged like a failure)"},
    {"unrouted-delay", CF_DURATION, F(unrouted_delay), "60s", CF_RELOAD, 1, 30 * 86400, NULL,
     "--unrouted=wait: how long an event with no route waits before it is looked at again (at least 1s)"},
    {"citus-direct", CF_BOOL, F(citus_direct), "true", 0, 0, 0, NULL,
     "Citus layout: send each shard's batch straight to the worker holding it (pg_dist_node's host and port, the "
     "other connection parameters --database-url's), the coordinator taking over while that node fails; false: "
     "every batch through the coordinator"},
    {"citus-node", CF_LIST, F(citus_nodes), NULL, 0, 0, 0, NULL,
     "--citus-direct: NAME[:PORT]=HOST[:PORT] reaches the worker pg_dist_node names NAME (port PORT, or any) at "
     "HOST (and PORT, or its own) from this sidecar; repeatable"},
    {"metrics-listen", CF_STR, F(metrics_listen), NULL, 0, 0, 0, NULL,
     "run: serve GET /metrics (Prometheus text) on HOST:PORT, [IPv6]:PORT or :PORT (e.g. 127.0.0.1:9394)"},
    {"retain", CF_DURATION, F(retain), NULL, 0, 0, 36500L * 86400, NULL,
     "run: prune done events received (their payloads; keys per --remember-pruned) and delete delivered "
     "effects processed longer ago than this, every "
     "--retain-interval, on one sidecar of many (at least 3d; off when unset)"},
    {"retain-interval", CF_DURATION, F(retain_interval), "1h", 0, 1, 7 * 86400, NULL,
     "run --retain: how often (the first run comes 30s after start, or after the interval if shorter)"},
    {"remember-pruned", CF_DURATION, F(remember_pruned), "30d", 0, 0, 36500L * 86400, NULL,
     "run --retain, prune: how long a pruned event's key outlives its payload, so a redelivery or a "
     "replayed capture of it is still a duplicate"},
    {"log-level", CF_ENUM, F(log_level), "info", CF_RELOAD, 0, 0, level_names,
     "debug, info, warn, error"},
    {"log-events", CF_BOOL, F(log_events), "true", CF_RELOAD, 0, 0, NULL,
     "one info line per processed event"},
    {"destination", CF_DEST, F(destinations), NULL, 0, 0, 0, NULL,
     "outbox: NAME=URL [concurrency=N timeout=D connect_timeout=D sign=standard_webhooks allow_http=true]; "
     "repeatable; credentials from WEBHOOK_INBOX_DEST_<NAME>_TOKEN/_SECRET or token=/secret= in the config file. "
     "requeue --effects --destination NAME (a flag without =URL): that destination's effects only; "
     "pause, resume --destination NAME: that destination"},
    {"endpoint", CF_LIST, F(endpoints), NULL, 0, 0, 0, NULL,
     "reconcile: NAME=PROVIDER:SCOPE [key=value ...] defines an endpoint to recover from its provider's API "
     "(stripe, github, paddle, square; see docs/operations.md); repeatable; its API key from WEBHOOK_INBOX_<NAME>_API_KEY. "
     "reconcile --endpoint NAME (without =): the endpoint to reconcile"},
    {"reconcile", CF_LIST, F(reconciles), NULL, 0, 0, 0, NULL,
     "run: NAME=INTERVAL reconciles that --endpoint every INTERVAL (at least 1m), on one sidecar of many; repeatable"},
    {"notify", CF_LIST, F(notifies), NULL, 0, 0, 0, NULL,
     "run, notify: NAME[:json|:slack] tells that --destination when an operational condition starts or clears "
     "(a quarantine burst, an old backlog, signature failures, reconcile recoveries, a pause backing up); repeatable"},
    {"notify-setting", CF_LIST, F(notify_settings), NULL, 0, 0, 0, NULL,
     "run --notify: KEY=NUMBER overrides a threshold (quarantine_burst, backlog_age_s, ...: docs/operations.md); repeatable"},
    {"notify-interval", CF_DURATION, F(notify_interval), "30s", 0, 1, 86400, NULL,
     "run --notify: how often one sidecar of many checks the conditions"},
    {"otlp-endpoint", CF_STR, F(otlp_endpoint), NULL, 0, 0, 0, NULL,
     "run: export trace spans (handled events, effect deliveries) as OTLP/HTTP JSON to this URL (POST .../v1/traces; "
     "also OTEL_EXPORTER_OTLP_ENDPOINT); effect calls then carry traceparent. Off when unset"},
    {"otlp-queue", CF_INT, F(otlp_queue), "2048", 0, 1, 1000000, NULL,
     "run --otlp-endpoint: spans held for export at most; more are dropped (webhook_inbox_trace_spans_dropped_total)"},
    {"destination-concurrency", CF_INT, F(destination_concurrency), "4", 0, 1, 1024, NULL,
     "outbox: deliveries in flight per destination"},
    {"destination-timeout", CF_DURATION, F(destination_timeout), "30s", 0, 0, 3600, NULL,
     "outbox: whole-request timeout (then retried)"},
    {"destination-connect-timeout", CF_DURATION, F(destination_connect_timeout), "5s", 0, 0, 3600, NULL,
     "outbox: connect timeout"},
    {"destination-lease", CF_DURATION, F(destination_lease), "60s", 0, 0, 86400, NULL,
     "outbox: how long a claimed effect is owned (at least its timeout + 1s); a sidecar that died holds it this long"},
    {"once", CF_BOOL, F(once), "false", CF_CLI, 0, 0, NULL, "run: process everything due, then exit"},
    {"json", CF_BOOL, F(json), "false", CF_CLI, 0, 0, NULL, "stats: print JSON"},
    {"test", CF_BOOL, F(test), "false", CF_CLI, 0, 0, NULL,
     "notify: send a test message to each --notify destination and wait for a running sidecar to deliver it"},
    {"id", CF_STR, F(id), NULL, CF_CLI, 0, 0, NULL, "requeue: SCOPE/EVENT_ID (split at the first '/')"},
    {"event-id", CF_STR, F(event_id), NULL, CF_CLI, 0, 0, NULL, "requeue: event id (any scope)"},
    {"type", CF_STR, F(type), NULL, CF_CLI, 0, 0, NULL, "requeue: event type; pause, resume: a route (an event type, 'prefix*' or '*')"},
    {"scope", CF_STR, F(scope), NULL, CF_CLI, 0, 0, NULL, "requeue, pause, resume: source scope"},
    {"all", CF_BOOL, F(all), "false", CF_CLI, 0, 0, NULL, "requeue: every quarantined event"},
    {"replay", CF_BOOL, F(replay), "false", CF_CLI, 0, 0, NULL,
     "requeue: done events instead (run their handler again; a filter is required)"},
    {"actor", CF_STR, F(actor), NULL, CF_CLI, 0, 0, NULL,
     "requeue, prune, pause, resume: who acts, recorded in webhook_inbox_actions (default $USER@host)"},
    {"effects", CF_BOOL, F(effects), "false", CF_CLI, 0, 0, NULL,
     "requeue: outbox effects (--operation-id, --destination NAME, both, or --all)"},
    {"operation-id", CF_STR, F(operation_id), NULL, CF_CLI, 0, 0, NULL, "requeue --effects: one effect"},
    {"rate", CF_STR, F(rate), NULL, CF_CLI, 0, 0, NULL,
     "resume: events/s for the route (--type) or destination, over all sidecars (unlimited when unset)"},
    {"since", CF_DURATION, F(since), "72h", CF_CLI, 0, 90L * 86400, NULL,
     "reconcile: how far back to list; run --reconcile: how far back its first walk goes"},
    {"older-than", CF_DURATION, F(older_than), NULL, CF_CLI, 0, 36500L * 86400, NULL, "prune: prune done events received (payloads; keys per --remember-pruned) and delete delivered effects processed longer ago than this (at least 3d)"},
    {"print-config", CF_BOOL, F(print_config), "false", CF_CLI, 0, 0, NULL, "print the effective configuration"},
    {"help", CF_BOOL, F(help), "false", CF_CLI, 0, 0, NULL, "this text"},
};
#define NENTRIES (sizeof table / sizeof table[0])

static const struct cf_entry *find(const char *name, size_t len)
{
    size_t i;
    for (i = 0; i < NENTRIES; i++) {
        const char *n = table[i].name;
        size_t j;
        if (strlen(n) != len)
            continue;
        for (j = 0; j < len; j++) {
            char c = name[j] == '_' ? '-' : (char)tolower((unsigned char)name[j]);
            if (c != n[j])
                break;
        }
        if (j == len)
            return &table[i];
    }
    return NULL;
}

static int set(struct wi_config *cfg, const struct cf_entry *e, const char *val, const char *src, struct wi_err *err)
{
    char *p = (char *)cfg + e->offset;
    switch (e->type) {
    case CF_STR: {
        char **sp = (char **)p;
        char *dup = val ? strdup(val) : NULL;
        if (val && !dup)
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        free(*sp);
        *sp = dup;
        return 0;
    }
    case CF_INT: {
        char *end;
        long v;
        errno = 0;
        v = strtol(val, &end, 10);
        if (end == val || *end || errno || v < e->min || v > e->max)
            return wi_err_set(err, WI_ERR_ARG, "%s: %s must be an integer in %ld..%ld", src, e->name, e->min, e->max);
        *(int *)p = (int)v;
        return 0;
    }
    case CF_DURATION: {
        double d;
        if (wi_duration_parse(val, &d) < 0 || d <= 0)
            return wi_err_set(err, WI_ERR_ARG, "%s: %s must be a positive duration (250ms, 2s, 5m, 1h, 3d)", src, e->name);
        if (e->max && d > (double)e->max) /* keeps every later ms/int conversion in range */
            return wi_err_set(err, WI_ERR_ARG, "%s: %s must be at most %ldd", src, e->name, e->max / 86400);
        if (d < (double)e->min)
            return wi_err_set(err, WI_ERR_ARG, "%s: %s must be at least %lds", src, e->name, e->min);
        *(double *)p = d;
        return 0;
    }
    case CF_ENUM: {
        char names[128];
        size_t n = 0;
        int i;
        for (i = 0; e->enums[i]; i++)
            if (strcmp(e->enums[i], val) == 0) {
                *(int *)p = i;
                return 0;
            }
        names[0] = '\0';
        for (i = 0; e->enums[i] && n < sizeof names; i++) {
            int r = snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", e->enums[i]);
            n += r > 0 ? (size_t)r : 0;
        }
        return wi_err_set(err, WI_ERR_ARG, "%s: %s must be one of %s", src, e->name, names);
    }
    case CF_DEST: {
        struct wi_dest d;
        /* Credentials only from the file (or the environment, wi_dest_list_resolve): a flag
         * would show them in ps. */
        if (wi_dest_parse(val, strlen(val), strncmp(src, "config file", 11) == 0, &d, err) < 0) {
            char msg[WI_ERR_MSG_MAX];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return wi_err_set(err, err->code, "%s: %s", src, msg);
        }
        return wi_dest_list_put((struct wi_dest_list *)p, &d, err);
    }
    case CF_LIST: {
        struct wi_strlist *l = (struct wi_strlist *)p;
        char **v = realloc(l->v, (size_t)(l->n + 1) * sizeof *v);
        if (!v || !(v[l->n] = strdup(val))) {
            if (v)
                l->v = v;
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
        l->v = v;
        l->n++;
        return 0;
    }
    case CF_BOOL:
        if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes") || !strcmp(val, "on"))
            *(int *)p = 1;
        else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no") || !strcmp(val, "off"))
            *(int *)p = 0;
        else
            return wi_err_set(err, WI_ERR_ARG, "%s: %s must be true or false", src, e->name);
        return 0;
    }
    return wi_err_set(err, WI_ERR_ARG, "bad table entry");
}

static char *trim(char *s)
{
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int load_file(struct wi_config *cfg, const char *path, struct wi_err *err)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int lineno = 0;

    if (!f)
        return wi_err_set(err, WI_ERR_IO, "cannot open config file %s: %s", path, strerror(errno));
    while (fgets(line, sizeof line, f)) {
        char *k, *v, *eq;
        const struct cf_entry *e;
        char src[64];
        lineno++;
        k = trim(line);
        if (*k == '#' || *k == ';' || *k == '\0' || *k == '[')
            continue;
        eq = strchr(k, '=');
        if (!eq) {
            fclose(f);
            return wi_err_set(err, WI_ERR_ARG, "config file line %d: expected key = value", lineno);
        }
        *eq = '\0';
        v = trim(eq + 1);
        k = trim(k);
        if (strlen(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[strlen(v) - 1] == v[0]) {
            v[strlen(v) - 1] = '\0';
            v++;
        }
        e = find(k, strlen(k));
        if (!e || (e->flags & CF_CLI) || e->offset == F(config_file)) {
            fclose(f);
            return wi_err_set(err, WI_ERR_ARG, "config file line %d: unknown key %.40s", lineno, k);
        }
        snprintf(src, sizeof src, "config file line %d", lineno);
        if (set(cfg, e, v, src, err) < 0) {
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

static void env_name(const struct cf_entry *e, char *buf, size_t sz)
{
    size_t i, n = (size_t)snprintf(buf, sz, "WEBHOOK_INBOX_");
    for (i = 0; e->name[i] && n + 1 < sz; i++)
        buf[n++] = e->name[i] == '-' ? '_' : (char)toupper((unsigned char)e->name[i]);
    buf[n] = '\0';
}

int wi_config_load(struct wi_config *cfg, int argc, char **argv, struct wi_err *err)
{
    size_t i;
    int a;
    const char *file = NULL;

    memset(cfg, 0, sizeof *cfg);
    for (i = 0; i < NENTRIES; i++)
        if (table[i].def && set(cfg, &table[i], table[i].def, "default", err) < 0)
            goto fail;

    /* The file comes first so that the environment and flags override it. */
    file = getenv("WEBHOOK_INBOX_CONFIG");
    for (a = 0; a < argc; a++) {
        if (!strncmp(argv[a], "--config=", 9))
            file = argv[a] + 9;
        else if (!strcmp(argv[a], "--config") && a + 1 < argc)
            file = argv[a + 1];
    }
    if (file && *file) {
        if (set(cfg, find("config", 6), file, "flag", err) < 0 || load_file(cfg, file, err) < 0)
            goto fail;
    }

    if (getenv("DATABASE_URL") && set(cfg, find("database-url", 12), getenv("DATABASE_URL"), "DATABASE_URL", err) < 0)
        goto fail;
    if (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") && *getenv("OTEL_EXPORTER_OTLP_ENDPOINT") &&
        set(cfg, find("otlp-endpoint", 13), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "OTEL_EXPORTER_OTLP_ENDPOINT", err) < 0)
        goto fail;
    for (i = 0; i < NENTRIES; i++) {
        char name[64];
        const char *v;
        if (table[i].flags & CF_CLI || table[i].offset == F(config_file))
            continue;
        env_name(&table[i], name, sizeof name);
        if ((v = getenv(name)) && set(cfg, &table[i], v, name, err) < 0)
            goto fail;
    }

    for (a = 0; a < argc; a++) {
        const char *arg = argv[a], *val = NULL, *name;
        const struct cf_entry *e;
        size_t len;
        char src[80];

        if (!strcmp(arg, "-h")) {
            cfg->help = 1;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            wi_err_set(err, WI_ERR_ARG, "unexpected argument %.60s (options start with --)", arg);
            goto fail;
        }
        name = arg + 2;
        len = strcspn(name, "=");
        if (name[len] == '=')
            val = name + len + 1;
        e = find(name, len);
        if (!e) {
            wi_err_set(err, WI_ERR_ARG, "unknown option --%.*s (see --help)", (int)(len > 60 ? 60 : len), name);
            goto fail;
        }
        if (!val && e->type == CF_BOOL)
            val = "true";
        if (!val) {
            if (a + 1 >= argc) {
                wi_err_set(err, WI_ERR_ARG, "option --%s needs a value", e->name);
                goto fail;
            }
            val = argv[++a];
        }
        if (e->type == CF_DEST && !strchr(val, '=')) {
            /* A bare NAME: the filter of requeue --effects (main.c refuses it elsewhere). The
             * value is not echoed: it may be a mistyped URL holding credentials. */
            if (!wi_dest_name_ok(val)) {
                wi_err_set(err, WI_ERR_ARG, "--destination: a destination name must match [a-z][a-z0-9_]{0,62} "
                           "(requeue --effects --destination NAME; run takes NAME=URL)");
                goto fail;
            }
            if (cfg->effects_destination) {
                wi_err_set(err, WI_ERR_ARG, "--destination NAME: one destination per requeue");
                goto fail;
            }
            if (!(cfg->effects_destination = strdup(val))) {
                wi_err_set(err, WI_ERR_NOMEM, "out of memory");
                goto fail;
            }
            continue;
        }
        snprintf(src, sizeof src, "--%s", e->name);
        if (set(cfg, e, val, src, err) < 0)
            goto fail;
    }

    if (cfg->backoff_cap < cfg->backoff_base) {
        wi_err_set(err, WI_ERR_ARG, "backoff-cap must be >= backoff-base");
        goto fail;
    }
    if (cfg->retain > 0 && cfg->retain < WI_PRUNE_MIN_AGE) {
        wi_err_set(err, WI_ERR_ARG, "retain must be at least 3d (keep done events longer than providers retry)");
        goto fail;
    }
    if (wi_dest_list_resolve(&cfg->destinations, err) < 0)
        goto fail;
    if (wi_citus_node_override(cfg->citus_nodes.v, cfg->citus_nodes.n, NULL, 0, NULL, NULL, NULL, err) < 0)
        goto fail;
    if (wi_redact_url_split(cfg->database_url)) {
        wi_err_set(err, WI_ERR_ARG, "%s", WI_REDACT_SPLIT_MSG); /* never echo the URL */
        goto fail;
    }
    return 0;
fail:
    wi_config_free(cfg);
    return -1;
}

static int strlist_equal(const struct wi_strlist *a, const struct wi_strlist *b)
{
    int i;
    if (a->n != b->n)
        return 0;
    for (i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]))
            return 0;
    return 1;
}

void wi_config_apply_reload(struct wi_config *dst, const struct wi_config *src)
{
    size_t i;
    for (i = 0; i < NENTRIES; i++) {
        const struct cf_entry *e = &table[i];
        char *d = (char *)dst + e->offset;
        const char *s = (const char *)src + e->offset;
        if (e->flags & CF_CLI)
            continue;
        if (!(e->flags & CF_RELOAD)) {
            int changed;
            if (e->type == CF_DEST) {
                changed = !wi_dest_list_equal((const struct wi_dest_list *)d, (const struct wi_dest_list *)s);
            } else if (e->type == CF_LIST) {
                changed = !strlist_equal((const struct wi_strlist *)d, (const struct wi_strlist *)s);
            } else if (e->type == CF_STR) {
                const char *a = *(char *const *)d, *b = *(char *const *)s;
                changed = (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
            } else if (e->type == CF_DURATION) {
                changed = *(const double *)d != *(const double *)s;
            } else {
                changed = *(const int *)d != *(const int *)s;
            }
            if (changed)
                log_warnx("config_not_reloadable", "option=%s note=\"needs a restart\"", e->name);
            continue;
        }
        switch (e->type) {
        case CF_DURATION:
            *(double *)d = *(const double *)s;
            break;
        case CF_STR: /* no reloadable strings today */
            break;
        default:
            *(int *)d = *(const int *)s;
        }
    }
}

void wi_config_free(struct wi_config *cfg)
{
    size_t i;
    if (!cfg)
        return;
    for (i = 0; i < NENTRIES; i++)
        if (table[i].type == CF_STR)
            free(*(char **)((char *)cfg + table[i].offset));
        else if (table[i].type == CF_DEST)
            wi_dest_list_free((struct wi_dest_list *)((char *)cfg + table[i].offset));
        else if (table[i].type == CF_LIST) {
            struct wi_strlist *l = (struct wi_strlist *)((char *)cfg + table[i].offset);
            while (l->n > 0)
                free(l->v[--l->n]);
            free(l->v);
        }
    free(cfg->effects_destination); /* not in the table: the bare-NAME form of --destination */
    memset(cfg, 0, sizeof *cfg);
}

/* The conninfo with any password replaced by "*****"; never prints secrets. */
/* An http(s) URL with its user:password part, if any, as "***". */
static void print_userinfo_masked(const char *url, FILE *out)
{
    const char *rest = url ? strstr(url, "://") : NULL, *at, *slash;

    if (!rest) {
        fputs(url ? url : "", out);
        return;
    }
    rest += 3;
    at = strchr(rest, '@');
    slash = strchr(rest, '/');
    if (at && (!slash || at < slash))
        fprintf(out, "%.*s***%s", (int)(rest - url), url, at);
    else
        fputs(url, out);
}

static void print_url(const char *url, FILE *out)
{
    PQconninfoOption *opts, *o;
    char *errmsg = NULL;
    int first = 1;

    if (!url || !*url) {
        fputs("\"\"", out);
        return;
    }
    /* libpq would put part of such a password in host or dbname: print none of it. */
    if (wi_redact_url_split(url)) {
        fputs("(hidden: password with an unencoded '@' or '/')", out);
        return;
    }
    opts = PQconninfoParse(url, &errmsg);
    if (!opts) {
        fputs("(unparsable)", out);
        PQfreemem(errmsg);
        return;
    }
    for (o = opts; o->keyword; o++) {
        if (!o->val)
            continue;
        fprintf(out, "%s%s=%s", first ? "" : " ", o->keyword, strstr(o->keyword, "password") ? "*****" : o->val); /* sslpassword too */
        first = 0;
    }
    PQconninfoFree(opts);
}

void wi_config_print(const struct wi_config *cfg, FILE *out)
{
    size_t i;
    for (i = 0; i < NENTRIES; i++) {
        const struct cf_entry *e = &table[i];
        const char *p = (const char *)cfg + e->offset;
        if (e->flags & CF_CLI)
            continue;
        if (e->type == CF_DEST) { /* one line each, credentials masked */
            wi_dest_list_print((const struct wi_dest_list *)p, out);
            continue;
        }
        if (e->type == CF_LIST) { /* one line each; these hold no credentials (the environment does) */
            const struct wi_strlist *l = (const struct wi_strlist *)p;
            for (int k = 0; k < l->n; k++)
                fprintf(out, "%s = %s  # restart to change\n", e->name, l->v[k]);
            continue;
        }
        fprintf(out, "%s = ", e->name);
        switch (e->type) {
        case CF_STR:
            if (e->offset == F(database_url))
                print_url(*(char *const *)p, out);
            else if (e->offset == F(otlp_endpoint))
                print_userinfo_masked(*(char *const *)p, out);
            else
                fputs(*(char *const *)p ? *(char *const *)p : "", out);
            break;
        case CF_INT:
            fprintf(out, "%d", *(const int *)p);
            break;
        case CF_DURATION:
            fprintf(out, "%.15gs", *(const double *)p); /* 7776000s, not 7.776e+06s */
            break;
        case CF_ENUM:
            fputs(e->enums[*(const int *)p], out);
            break;
        case CF_BOOL:
            fputs(*(const int *)p ? "true" : "false", out);
            break;
        case CF_DEST:
        case CF_LIST:
            break;
        }
        fprintf(out, "%s\n", e->flags & CF_RELOAD ? "" : "  # restart to change");
    }
}

const char *wi_config_unrouted_name(int unrouted)
{
    return unrouted >= 0 && unrouted < (int)(sizeof unrouted_names / sizeof unrouted_names[0]) - 1
               ? unrouted_names[unrouted]
               : "wait";
}

void wi_config_usage(FILE *out)
{
    size_t i;
    for (i = 0; i < NENTRIES; i++) {
        const struct cf_entry *e = &table[i];
        char env[64] = "";
        if (!(e->flags & CF_CLI) && e->offset != F(config_file))
            env_name(e, env, sizeof env);
        fprintf(out, "  --%-14s %s%s%s%s%s%s\n", e->name, e->help, e->def && !(e->flags & CF_CLI) && *e->def ? " [" : "",
                e->def && !(e->flags & CF_CLI) && *e->def ? e->def : "", e->def && !(e->flags & CF_CLI) && *e->def ? "]" : "",
                *env ? "  $" : "", env);
    }
}
