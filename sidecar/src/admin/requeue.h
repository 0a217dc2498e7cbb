/* requeue.h - `requeue`: quarantined events (or with --replay, done ones) back to pending
 * with attempts reset, audited. */
#ifndef WI_REQUEUE_H
#define WI_REQUEUE_H

#include "wi_err.h"

/* Filters (NULL = any; type "prefix*" matches a prefix); at least one must be set unless
 * all is 1 (refused with replay: every done event would run again). replay 0 moves
 * quarantined rows, 1 done rows. Records one webhook_inbox_actions row (action requeue or
 * replay, the filter, the count, actor) in the same statement, and wakes the workers
 * (webhook_inbox_requeue()). Needs the current schema. Returns the number of events moved,
 * or -1 with *err. */
long wi_requeue(const char *conninfo, int replay, const char *scope, const char *event_id, const char *type, int all,
                const char *actor, struct wi_err *err);

#endif
