/* worker.h - the run loop of one worker connection: claim a batch, dispatch each event,
 * commit, record transient failures, wait for NOTIFY or the poll interval, reconnect. */
#ifndef WI_WORKER_H
#define WI_WORKER_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include "citus/citus.h"
#include "core/config.h"
#include "claim/wake.h"

/* Shared by main and every worker thread.
 * Invariant: cfg's non-reloadable fields (database_url, concurrency) never change while
 * workers run; reloadable scalars change only under lock. */
struct wi_runtime {
    pthread_mutex_t lock;  /* guards cfg */
    struct wi_config cfg;  /* effective configuration */
    atomic_int stopping;   /* 1 after the first SIGTERM/SIGINT */
    atomic_int alive;      /* workers still running */
    atomic_int failed;     /* a --once worker could not do its job */
    int stop_fd;           /* readable once stopping (nobody reads it) */
    int wake_fd;           /* a worker writes here when it exits, to wake main */
    struct wi_wake claims; /* which worker claims after a NOTIFY (wake.h) */
};

/* Sleeps up to seconds, or less when stopping (rt->stop_fd becomes readable). */
static inline void wi_runtime_nap(struct wi_runtime *rt, double seconds)
{
    struct pollfd p = {rt->stop_fd, POLLIN, 0};
    if (!atomic_load(&rt->stopping))
        (void)poll(&p, 1, (int)(seconds * 1000));
}

struct wi_worker {
    int id;
    struct wi_runtime *rt;
    pthread_t thread;
    struct wi_citus_shards shards; /* Citus layout: the shards its batches cycle through (n = 0 elsewhere) */
};

/* Thread entry point: runs until rt->stopping (after finishing the transaction in
 * flight) or, with cfg.once, until nothing is due. arg is a struct wi_worker. */
void *wi_worker_main(void *arg);

#endif
