/* notify.c - operational notifications: the `run --notify` thread calling
 * webhook_inbox_alerts_check (db/functions/alerts.sql: the advisory lock there makes one
 * sidecar of many check; the messages are outbox effects, delivered by the deliverer) and
 * logging each change told; and `notify --test`. */
#define _POSIX_C_SOURCE 200809L
#include "observability/notify.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "pg/pgw.h"
#include "pg/schema.h"

#define FIRST_S 3.0  /* the first check, after start */

static const struct wi_pg_stmt check_stmt = {
    "wi_notify_check",
    "SELECT condition, state, summary FROM webhook_inbox_alerts_check($1::text[], $2::text[], $3::jsonb)"};
/* notify --test: record the messages, then read each one's delivery. */
static const struct wi_pg_stmt test_stmts[2] = {
    {"wi_notify_test", "SELECT destination, operation_id FROM webhook_inbox_alerts_test($1::text[], $2::text[])"},
    {"wi_notify_outcome",
     "SELECT status, coalesce(response_status::text, ''), coalesce(last_error, '') FROM webhook_inbox_outbox"
     " WHERE source_scope = '' AND operation_id = $1"}};

/* Invariant: pg is NULL or an open connection with check_stmt prepared. */
struct wi_notify {
    char *conninfo;
    char dests[WI_NOTIFY_TARGETS_MAX], formats[WI_NOTIFY_TARGETS_MAX], settings[WI_NOTIFY_TARGETS_MAX];
    double interval;
    atomic_int stopping;
    pthread_t thread;
    struct wi_pg *pg;
};

/* Appends text to buf (at *used of cap); -1 when it does not fit. */
static int put(char *buf, size_t cap, size_t *used, const char *text, size_t n)
{
    if (*used + n + 1 > cap)
        return -1;
    memcpy(buf + *used, text, n);
    *used += n;
    buf[*used] = '\0';
    return 0;
}

static int is_number(const char *s)
{
    int digits = 0, dot = 0;
    for (; *s; s++) {
        if (*s >= '0' && *s <= '9')
            digits++;
        else if (*s == '.' && !dot && digits)
            dot = 1;
        else
            return 0;
    }
    return digits > 0 && s[-1] != '.';
}

int wi_notify_targets(const struct wi_config *cfg, char *dests, size_t dests_len, char *formats,
                      size_t formats_len, char *settings, size_t settings_len, struct wi_err *err)
{
    size_t d = 0, f = 0, s = 0;

    if (put(dests, dests_len, &d, "{", 1) || put(formats, formats_len, &f, "{", 1) || put(settings, settings_len, &s, "{", 1))
        return wi_err_set(err, WI_ERR_ARG, "--notify: too many values");
    for (int i = 0; i < cfg->notifies.n; i++) {
        const char *spec = cfg->notifies.v[i], *colon = strchr(spec, ':');
        size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
        const char *format = colon ? colon + 1 : "json";
        char name[WI_DEST_NAME_MAX + 1];
        int known = 0;

        if (n == 0 || n > WI_DEST_NAME_MAX)
            return wi_err_set(err, WI_ERR_ARG, "--notify: expected NAME[:json|:slack], NAME a --destination");
        memcpy(name, spec, n);
        name[n] = '\0';
        for (int k = 0; k < cfg->destinations.n; k++)
            known |= !strcmp(cfg->destinations.v[k].name, name);
        if (!known)
            return wi_err_set(err, WI_ERR_ARG, "--notify %s: no --destination of that name (a message needs its URL)", name);
        if (strcmp(format, "json") && strcmp(format, "slack"))
            return wi_err_set(err, WI_ERR_ARG, "--notify %s: the format is json or slack", name);
        if ((i && (put(dests, dests_len, &d, ",", 1) || put(formats, formats_len, &f, ",", 1))) ||
            put(dests, dests_len, &d, name, n) || put(formats, formats_len, &f, format, strlen(format)))
            return wi_err_set(err, WI_ERR_ARG, "--notify: too many values");
    }
    for (int i = 0; i < cfg->notify_settings.n; i++) {
        const char *spec = cfg->notify_settings.v[i], *eq = strchr(spec, '=');
        size_t n = eq ? (size_t)(eq - spec) : 0;

        if (!eq || n == 0 || strspn(spec, "abcdefghijklmnopqrstuvwxyz_") != n || !is_number(eq + 1))
            return wi_err_set(err, WI_ERR_ARG, "--notify-setting: expected KEY=NUMBER (lowercase key, a number >= 0)");
        if ((i && put(settings, settings_len, &s, ", ", 2)) || put(settings, settings_len, &s, "\"", 1) ||
            put(settings, settings_len, &s, spec, n) || put(settings, settings_len, &s, "\": ", 3) ||
            put(settings, settings_len, &s, eq + 1, strlen(eq + 1)))
            return wi_err_set(err, WI_ERR_ARG, "--notify-setting: too many values");
    }
    if (put(dests, dests_len, &d, "}", 1) || put(formats, formats_len, &f, "}", 1) || put(settings, settings_len, &s, "}", 1))
        return wi_err_set(err, WI_ERR_ARG, "--notify: too many values");
    return 0;
}

/* Connects (once) and checks the schema. Returns 0, or -1 with *err (the connection closed). */
static int connect_once(const char *conninfo, struct wi_pg **pg, const struct wi_pg_stmt *stmts, int n, struct wi_err *err)
{
    if (*pg && wi_pg_ok(*pg))
        return 0;
    wi_pg_free(*pg);
    if (!(*pg = wi_pg_connect(conninfo, wi_schema_stmts, wi_schema_stmts_count, err)))
        return -1;
    if (wi_schema_require(*pg, err) < 0 || wi_pg_prepare(*pg, stmts, n, err) < 0) {
        wi_pg_free(*pg);
        *pg = NULL;
        return -1;
    }
    return 0;
}

static void check(struct wi_notify *nt)
{
    const char *params[3] = {nt->dests, nt->formats, nt->settings};
    struct wi_err err;
    PGresult *res;

    if (connect_once(nt->conninfo, &nt->pg, &check_stmt, 1, &err) < 0 ||
        !(res = wi_pg_exec(nt->pg, check_stmt.name, 3, params, PGRES_TUPLES_OK, &err))) {
        log_warnx("notify_check_failed", "error=%s note=\"checked again in --notify-interval\"", WI_LOG_Q(err.msg));
        if (nt->pg && !wi_pg_ok(nt->pg)) {
            wi_pg_free(nt->pg);
            nt->pg = NULL;
        }
        return;
    }
    for (int i = 0; i < PQntuples(res); i++)
        log_info("notify_told", "condition=%s state=%s summary=%s", WI_LOG_Q(PQgetvalue(res, i, 0)), PQgetvalue(res, i, 1),
                 WI_LOG_Q(PQgetvalue(res, i, 2)));
    PQclear(res);
}

static void *notify_main(void *arg)
{
    struct wi_notify *nt = arg;
    double next = wi_clock_s() + (nt->interval < FIRST_S ? nt->interval : FIRST_S);

    while (!atomic_load(&nt->stopping)) {
        struct timespec ts = {0, 100 * 1000000L};
        if (wi_clock_s() >= next) {
            check(nt);
            next = wi_clock_s() + nt->interval;
        }
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void notify_free(struct wi_notify *nt)
{
    wi_pg_free(nt->pg);
    free(nt->conninfo);
    free(nt);
}

struct wi_notify *wi_notify_start(const struct wi_config *cfg, struct wi_err *err)
{
    struct wi_notify *nt = calloc(1, sizeof *nt);

    if (!nt || !(nt->conninfo = strdup(cfg->database_url))) {
        free(nt);
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (wi_notify_targets(cfg, nt->dests, sizeof nt->dests, nt->formats, sizeof nt->formats, nt->settings,
                          sizeof nt->settings, err) < 0) {
        notify_free(nt);
        return NULL;
    }
    nt->interval = cfg->notify_interval;
    if (pthread_create(&nt->thread, NULL, notify_main, nt) != 0) {
        wi_err_set(err, WI_ERR_IO, "cannot start the notify thread");
        notify_free(nt);
        return NULL;
    }
    log_info("notify_on", "destinations=%s formats=%s interval_s=%.0f", nt->dests, nt->formats, nt->interval);
    return nt;
}

void wi_notify_stop(struct wi_notify *nt)
{
    if (!nt)
        return;
    atomic_store(&nt->stopping, 1);
    pthread_join(nt->thread, NULL);
    notify_free(nt);
}

int wi_notify_test(const struct wi_config *cfg, double wait_s, FILE *out)
{
    char dests[WI_NOTIFY_TARGETS_MAX], formats[WI_NOTIFY_TARGETS_MAX], settings[WI_NOTIFY_TARGETS_MAX];
    const char *params[2] = {dests, formats};
    struct wi_pg *pg = NULL;
    struct wi_err err;
    PGresult *ids;
    int rc = 0;

    if (cfg->notifies.n == 0) {
        fprintf(stderr, "webhook-inbox-sidecar notify: name the destinations with --notify NAME[:json|:slack]\n");
        return 2;
    }
    if (wi_notify_targets(cfg, dests, sizeof dests, formats, sizeof formats, settings, sizeof settings, &err) < 0) {
        fprintf(stderr, "webhook-inbox-sidecar notify: %s\n", err.msg);
        return 2;
    }
    if (connect_once(cfg->database_url, &pg, test_stmts, 2, &err) < 0 ||
        !(ids = wi_pg_exec(pg, test_stmts[0].name, 2, params, PGRES_TUPLES_OK, &err))) {
        fprintf(stderr, "webhook-inbox-sidecar notify: %s\n", err.msg);
        wi_pg_free(pg);
        return 1;
    }
    for (int i = 0; i < PQntuples(ids); i++) {
        const char *id[1] = {PQgetvalue(ids, i, 1)};
        double deadline = wi_clock_s() + wait_s;
        char status[16] = "pending", http[8] = "", why[240] = "";

        while (!strcmp(status, "pending") && wi_clock_s() < deadline) {
            PGresult *r = wi_pg_exec(pg, test_stmts[1].name, 1, id, PGRES_TUPLES_OK, &err);
            if (!r)
                break;
            if (PQntuples(r) == 1) {
                snprintf(status, sizeof status, "%s", PQgetvalue(r, 0, 0));
                snprintf(http, sizeof http, "%s", PQgetvalue(r, 0, 1));
                snprintf(why, sizeof why, "%s", PQgetvalue(r, 0, 2));
            }
            PQclear(r);
            if (!strcmp(status, "pending"))
                poll(NULL, 0, 200);
        }
        if (!strcmp(status, "delivered")) {
            fprintf(out, "%s: delivered (HTTP %s), operation %s\n", PQgetvalue(ids, i, 0), http, id[0]);
        } else if (!strcmp(status, "quarantined")) {
            fprintf(out, "%s: quarantined: %s (operation %s)\n", PQgetvalue(ids, i, 0), why, id[0]);
            rc = 1;
        } else {
            fprintf(out, "%s: not delivered within %.0f s%s%s: is a sidecar running with --destination %s? "
                    "(operation %s stays in the outbox)\n", PQgetvalue(ids, i, 0), wait_s, *why ? "; last error: " : "",
                    why, PQgetvalue(ids, i, 0), id[0]);
            rc = 1;
        }
    }
    PQclear(ids);
    wi_pg_free(pg);
    return rc;
}
