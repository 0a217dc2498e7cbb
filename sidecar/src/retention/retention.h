/* retention.h - `run --retain AGE`: a thread that empties done events older than AGE (and
 * deletes emptied ones older than --remember-pruned) and deletes delivered outbox effects
 * older than AGE every --retain-interval, in small batches, on one sidecar of many: the one
 * holding a session advisory lock, kept (with its connection) for as long as it lives. */
#ifndef WI_RETENTION_H
#define WI_RETENTION_H

#include "wi_err.h"

struct wi_retention;

#define WI_RETENTION_LOCK_KEY "7310582026110402" /* arbitrary, constant: "webhook_inbox retention" */
#define WI_RETENTION_BATCH 1000                  /* rows per statement (one short transaction each) */
#define WI_RETENTION_FIRST_S 30.0                /* the first run, after start (or the interval if shorter) */

/* Starts the thread; conninfo is borrowed (must outlive it). retain >= WI_PRUNE_MIN_AGE,
 * remember >= 0 and interval > 0 (the configuration checks them). Call with every signal
 * blocked. Returns NULL with *err if the thread cannot start. */
struct wi_retention *wi_retention_start(const char *conninfo, double retain, double remember, double interval,
                                        struct wi_err *err);

/* Stops the thread (a delete batch in flight finishes first), closes its connection (which
 * releases the lock) and frees; accepts NULL. */
void wi_retention_stop(struct wi_retention *r);

#endif
