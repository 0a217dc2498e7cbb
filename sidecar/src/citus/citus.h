/* citus.h - the sidecar on a Citus cluster: finding the layout of db/citus/ and the claim
 * statements that keep each transaction on one shard (docs/capacity.md, "Citus"). */
#ifndef WI_CITUS_H
#define WI_CITUS_H

#include "claim/dispatch.h"
#include "pg/pgw.h"

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

/* A worker node a connection sends its shards' batches to directly (Citus 11+ syncs the metadata
 * to every worker: the shard's function called there runs on that node, no coordinator hop;
 * called on a node that no longer holds the shard, Citus passes it on to the one that does). */
struct wi_citus_node {
    char *name;        /* pg_dist_node.nodename; owned */
    int port;          /* pg_dist_node.nodeport */
    struct wi_pg *pg;  /* open while the node answers; NULL before the first batch or after a failure */
    double rest_until; /* wi_clock_s(): after a failure its shards go through the coordinator until then */
    long events;       /* events handled on pg since it opened */
    long check_at;     /* events at which the session's memory is read next (wi_citus_dispatch) */
    int count_only;    /* the session's memory could not be read (no pg_read_all_stats): pg is
                        * closed every WI_CITUS_NODE_EVENTS events instead */
};

/* The shards a worker cycles through on the Citus layout, one batch per shard in turn, each
 * pushed down to the node holding the shard (db/citus/001: webhook_inbox_citus_shard_keys(),
 * webhook_inbox_citus_dispatch_shard()). Invariant: 0 <= next < n, or n == 0 (not Citus, or
 * a layout without the shard dispatch: the sidecar then uses wi_citus_stmts' forms alone);
 * -1 <= node[k] < n_nodes. */
struct wi_citus_shards {
    char **key; /* n distribution values, one hashing into each shard; owned */
    int n;
    int next;   /* the shard of the next batch */
    double *rest_until; /* n wi_clock_s() times: a shard whose node refused for a missing
                         * handler (WIH01) is passed over until then; owned */
    double *empty_until; /* n wi_clock_s() times: a shard whose last batch came back empty is
                          * passed over until then while another shard has work; owned */
    char lock_timeout[32]; /* the sessions' lock_timeout, set in each batch on the worker */
    int *node;  /* n: the index in nodes of the worker holding shard k when the keys were loaded,
                 * -1: through the coordinator (direct off, the coordinator holds it, no such node); owned */
    struct wi_citus_node *nodes; /* n_nodes, kept (and their connections open) across loads; owned */
    int n_nodes;
    int reload; /* a direct batch failed: the keys and their nodes are loaded again before the next */
    double loaded_at; /* wi_clock_s() of the last load */
    long coord_events; /* events of shard batches sent through the coordinator since Citus last
                        * closed its connections to the workers (WI_CITUS_NODE_EVENTS) */
    const char *direct_url;                 /* wi_citus_shards_direct(): borrowed; NULL = direct off */
    char *const *node_override; /* the same, n_override --citus-node entries; borrowed */
    int n_override;
};

/* Sends the batches of the shards loaded from now on straight to the workers holding them:
 * each node's connection takes url's parameters (user, password, dbname, sslmode, ...) with its
 * host and port replaced by pg_dist_node's nodename and nodeport, or by --citus-node's override
 * for it (wi_citus_node_override). url NULL: every batch through the coordinator (as a zeroed s).
 * Borrows url and override[0..n_override) (the configuration's, not reloadable: they outlive s). */
void wi_citus_shards_direct(struct wi_citus_shards *s, const char *url, char *const *override, int n_override);


/* Loads the shard keys (previous ones freed) and prepares the shard batch statement, the cycle
 * starting at shard start mod n; each batch runs under lock_timeout (a PostgreSQL value,
 * "500ms"; copied). With direct batches (wi_citus_shards_direct), each key's node too, from
 * the coordinator's pg_dist_placement and pg_dist_node (nodes already known keep their
 * connections; none is opened here). Returns 0 (s->n == 0 when the layout has no shard dispatch) or -1 with
 * *err. */
int wi_citus_shards_load(struct wi_pg *pg, struct wi_citus_shards *s, int start, const char *lock_timeout,
                         struct wi_err *err);


/* Frees the keys and closes the nodes' connections; s is left empty (n == 0, direct off).
 * Accepts an empty s. */
void wi_citus_shards_free(struct wi_citus_shards *s);

/* One batch on the next shard in the cycle that has due events, each shard tried at most once:
 * webhook_inbox_citus_dispatch_shard() outside a transaction block, so the worker holding the
 * shard runs claim, handlers and results as one transaction of its own. Fills *b (previous
 * content freed). A shard that came back empty is passed over for WI_CITUS_EMPTY_S while
 * others have work (an empty shard's call costs its worker and the coordinator about 0.4 ms);
 * before the worker goes idle those shards are tried again, so an event waits at most
 * WI_CITUS_EMPTY_S longer for it. Returns the events committed, 0 when no shard had any (the keys are then
 * loaded again: shards may have been split or added; s->n may become 0), or -1 with *err
 * (that batch rolled back, *b empty). A shard whose node refuses because a route's handler
 * is missing there (wi_dispatch_handler_missing) is logged, rests WI_CITUS_REST_S (or until
 * the keys are loaded again) and the next shard is tried; when no shard had work and one
 * refused, -1 with that refusal in *err.
 * Direct (wi_citus_shards_direct): the batch is sent to the worker holding the shard, on this
 * connection's own session there (opened at its first batch). When that node cannot be reached
 * or its call fails (other than a WIH01 refusal), the batch was either not committed there or
 * committed whole (one transaction on that node): the node's connection is closed, its shards go
 * through pg for WI_CITUS_NODE_REST_S, this shard's batch is sent through pg at once (its claim
 * takes what is still pending: no event twice, none lost), and the keys and their nodes are
 * loaded again before the next batch (citus_node_fallback logged once a minute per node); they
 * are also loaded again every WI_CITUS_NODES_RELOAD_S while busy. Only workers whose metadata
 * the coordinator has synced take batches directly: such a node passes a call for a shard
 * moved away on to its new node, one with a stale copy of the metadata might run it on the
 * shard's old placement.
 * A worker session's memory: Citus 13.2 keeps a copy of a plan in the worker's session at every
 * execution of a handler's statement with a reused plan (15-20 kB an event with a row handler's
 * INSERT into a co-located table, without bound); a new session starts empty (docs/capacity.md,
 * "A worker session's memory"). So every WI_CITUS_NODE_CHECK_EVENTS events a node's connection
 * reads its session's memory (pg_backend_memory_contexts, which needs superuser or
 * pg_read_all_stats) and is closed when it passes WI_CITUS_NODE_MEMORY bytes - or, where it
 * cannot be read, every WI_CITUS_NODE_EVENTS events - and opened again at its next batch (a new
 * session costs its first batches about 30 ms more: metadata, compiled functions, prepares). Once
 * WI_CITUS_NODE_EVENTS events went through the coordinator, the next batch there runs with
 * citus.max_cached_conns_per_worker = 0, so that Citus closes its connections to the workers at
 * its end (new ones at the next).
 * worker: the worker's number, for the log. Needs s->n > 0. */
#define WI_CITUS_NODE_CHECK_EVENTS 500
#define WI_CITUS_NODE_MEMORY (32L << 20)
#define WI_CITUS_NODE_EVENTS 2000
#define WI_CITUS_NODE_REST_S 10.0
#define WI_CITUS_NODES_RELOAD_S 10.0
#define WI_CITUS_REST_S 5.0
#define WI_CITUS_EMPTY_S 0.1
int wi_citus_dispatch(struct wi_pg *pg, struct wi_citus_shards *s, int worker, int limit, const struct wi_policy *p,
                      struct wi_batch *b, struct wi_err *err);

/* Runs a static script (an embedded migration) one statement at a time: Citus refuses
 * CREATE TRIGGER on a distributed table inside a multi-statement query string ("cannot
 * insert multiple commands into a prepared statement"). Splits at top-level semicolons,
 * outside quotes, quoted identifiers, dollar-quoted bodies and comments. Returns 0 or -1
 * with *err (out of memory, or the failing statement's error). */
int wi_citus_script(struct wi_pg *pg, const char *sql, struct wi_err *err);

#endif
