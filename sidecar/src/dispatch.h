/* dispatch.h - running one claimed event's handler through webhook_inbox_dispatch(): the
 * route lookup, a subtransaction (savepoint) around the handler, and done/quarantined. */
#ifndef WI_DISPATCH_H
#define WI_DISPATCH_H

#include "claim.h"
#include "pgw.h"

extern const struct wi_pg_stmt wi_dispatch_stmt;

/* Dispatches e inside the caller's open transaction and fills e->result, e->detail,
 * e->latency_ms. unrouted is "ignore", "quarantine" or "retry". Returns 0, or -1 with
 * *err when the statement itself failed (the transaction is then aborted). */
int wi_dispatch(struct wi_pg *pg, struct wi_event *e, const char *unrouted, struct wi_err *err);

#endif
