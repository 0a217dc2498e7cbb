/* requeue.h - `requeue`: quarantined events back to pending with attempts reset. */
#ifndef WI_REQUEUE_H
#define WI_REQUEUE_H

#include "wi_err.h"

/* Filters (NULL = any); at least one must be set unless all is 1. Returns the number of
 * requeued events, or -1 with *err. Wakes the workers with NOTIFY webhook_inbox. */
long wi_requeue(const char *conninfo, const char *scope, const char *event_id, const char *type, int all,
                struct wi_err *err);

#endif
