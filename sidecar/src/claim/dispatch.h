/* dispatch.h - running claimed events' handlers through the v4 dispatch functions
 * (db/functions/claim_dispatch.sql): the route lookup, a subtransaction (savepoint) around each
 * handler, and every result recorded in the claiming transaction. */
#ifndef WI_DISPATCH_H
#define WI_DISPATCH_H

#include "claim/claim.h"
#include "pg/pgw.h"

extern const struct wi_pg_stmt wi_dispatch_stmt;
extern const struct wi_pg_stmt wi_dispatch_batch_stmt;

/* What to do with a failed or unrouted event, passed to every dispatch statement. */
struct wi_policy {
    const char *unrouted;         /* "wait", "ignore", "quarantine", "retry" */
    int max_attempts;             /* transient failures before quarantine */
    long long backoff_base_ms;    /* retry delay = min(cap, base * 2^attempts), equal jitter */
    long long backoff_cap_ms;
    long long unrouted_delay_ms;  /* wait: next look at an unrouted event */
};

/* Dispatches e inside the caller's open transaction (webhook_inbox_dispatch(): lock, run,
 * record done / quarantined / retry charged / waiting) and fills e->result, e->detail,
 * e->latency_ms, e->charged, e->retry_in_ms. Returns 0, or -1 with *err when the statement
 * itself failed (the transaction, or the caller's savepoint, is then aborted). */
int wi_dispatch(struct wi_pg *pg, struct wi_event *e, const struct wi_policy *p, struct wi_err *err);

/* The usual path, a whole transaction in one round trip: BEGIN, the batch statement and
 * COMMIT pipelined. The statement (webhook_inbox_dispatch_batch()) claims up to limit due
 * events FOR UPDATE SKIP LOCKED, runs each handler in its own savepoint and records every
 * result, transient failures included, in that transaction. Fills *b (previous content
 * freed) with one entry per event. Returns the number committed, or -1 with *err: the
 * transaction was rolled back, *b is empty, and the caller redoes the batch one statement
 * per event to find the event at fault. */
int wi_dispatch_batch_tx(struct wi_pg *pg, int limit, const struct wi_policy *p, struct wi_batch *b,
                         struct wi_err *err);

/* The same batch through the prepared statement `name`, a keyed form of the batch function
 * (parameters: key, lock_timeout for the batch's transaction, then those of
 * wi_dispatch_batch_stmt; the same columns) run as one statement outside a transaction block,
 * which is then its own transaction (Citus pushes such a call of a distributed function down
 * to the key's node: citus.c). Fills *b (previous content freed). Returns the number
 * committed, or -1 with *err (rolled back, *b empty). */
int wi_dispatch_batch_keyed(struct wi_pg *pg, const char *name, const char *key, const char *lock_timeout, int limit,
                            const struct wi_policy *p, struct wi_batch *b, struct wi_err *err);

/* 1 when err is a dispatch statement's refusal because a route the batch takes names a handler
 * missing on the node that ran it (SQLSTATE WIH01, webhook_inbox_route_proc in
 * db/functions/claim_dispatch.sql): raised before any handler ran, its transaction rolled back,
 * nothing charged. Not an event's fault: the caller charges nothing and tries again later. */
int wi_dispatch_handler_missing(const struct wi_err *err);

/* Logs such a refusal as an error (the server's message: the function, the route, the node),
 * at most once a minute per message. worker: the worker's number. */
void wi_dispatch_log_missing(int worker, const struct wi_err *err);

#endif
