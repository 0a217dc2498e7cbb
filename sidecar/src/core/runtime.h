/* runtime.h - what main and the threads it starts (workers, listener, outbox) share while
 * the process runs: the effective configuration under its lock, the stop flag and its
 * descriptor, and the NOTIFY hand-off. A header alone: no functions but an inline nap. */
#ifndef WI_RUNTIME_H
#define WI_RUNTIME_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include "claim/wake.h"
#include "core/config.h"

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

#endif
