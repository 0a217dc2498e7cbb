/* citus.h - the sidecar on a Citus cluster: finding the layout of db/citus/ and the claim
 * statements that keep each transaction on one shard (docs/capacity.md, "Citus"). */
#ifndef WI_CITUS_H
#define WI_CITUS_H

#include "pgw.h"

/* 1 when this database has the Citus layout (webhook_inbox_citus_claim() exists), 0 when
 * not, -1 with *err. Prepares its own statement. */
int wi_citus_layout(struct wi_pg *pg, struct wi_err *err);

/* 1 when the citus extension is installed in this database, 0 when not, -1 with *err. */
int wi_citus_installed(struct wi_pg *pg, struct wi_err *err);

/* Replaces, in stmts[0..n), the statements named wi_claim and wi_dispatch_batch by their
 * Citus forms (same parameters and columns: webhook_inbox_citus_claim() and
 * webhook_inbox_citus_dispatch_batch(), one source_scope per transaction), and prune.c's
 * retention batches (wi_prune, wi_prune_keep, wi_forget, wi_prune_effects) by
 * webhook_inbox_citus_prune() (db/citus/003: the same batch, one scope at a time). */
void wi_citus_stmts(struct wi_pg_stmt *stmts, int n);

/* wi_pg_prepare() of stmts[0..n), each in its Citus form (wi_citus_stmts: the same name,
 * parameters and columns) when this database has the Citus layout. Returns 0 or -1 with *err. */
int wi_citus_prepare(struct wi_pg *pg, const struct wi_pg_stmt *stmts, int n, struct wi_err *err);

/* Runs a static script (an embedded migration) one statement at a time: Citus refuses
 * CREATE TRIGGER on a distributed table inside a multi-statement query string ("cannot
 * insert multiple commands into a prepared statement"). Splits at top-level semicolons,
 * outside quotes, quoted identifiers, dollar-quoted bodies and comments. Returns 0 or -1
 * with *err (out of memory, or the failing statement's error). */
int wi_citus_script(struct wi_pg *pg, const char *sql, struct wi_err *err);

#endif
