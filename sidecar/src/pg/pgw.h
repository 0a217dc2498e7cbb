/* pgw.h - a small libpq wrapper: connect, prepare named statements, run them with text
 * parameters, wait for NOTIFY. One struct wi_pg per connection, used by one thread. */
#ifndef WI_PGW_H
#define WI_PGW_H

#include <libpq-fe.h>
#include "wi_err.h"

struct wi_pg;

/* A named statement prepared on every (re)connect. */
struct wi_pg_stmt {
    const char *name;
    const char *sql;
};

enum { WI_ERR_PG = 300 }; /* err->msg holds "SQLSTATE: message" (first line only) */

/* Connects and prepares stmts[0..n). Returns NULL and fills *err on failure.
 * Defaults that conninfo can override: application_name "webhook-inbox-sidecar",
 * connect_timeout 10 s, TCP keepalives after 30 s idle, target_session_attrs read-write.
 * Any call failing with SQLSTATE 25006 (read-only server) leaves the connection closed
 * (wi_pg_ok 0), as a lost one: the caller reconnects. Borrows stmts (must outlive pg). */
struct wi_pg *wi_pg_connect(const char *conninfo, const struct wi_pg_stmt *stmts, int n, struct wi_err *err);

/* Called with the SQLSTATE of every NOTICE or WARNING a server sends on any connection
 * (metrics count the gem's own: db/019's batch handler fallbacks). Set once, before any
 * connection or thread; NULL: none. WARNINGs are also logged (server_warning). */
void wi_pg_set_notice_hook(void (*hook)(const char *sqlstate));

/* Prepares stmts[0..n) on an open connection (statements that name objects which may not
 * exist yet, prepared once a check passed). A name already prepared on this connection is
 * kept as it is (a name always stands for the same SQL). Returns 0, or -1 with *err. */
int wi_pg_prepare(struct wi_pg *pg, const struct wi_pg_stmt *stmts, int n, struct wi_err *err);

/* Closes the connection; accepts NULL. */
void wi_pg_free(struct wi_pg *pg);

/* Runs the prepared statement `name` with nparams text parameters (NULL = SQL NULL).
 * Returns the result (caller PQclears it) when its status is `expect`; otherwise NULL
 * with *err filled. Every result is read: PQexecPrepared returns the last one, so the
 * error of an implicit commit that fails after the rows (a deferred constraint) decides. */
PGresult *wi_pg_exec(struct wi_pg *pg, const char *name, int nparams, const char *const *params, ExecStatusType expect,
                     struct wi_err *err);

/* Runs `begin`, `name`(params) and `commit` (all prepared) as one transaction in ONE round
 * trip (libpq pipeline mode). Returns 0 and sets *out to `name`'s rows (caller PQclears),
 * or -1 with *err holding the first failure; the transaction is then rolled back (with
 * `rollback` when the connection is still up) and *out is NULL. */
int wi_pg_exec_tx(struct wi_pg *pg, const char *begin, const char *name, int nparams, const char *const *params,
                  const char *commit, const char *rollback, PGresult **out, struct wi_err *err);

/* Like wi_pg_exec for a command with no rows to keep: returns 0 or -1. */
int wi_pg_cmd(struct wi_pg *pg, const char *name, int nparams, const char *const *params, struct wi_err *err);

/* Runs a static multi-statement script (migrations only: embedded files, no values).
 * Returns 0 or -1. */
int wi_pg_script(struct wi_pg *pg, const char *sql, struct wi_err *err);

/* 1 while the connection is usable. */
int wi_pg_ok(const struct wi_pg *pg);

/* The socket to poll for NOTIFY, or -1. */
int wi_pg_socket(const struct wi_pg *pg);

/* Reads what arrived on the socket and drops queued notifications. Returns how many
 * notifications there were, or -1 when the connection is lost. */
int wi_pg_drain_notifies(struct wi_pg *pg);

/* The server's SQLSTATE of the last failed wi_pg_exec ("" if none). */
const char *wi_pg_last_sqlstate(const struct wi_pg *pg);

#endif
