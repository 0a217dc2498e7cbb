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

/* Batched fast path: claims up to limit due events and dispatches each in ONE statement
 * (claim subquery FOR UPDATE SKIP LOCKED, LATERAL webhook_inbox_dispatch() per row), inside
 * the caller's open transaction; one round trip per batch, still one savepoint per event.
 * Fills *b (previous content freed). Returns the number of events, or -1 with *err when
 * the statement failed: the transaction is then aborted and the caller should roll back
 * and redo the batch one statement per event to find the event at fault. */
int wi_dispatch_batch(struct wi_pg *pg, int limit, const char *unrouted, struct wi_batch *b, struct wi_err *err);

#endif
