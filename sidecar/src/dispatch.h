/* dispatch.h - running one claimed event's handler through webhook_inbox_dispatch(): the
 * route lookup, a subtransaction (savepoint) around the handler, and done/quarantined. */
#ifndef WI_DISPATCH_H
#define WI_DISPATCH_H

#include "claim.h"
#include "pgw.h"

extern const struct wi_pg_stmt wi_dispatch_stmt;
extern const struct wi_pg_stmt wi_dispatch_batch_stmt;

/* Dispatches e inside the caller's open transaction and fills e->result, e->detail,
 * e->latency_ms. unrouted is "ignore", "quarantine" or "retry". Returns 0, or -1 with
 * *err when the statement itself failed (the transaction is then aborted). */
int wi_dispatch(struct wi_pg *pg, struct wi_event *e, const char *unrouted, struct wi_err *err);

/* The usual path, a whole transaction in one round trip: BEGIN, the batch statement and
 * COMMIT pipelined. The statement (webhook_inbox_dispatch_batch()) claims up to limit due
 * events FOR UPDATE SKIP LOCKED, runs each handler in its own savepoint and marks
 * done/quarantined. Fills *b (previous content freed) with one entry per event. Returns
 * the number committed, or -1 with *err: the transaction was rolled back, *b is empty,
 * and the caller redoes the batch one statement per event to find the event at fault. */
int wi_dispatch_batch_tx(struct wi_pg *pg, int limit, const char *unrouted, struct wi_batch *b, struct wi_err *err);

#endif
