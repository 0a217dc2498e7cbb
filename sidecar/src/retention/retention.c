/* retention.c - scheduled pruning for `run --retain`: sleep, take (or keep) the retention
 * lock, empty old done events, delete the emptied ones older than --remember-pruned, then
 * old delivered effects, in batches of WI_RETENTION_BATCH, log one line. */
#define _POSIX_C_SOURCE 200809L
#include "core/clock.h"
#include "retention/retention.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "citus/citus.h"
#include "core/log.h"
#include "observability/metrics.h"
#include "pg/pgw.h"
#include "pg/schema.h"
#include "retention/prune.h"

/* Invariant: leader == 1 only while pg is open and its session holds the lock. */
struct wi_retention {
    const char *conninfo;   /* borrowed */
    double retain, remember, interval;
    int stop_pipe[2];
    atomic_int stopping;
    pthread_t thread;
    struct wi_pg *pg;
    int leader;
};

static const struct wi_pg_stmt lock_stmt = {"wi_retention_lock", "SELECT pg_try_advisory_lock($1::bigint)"};

static void drop(struct wi_retention *r)
{
    wi_pg_free(r->pg); /* ending the session releases the lock */
    r->pg = NULL;
    r->leader = 0;
}

/* Connects (once), and takes the lock unless held. Returns 1 when this sidecar is the one
 * to prune, 0 when another one is (the connection is then closed), -1 with *err. */
static int lead(struct wi_retention *r, struct wi_err *err)
{
    const char *params[1] = {WI_RETENTION_LOCK_KEY};
    PGresult *res;
    int got;

    if (r->leader)
        return 1;
    if (!r->pg) {
        if (!(r->pg = wi_pg_connect(r->conninfo, wi_schema_stmts, wi_schema_stmts_count, err)))
            return -1;
        if (wi_schema_require(r->pg, err) < 0 || wi_pg_prepare(r->pg, &lock_stmt, 1, err) < 0 ||
            wi_prune_prepare(r->pg, WI_SCHEMA_VERSION, err) < 0) {
            drop(r);
            return -1;
        }
    }
    if (!(res = wi_pg_exec(r->pg, lock_stmt.name, 1, params, PGRES_TUPLES_OK, err))) {
        drop(r);
        return -1;
    }
    got = PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (!got) {
        drop(r); /* no idle connection on the sidecars that do not prune */
        return 0;
    }
    r->leader = 1;
    return 1;
}

/* What one scheduled run did (also before a failure). */
struct run_counts {
    long pruned;    /* events emptied */
    long forgotten; /* emptied events deleted: their keys are new again */
    long effects;   /* delivered effects deleted */
    int batches;    /* statements, all kinds */
};

/* One scheduled run: returns 1 when this sidecar pruned, 0 when another one holds the lock,
 * -1 with *err; *c counts what was done. lead() required the schema (ours, v8 on): emptied
 * rows, the outbox and their indexes exist. */
static int run_once(struct wi_retention *r, struct run_counts *c, struct wi_err *err)
{
    long n;
    int rc = lead(r, err);

    if (rc <= 0)
        return rc;
    do {
        if ((n = wi_prune_step(r->pg, WI_SCHEMA_VERSION, r->retain, NULL, WI_RETENTION_BATCH, err)) < 0)
            return -1;
        c->pruned += n;
        c->batches++;
        wi_metrics_add(WI_M_PRUNED, n);
    } while (n == WI_RETENTION_BATCH && !atomic_load(&r->stopping));
    do {
        if ((n = wi_forget_step(r->pg, WI_SCHEMA_VERSION, r->remember, NULL, WI_RETENTION_BATCH, err)) < 0)
            return -1;
        c->forgotten += n;
        c->batches++;
    } while (n == WI_RETENTION_BATCH && !atomic_load(&r->stopping));
    while (!atomic_load(&r->stopping)) {
        if ((n = wi_prune_effects_step(r->pg, r->retain, NULL, WI_RETENTION_BATCH, err)) < 0)
            return -1;
        c->effects += n;
        c->batches++;
        wi_metrics_add(WI_M_PRUNED_EFFECTS, n);
        if (n < WI_RETENTION_BATCH)
            break;
    }
    return 1;
}

static void *retention_main(void *arg)
{
    struct wi_retention *r = arg;
    double next = wi_clock_s() + (r->interval < WI_RETENTION_FIRST_S ? r->interval : WI_RETENTION_FIRST_S);

    for (;;) {
        struct pollfd p = {r->stop_pipe[0], POLLIN, 0};
        double wait = next - wi_clock_s(), t0;
        struct wi_err err;
        struct run_counts c = {0, 0, 0, 0};
        int was_leader, rc;

        if (wait > 0 && poll(&p, 1, (int)(wait * 1000) + 1) < 0 && errno != EINTR)
            break;
        if (atomic_load(&r->stopping))
            break;
        if (wi_clock_s() < next)
            continue;
        next += r->interval;
        if (next < wi_clock_s())
            next = wi_clock_s() + r->interval;
        t0 = wi_clock_s();
        was_leader = r->leader;
        rc = run_once(r, &c, &err);
        if (rc < 0 && was_leader && c.batches == 0) {
            drop(r); /* the kept connection may have gone away meanwhile: once more, on a new one */
            rc = run_once(r, &c, &err);
        }
        if (rc == 0)
            log_debug("retention_skipped", "note=\"another sidecar holds the retention lock\"");
        else if (rc > 0)
            log_info("retention", "pruned=%ld forgotten=%ld effects_deleted=%ld older_than_s=%.0f remember_s=%.0f "
                     "batches=%d ms=%.0f", c.pruned, c.forgotten, c.effects, r->retain, r->remember, c.batches,
                     (wi_clock_s() - t0) * 1000);
        else {
            log_warnx("retention_failed", "pruned=%ld forgotten=%ld effects_deleted=%ld error=%s "
                      "note=\"trying again at the next interval\"", c.pruned, c.forgotten, c.effects, WI_LOG_Q(err.msg));
            drop(r);
        }
    }
    drop(r);
    return NULL;
}

struct wi_retention *wi_retention_start(const char *conninfo, double retain, double remember, double interval,
                                        struct wi_err *err)
{
    struct wi_retention *r = calloc(1, sizeof *r);

    if (!r) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->conninfo = conninfo;
    r->retain = retain;
    r->remember = remember;
    r->interval = interval;
    if (pipe(r->stop_pipe) < 0) {
        wi_err_set(err, WI_ERR_IO, "pipe: %s", strerror(errno));
        free(r);
        return NULL;
    }
    fcntl(r->stop_pipe[1], F_SETFL, O_NONBLOCK);
    if (pthread_create(&r->thread, NULL, retention_main, r) != 0) {
        wi_err_set(err, WI_ERR_IO, "cannot start the retention thread");
        close(r->stop_pipe[0]);
        close(r->stop_pipe[1]);
        free(r);
        return NULL;
    }
    log_info("retention_scheduled", "older_than_s=%.0f remember_s=%.0f interval_s=%.0f first_in_s=%.0f", retain, remember,
             interval, interval < WI_RETENTION_FIRST_S ? interval : WI_RETENTION_FIRST_S);
    return r;
}

void wi_retention_stop(struct wi_retention *r)
{
    if (!r)
        return;
    atomic_store(&r->stopping, 1);
    (void)!write(r->stop_pipe[1], "s", 1);
    pthread_join(r->thread, NULL);
    close(r->stop_pipe[0]);
    close(r->stop_pipe[1]);
    free(r);
}
