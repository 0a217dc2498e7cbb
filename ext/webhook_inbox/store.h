/* store.h - the inbox insert over libpq: one connection, a prepared
 * INSERT ... ON CONFLICT DO NOTHING for one row and one for a batch of rows, non-blocking
 * waits bounded by a deadline.
 * Pure C (no ruby.h): the Ruby binding releases the GVL around wi_store_insert. */
#ifndef WI_STORE_H
#define WI_STORE_H

#include <stddef.h>

#include "wi_err.h"

struct wi_store; /* opaque: one PGconn, its settings and the pid that opened it */

/* Store error codes (wi_err.h range 200-299); also WI_ERR_ARG and WI_ERR_NOMEM.
 * Messages never hold the password (scrubbed) nor payload bytes (only the server's
 * primary message and SQLSTATE are kept, never DETAIL/CONTEXT). */
enum {
    WI_STORE_ECONNECT = 200, /* could not connect (server down, auth, timeout while connecting) */
    WI_STORE_ELOST,          /* the connection broke again after the one reconnect */
    WI_STORE_ETIMEOUT,       /* no answer before the deadline; the connection was dropped */
    WI_STORE_EQUERY,         /* the server rejected the statement (see wi_store_sqlstate) */
    WI_STORE_EINTR           /* wi_store_interrupt() was called; the connection was dropped */
};

/* One event to insert. Strings are borrowed (pointer + length, need not be
 * NUL-terminated); text fields must be valid UTF-8 without NUL (the caller checks). */
struct wi_store_row {
    const char *source_scope; size_t source_scope_len;
    const char *event_id;     size_t event_id_len;
    const char *event_type;   size_t event_type_len;
    const char *payload;      size_t payload_len;
    int raw;                  /* 1: store payload in raw_body (bytea) as is; 0: as jsonb */
    int quarantined;          /* 1: status 'quarantined' (processed_at = now()), 0: 'pending' */
    const char *last_error;   size_t last_error_len; /* NULL for none */
    const char *headers;      size_t headers_len;    /* request_headers: a JSON object; NULL for none */
    const char *order_key;    size_t order_key_len;  /* ordering key spec ("data.object.id"); NULL: unordered */
    const char *order_time;   size_t order_time_len; /* path of the event time ("created"); NULL: receipt time */
    const char *trace;        size_t trace_len;      /* the receipt span's W3C traceparent; NULL: none. Stored
                                                      * as NULL unless a valid version-00 one (schema v30;
                                                      * left out against an older schema) */
};

/* What wi_store_insert did. */
struct wi_store_result {
    int inserted;   /* 1: a new row (accepted), 0: the key existed (duplicate) */
    int stored_raw; /* 1: the payload went to raw_body (asked for, or rejected as jsonb) */
    int quarantined;/* 1: the row was written as quarantined */
    struct wi_err failed; /* batch only: code != 0 when the server refused this row alone
                           * (nothing of it committed); the other fields are then 0 */
};

#define WI_TRACEPARENT_LEN 55 /* a version-00 W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex> */

#define WI_STORE_INVALID_JSON_REASON "payload is not valid JSON"

/* Parses conninfo (URL or key=value) without connecting. connect_timeout_ms and
 * statement_timeout_ms must be > 0. Returns NULL and fills *err on failure.
 * Copies conninfo; the copy is wiped on free. */
struct wi_store *wi_store_new(const char *conninfo, int connect_timeout_ms,
                              int statement_timeout_ms, struct wi_err *err);

/* Connects if not connected (SET statement_timeout, PREPARE). Returns 0, or -1 and
 * fills *err. Blocks at most connect_timeout (+ statement_timeout for the setup). */
int wi_store_connect(struct wi_store *s, struct wi_err *err);

/* Inserts row with the prepared statement; connects first if needed. A lost
 * connection (CONNECTION_BAD) is reopened once and the insert retried: ON CONFLICT
 * makes the retry idempotent. When row->raw == 0 and the server rejects the payload
 * as jsonb (SQLSTATE class 22), the row is stored raw and quarantined with
 * WI_STORE_INVALID_JSON_REASON (unless the caller gave its own last_error). When the
 * server no longer knows the prepared statement (SQLSTATE 26000: DISCARD ALL, a pooler
 * switching sessions) the session is set up again and the insert retried once.
 * A read-only server (SQLSTATE 25006: a standby, default_transaction_read_only) gets the
 * connection dropped and the insert retried once on a new one; connecting skips read-only
 * hosts (target_session_attrs=read-write unless conninfo says otherwise).
 * Every wait ends by its deadline (statement_timeout + connect_timeout per round trip,
 * connect_timeout to connect; only a DNS lookup inside libpq is not bounded by us) or
 * within ~50 ms of wi_store_interrupt. On the deadline the connection is dropped, never
 * cancelled (PQcancel blocks on a frozen server); the server aborts the abandoned
 * statement once it sees the connection closed (client_connection_check_interval).
 * Returns 0 and fills *out, or -1 and fills *err. On WI_STORE_EINTR an insert already
 * sent stays in flight: calling again with the same row resumes waiting for it (same
 * deadline, nothing sent twice); wi_store_close abandons it. Called without the GVL. */
int wi_store_insert(struct wi_store *s, const struct wi_store_row *row,
                    struct wi_store_result *out, struct wi_err *err);

#define WI_STORE_BATCH_MAX 1000 /* rows in one wi_store_insert_batch */

/* Inserts rows[0..n) (n <= WI_STORE_BATCH_MAX) in one statement and one commit: the rows
 * as arrays, unnested (or as VALUES rows: wi_store_set_values_batches), ON CONFLICT DO
 * NOTHING RETURNING the keys inserted. outs[i] is row i's result, as wi_store_insert would
 * give it; of two rows with the same key the first
 * is inserted (if the key is new) and the second is a duplicate. Rows are sent as given:
 * the caller sets raw/quarantined/last_error for payloads it knows jsonb refuses.
 * A bad row never fails its neighbours: when the server refuses the batch - at the
 * statement or at its commit - with an error one row can cause (wi_store_row_error: bad
 * data, a constraint, an index limit, a serialization failure, ...), nothing was
 * committed and the rows are inserted one by one with wi_store_insert's rules (a payload
 * jsonb refuses: that row raw and quarantined); a row the server still refuses alone gets
 * outs[i].failed set and the others go on. n == 1 runs the single-row statement. Same
 * reconnect, 26000, 25006 and deadline rules as wi_store_insert (each statement one round
 * trip). Returns 0 and fills outs, or -1 and fills *err (an error that is no row's: the
 * connection, a timeout, the schema): then no row is known committed, except, row by row,
 * those before the failing one (their outs are filled, and a resend answers duplicate).
 * On WI_STORE_EINTR the work in progress stays so: calling again with the same rows and
 * outs resumes it (nothing sent twice); wi_store_close abandons it.
 * Called without the GVL. */
int wi_store_insert_batch(struct wi_store *s, const struct wi_store_row *rows, size_t n,
                          struct wi_store_result *outs, struct wi_err *err);

/* on: a batch of up to 32 rows whose ordering key and time C read whole (unordered rows
 * included) goes as one multi-row INSERT ... VALUES instead of arrays, prepared once per
 * session and row count. Citus routes that statement to the shard of its rows (one hop, as a
 * one-row receipt), while it runs the arrays form's INSERT ... SELECT through the coordinator.
 * Same rows, same results. A larger batch, or one with a row left to the SQL ordering
 * functions, keeps the arrays form (the derivation planned once there, not per VALUES row).
 * Off by default (one node: no faster than arrays, measured); set before the first batch. */
void wi_store_set_values_batches(struct wi_store *s, int on);

/* on: every session runs with plan_cache_mode = force_custom_plan, so each execution of a
 * prepared statement is planned for its parameters. For a connection to a Citus worker that
 * runs the INSERT on its own shard (local execution): on a reused (generic) plan Citus 13.2
 * plans and caches the shard's statement again at every execution, never freeing it (the
 * backend grew by ~150 MB/s at ~5,000 inserts/s, measured), while a custom plan caches
 * nothing. Off by default; set before the first connect. */
void wi_store_set_custom_plans(struct wi_store *s, int on);

/* on: for a connection to a Citus node (citus_nodes), a batch of two rows or more whose rows'
 * ordering C read whole calls webhook_inbox_citus_receive() (db/citus/006) with the batch
 * statement's arrays: on the node holding the batch's shard it writes the shard's table under
 * the shard's metadata lock, planned once per session, instead of Citus planning the
 * distributed statement and then the shard's at every batch (the cluster's CPU a row 0.57x in
 * batches of 5, 0.47x in batches of 20, measured; a row alone 0.92-1.02x: it keeps the one-row
 * statement); elsewhere the function inserts through Citus. Same rows, results and retry rules as the batch statement. Only a session whose role
 * owns webhook_inbox uses it (Citus lets only the owner take that lock; another role's batch
 * would go through Citus' INSERT ... SELECT); a database without the function keeps the other
 * statements. Off by default; set before the first connect. */
void wi_store_set_shard_receive(struct wi_store *s, int on);

/* Makes the wi_store_insert/wi_store_connect in progress on another thread - or, if none
 * is, the next one - return WI_STORE_EINTR within ~50 ms; that return consumes it.
 * Async-signal-safe: only sets a flag. */
void wi_store_interrupt(struct wi_store *s);

/* Closes the connection (a later insert reconnects), abandoning an insert in flight. In a forked child a connection
 * opened by the parent is dropped without a Terminate message, so the parent's
 * session survives. Accepts NULL. */
void wi_store_close(struct wi_store *s);

/* 1 when a server error with this SQLSTATE can come from one row of a batch (data,
 * constraints, limits, serialization, a trigger's exception, an unsupported feature of a
 * distributed commit), so the other rows may still go in; 0 for errors that are every
 * row's (connection, authentication, the schema or privileges, resources, a lock timeout,
 * cancel or statement timeout, a server failure). */
int wi_store_row_error(const char *sqlstate);

/* SQLSTATE of the last WI_STORE_EQUERY error ("" if none). Borrowed from s. */
const char *wi_store_sqlstate(const struct wi_store *s);

/* Server process id of the open connection, or 0 when not connected (or inherited). */
int wi_store_backend_pid(const struct wi_store *s);

/* Connections opened again after a loss (for tests and metrics). */
unsigned long wi_store_reconnects(const struct wi_store *s);

/* wi_store_close, then frees everything. Accepts NULL. */
void wi_store_free(struct wi_store *s);

#endif
