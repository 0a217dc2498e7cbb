/* reconcile_sched.c - `run --reconcile NAME=INTERVAL`: one thread walking each named
 * endpoint every interval; the endpoint's advisory lock (reconcile.c) makes one sidecar of
 * many walk it, the others skip that round. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/duration.h"
#include "core/log.h"
#include "observability/metrics.h"

#define FIRST_S 5.0    /* the first walk, after start */
#define MIN_INTERVAL_S 60.0

struct job {
    struct wi_rc_endpoint ep;
    double interval, next;
};

struct wi_rc_sched {
    char *conninfo;
    double reach;        /* --since: how far back a first walk goes */
    struct job *jobs;
    int n;
    atomic_int stopping;
    pthread_t thread;
};

static void walk(struct wi_rc_sched *s, struct job *j)
{
    struct wi_rc_counts c;
    struct wi_err err;
    double t0 = wi_clock_s();
    int rc = wi_reconcile(s->conninfo, &j->ep, -s->reach, &s->stopping, &c, &err);

    if (rc < 0 && atomic_load(&s->stopping))
        return; /* cut short by the shutdown: neither a failure nor a walk */
    wi_metrics_reconcile(j->ep.name, rc == 0 ? WI_M_RC_LOCKED : rc > 0 ? WI_M_RC_COMPLETE : WI_M_RC_FAILED, c.recovered);
    if (rc == 0)
        log_debug("reconcile_skipped", "endpoint=%s note=\"another sidecar is walking it\"", j->ep.name);
    else if (rc > 0)
        log_info("reconcile",
                 "endpoint=%s pages=%ld listed=%ld recovered=%ld skipped=%ld waits=%ld marked=%ld resumed=%d ms=%.0f",
                 j->ep.name, c.pages, c.listed, c.recovered, c.skipped, c.waits, c.marked, c.resumed,
                 (wi_clock_s() - t0) * 1000);
    else
        log_warnx("reconcile_failed", "endpoint=%s pages=%ld recovered=%ld error=%s note=\"the next walk resumes\"",
                  j->ep.name, c.pages, c.recovered, WI_LOG_Q(err.msg));
}

static void *sched_main(void *arg)
{
    struct wi_rc_sched *s = arg;
    while (!atomic_load(&s->stopping)) {
        struct timespec ts = {0, 200 * 1000000L};
        for (int i = 0; i < s->n && !atomic_load(&s->stopping); i++) {
            if (wi_clock_s() < s->jobs[i].next)
                continue;
            walk(s, &s->jobs[i]);
            s->jobs[i].next = wi_clock_s() + s->jobs[i].interval;
        }
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void sched_free(struct wi_rc_sched *s)
{
    for (int i = 0; i < s->n; i++)
        wi_rc_endpoint_clear(&s->jobs[i].ep);
    free(s->jobs);
    free(s->conninfo);
    free(s);
}

struct wi_rc_sched *wi_rc_sched_start(const struct wi_config *cfg, struct wi_err *err)
{
    struct wi_rc_sched *s = calloc(1, sizeof *s);

    if (!s || !(s->jobs = calloc((size_t)cfg->reconciles.n, sizeof *s->jobs)) ||
        !(s->conninfo = strdup(cfg->database_url))) {
        if (s)
            sched_free(s);
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->reach = cfg->since;
    for (int i = 0; i < cfg->reconciles.n; i++) {
        const char *spec = cfg->reconciles.v[i], *eq = strchr(spec, '=');
        char name[64];
        struct job *j = &s->jobs[s->n];
        if (!eq || eq - spec >= (long)sizeof name || wi_duration_parse(eq + 1, &j->interval) < 0 ||
            j->interval < MIN_INTERVAL_S) {
            wi_err_set(err, WI_ERR_ARG, "--reconcile: expected NAME=INTERVAL with an interval of at least 1m");
            sched_free(s);
            return NULL;
        }
        memcpy(name, spec, (size_t)(eq - spec));
        name[eq - spec] = '\0';
        if (wi_rc_endpoint_find(cfg, name, &j->ep, err) < 0) {
            sched_free(s);
            return NULL;
        }
        j->next = wi_clock_s() + (j->interval < FIRST_S ? j->interval : FIRST_S);
        wi_metrics_reconcile_endpoint(name);
        s->n++;
        log_info("reconcile_scheduled", "endpoint=%s provider=%s interval_s=%.0f first_in_s=%.0f", name,
                 j->ep.api->name, j->interval, j->interval < FIRST_S ? j->interval : FIRST_S);
    }
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        wi_err_set(err, WI_ERR_IO, "cannot start the reconcile thread");
        sched_free(s);
        return NULL;
    }
    return s;
}

void wi_rc_sched_stop(struct wi_rc_sched *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1);
    pthread_join(s->thread, NULL);
    sched_free(s);
}
