/* worker.h - the run loop of one worker connection: claim a batch, dispatch each event,
 * commit, record transient failures, wait for NOTIFY or the poll interval, reconnect. */
#ifndef WI_WORKER_H
#define WI_WORKER_H

#include <pthread.h>
#include "citus/citus.h"
#include "core/runtime.h"

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
