/* citus.c - the sidecar on a Citus cluster: the layout check, the one-shard claim statements and
 * the batch delegated to each shard's node in turn. */
#define _POSIX_C_SOURCE 200809L
#include "citus/citus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "citus/citus_node.h"
#include "core/clock.h"
#include "core/log.h"

static const struct wi_pg_stmt layout_stmts[] = {
    {"wi_citus_layout", "SELECT to_regprocedure('webhook_inbox_citus_claim(integer)') IS NOT NULL"},
    {"wi_citus_installed", "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"},
};

/* The shard keys in hash order, each with the worker holding its shard (NULLs where the
 * coordinator holds it, or the worker's metadata is not synced: a node with a stale copy could
 * take a moved shard's call for its old placement); none on a layout without the shard
 * dispatch (an older db/citus/). */
static const struct wi_pg_stmt shard_stmts[] = {
    {"wi_citus_shard_keys",
     "SELECT k.k, n.nodename, n.nodeport FROM webhook_inbox_citus_shard_keys() WITH ORDINALITY k(k, i)"
     " LEFT JOIN LATERAL (SELECT d.nodename, d.nodeport FROM pg_dist_placement p JOIN pg_dist_node d ON d.groupid = p.groupid"
     " WHERE p.shardid = get_shard_id_for_distribution_column('webhook_inbox', k.k) AND d.groupid <> 0 AND d.isactive"
     " AND d.noderole = 'primary' AND d.hasmetadata AND d.metadatasynced ORDER BY d.nodeid LIMIT 1) n ON true"
     " WHERE to_regprocedure('webhook_inbox_citus_dispatch_shard(text, text, integer, text, integer, bigint, bigint, bigint)')"
     " IS NOT NULL ORDER BY k.i"},
};

/* The node session's own memory in bytes (its memory contexts; superuser or pg_read_all_stats). */
static const struct wi_pg_stmt node_memory_stmt = {
    "wi_citus_node_memory", "SELECT coalesce(sum(total_bytes), 0)::bigint FROM pg_backend_memory_contexts"};

/* Around a shard batch through the coordinator: Citus closes its connections to the workers at
 * the end of that batch's transaction (none cached), then caches them again. */
static const struct wi_pg_stmt conns_stmts[] = {
    {"wi_citus_conns_close", "SET citus.max_cached_conns_per_worker = 0"},
    {"wi_citus_conns_keep", "RESET citus.max_cached_conns_per_worker"},
};

/* wi_dispatch_batch_stmt's columns; $1 the shard key, $2 the lock_timeout, then its parameters. */
static const struct wi_pg_stmt dispatch_shard_stmt = {
    "wi_citus_dispatch_shard", "SELECT source_scope, event_id, event_type, result, detail, attempts, latency_ms, charged,"
                               " retry_in_ms FROM webhook_inbox_citus_dispatch_shard($1, $2, $3::int, $4, $5::int,"
                               " $6::bigint, $7::bigint, $8::bigint)"};

/* The same on a worker's own session (direct): the call in a subquery. Citus plans a statement
 * that is one call of a distributed function with parameters anew at every execution (it keeps
 * PostgreSQL from a generic plan, in case it can push the call down to another node); fenced by
 * OFFSET 0 it is planned once per session, as on one node. The coordinator's must stay a plain
 * call: that is what Citus pushes down to the shard's node. */
static const struct wi_pg_stmt dispatch_here_stmt = {
    "wi_citus_dispatch_here", "SELECT source_scope, event_id, event_type, result, detail, attempts, latency_ms, charged,"
                              " retry_in_ms FROM (SELECT * FROM webhook_inbox_citus_dispatch_shard($1, $2, $3::int, $4,"
                              " $5::int, $6::bigint, $7::bigint, $8::bigint) OFFSET 0) d"};

/* Same parameters and columns as claim.c's, dispatch.c's and prune.c's statements of these names. */
static const struct wi_pg_stmt citus_stmts[] = {
    {"wi_claim", "SELECT source_scope, event_id, event_type, attempts FROM webhook_inbox_citus_claim($1::int)"},
    {"wi_dispatch_batch", "SELECT source_scope, event_id, event_type, result, detail, attempts, latency_ms, charged,"
                          " retry_in_ms FROM webhook_inbox_citus_dispatch_batch($1::int, $2, $3::int, $4::bigint,"
                          " $5::bigint, $6::bigint)"},
    /* prune.c's retention batches: ($1 age in seconds, $2 scope or NULL, $3 limit), one count. */
    {"wi_prune", "SELECT webhook_inbox_citus_prune('prune', $1::float8, $2, $3::int)"},
    {"wi_prune_keep", "SELECT webhook_inbox_citus_prune('keep', $1::float8, $2, $3::int)"},
    {"wi_forget", "SELECT webhook_inbox_citus_prune('forget', $1::float8, $2, $3::int)"},
    /* v13's forms, which also delete the SQL routes' once-markers: webhook_inbox_citus_prune
     * deletes them with their events (a reference table: after the shard's statement). */
    {"wi_prune_keep_markers", "SELECT webhook_inbox_citus_prune('keep', $1::float8, $2, $3::int)"},
    {"wi_forget_markers", "SELECT webhook_inbox_citus_prune('forget', $1::float8, $2, $3::int)"},
    {"wi_prune_effects", "SELECT webhook_inbox_citus_prune('effects', $1::float8, $2, $3::int)"},
};

/* Runs the one-boolean statement `name`. Returns 1, 0 or -1 with *err. */
static int ask(struct wi_pg *pg, const char *name, struct wi_err *err)
{
    PGresult *res;
    int yes;

    if (wi_pg_prepare(pg, layout_stmts, (int)(sizeof layout_stmts / sizeof layout_stmts[0]), err) < 0)
        return -1;
    if (!(res = wi_pg_exec(pg, name, 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    yes = PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    return yes;
}

int wi_citus_layout(struct wi_pg *pg, struct wi_err *err)
{
    return ask(pg, "wi_citus_layout", err);
}

int wi_citus_installed(struct wi_pg *pg, struct wi_err *err)
{
    return ask(pg, "wi_citus_installed", err);
}

void wi_citus_stmts(struct wi_pg_stmt *stmts, int n)
{
    size_t j;
    int i;

    for (i = 0; i < n; i++)
        for (j = 0; j < sizeof citus_stmts / sizeof citus_stmts[0]; j++)
            if (!strcmp(stmts[i].name, citus_stmts[j].name))
                stmts[i] = citus_stmts[j];
}

int wi_citus_prepare(struct wi_pg *pg, const struct wi_pg_stmt *stmts, int n, struct wi_err *err)
{
    struct wi_pg_stmt one;
    int i, citus;

    if ((citus = wi_citus_layout(pg, err)) < 0)
        return -1;
    for (i = 0; i < n; i++) {
        one = stmts[i];
        if (citus)
            wi_citus_stmts(&one, 1);
        if (wi_pg_prepare(pg, &one, 1, err) < 0)
            return -1;
    }
    return 0;
}

/* Frees the keys and what is kept per key; the nodes and the direct settings stay. */
static void keys_free(struct wi_citus_shards *s)
{
    int i;

    for (i = 0; i < s->n; i++)
        free(s->key[i]);
    free(s->key);
    free(s->rest_until);
    free(s->empty_until);
    free(s->node);
    s->key = NULL;
    s->rest_until = NULL;
    s->empty_until = NULL;
    s->node = NULL;
    s->n = s->next = 0;
}

void wi_citus_shards_free(struct wi_citus_shards *s)
{
    int i;

    keys_free(s);
    for (i = 0; i < s->n_nodes; i++) {
        wi_pg_free(s->nodes[i].pg);
        free(s->nodes[i].name);
    }
    free(s->nodes);
    s->nodes = NULL;
    s->n_nodes = 0;
    s->reload = 0;
    s->coord_events = 0;
    s->direct_url = NULL;
    s->node_override = NULL;
    s->n_override = 0;
}

void wi_citus_shards_direct(struct wi_citus_shards *s, const char *url, char *const *override, int n_override)
{
    s->direct_url = url;
    s->node_override = override;
    s->n_override = n_override;
}

/* The index in s->nodes of the worker name:port, added (no connection yet) when new; -1 when
 * out of memory. */
static int node_index(struct wi_citus_shards *s, const char *name, int port)
{
    struct wi_citus_node *nodes;
    int i;

    for (i = 0; i < s->n_nodes; i++)
        if (s->nodes[i].port == port && !strcmp(s->nodes[i].name, name))
            return i;
    if (!(nodes = realloc(s->nodes, (size_t)(s->n_nodes + 1) * sizeof *nodes)))
        return -1;
    s->nodes = nodes;
    memset(&nodes[s->n_nodes], 0, sizeof *nodes);
    if (!(nodes[s->n_nodes].name = strdup(name)))
        return -1;
    nodes[s->n_nodes].port = port;
    return s->n_nodes++;
}

int wi_citus_shards_load(struct wi_pg *pg, struct wi_citus_shards *s, int start, const char *lock_timeout,
                         struct wi_err *err)
{
    PGresult *res;
    int i, n;

    keys_free(s);
    s->reload = 0;
    if (wi_pg_prepare(pg, shard_stmts, 1, err) < 0)
        return -1;
    if (!(res = wi_pg_exec(pg, "wi_citus_shard_keys", 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    if ((n = PQntuples(res)) == 0) {
        PQclear(res);
        return 0;
    }
    if (wi_pg_prepare(pg, &dispatch_shard_stmt, 1, err) < 0 ||
        wi_pg_prepare(pg, conns_stmts, (int)(sizeof conns_stmts / sizeof conns_stmts[0]), err) < 0) {
        PQclear(res);
        return -1;
    }
    if (!(s->key = calloc((size_t)n, sizeof *s->key)) || !(s->rest_until = calloc((size_t)n, sizeof *s->rest_until)) ||
        !(s->empty_until = calloc((size_t)n, sizeof *s->empty_until)) || !(s->node = calloc((size_t)n, sizeof *s->node))) {
        PQclear(res);
        keys_free(s);
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    for (i = 0; i < n; i++) {
        s->n = i + 1;
        s->node[i] = -1; /* through the coordinator unless a worker holds it and direct is on */
        if (!(s->key[i] = strdup(PQgetvalue(res, i, 0))) ||
            (s->direct_url && !PQgetisnull(res, i, 1) &&
             (s->node[i] = node_index(s, PQgetvalue(res, i, 1), atoi(PQgetvalue(res, i, 2)))) < 0)) {
            PQclear(res);
            keys_free(s);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
    }
    PQclear(res);
    snprintf(s->lock_timeout, sizeof s->lock_timeout, "%s", lock_timeout);
    s->next = (start % n + n) % n;
    s->loaded_at = wi_clock_s();
    return 0;
}

/* Opens nd's connection unless open. Returns 0 or -1 with *err. */
static int node_open(struct wi_citus_shards *s, struct wi_citus_node *nd, struct wi_err *err)
{
    const char *host = nd->name;
    size_t host_len = strlen(nd->name);
    int port = nd->port;
    char *ci;

    if (nd->pg && wi_pg_ok(nd->pg))
        return 0;
    wi_pg_free(nd->pg);
    nd->pg = NULL;
    if (wi_citus_node_override(s->node_override, s->n_override, nd->name, nd->port, &host, &host_len, &port, err) < 0 ||
        !(ci = wi_citus_node_conninfo(s->direct_url, host, host_len, port, err)))
        return -1;
    nd->pg = wi_pg_connect(ci, &dispatch_here_stmt, 1, err);
    nd->events = 0;
    nd->check_at = nd->count_only ? WI_CITUS_NODE_EVENTS : WI_CITUS_NODE_CHECK_EVENTS;
    OPENSSL_cleanse(ci, strlen(ci));
    free(ci);
    return nd->pg ? 0 : -1;
}

/* 1 when nd's session should be closed: its memory past WI_CITUS_NODE_MEMORY, or (where that
 * cannot be read: nd->count_only from then on) WI_CITUS_NODE_EVENTS events handled, or the
 * connection lost meanwhile. Else 0, and the next check is set. */
static int node_spent(struct wi_citus_node *nd)
{
    struct wi_err err;
    PGresult *res;
    long long used = -1;

    if (!nd->count_only) {
        if (wi_pg_prepare(nd->pg, &node_memory_stmt, 1, &err) == 0 &&
            (res = wi_pg_exec(nd->pg, node_memory_stmt.name, 0, NULL, PGRES_TUPLES_OK, &err))) {
            used = PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
            PQclear(res);
        } else if (!wi_pg_ok(nd->pg)) {
            return 1;
        } else {
            log_info("citus_node_memory_unread", "node=%s:%d error=%s note=\"its session is closed every %d events "
                     "instead\"", WI_LOG_Q(nd->name), nd->port, WI_LOG_Q(err.msg), WI_CITUS_NODE_EVENTS);
            nd->count_only = 1;
        }
    }
    if (used >= 0) {
        nd->check_at = nd->events + WI_CITUS_NODE_CHECK_EVENTS;
        return used > WI_CITUS_NODE_MEMORY;
    }
    nd->check_at = WI_CITUS_NODE_EVENTS;
    return nd->events >= WI_CITUS_NODE_EVENTS;
}

/* Shard k's batch through the coordinator pg, which pushes it down to the shard's node over a
 * connection Citus caches; every WI_CITUS_NODE_EVENTS events there, that batch's connections are
 * closed at its end (wi_citus_dispatch). As wi_dispatch_batch_keyed. */
static int coordinator_batch(struct wi_pg *pg, struct wi_citus_shards *s, int k, int limit, const struct wi_policy *p,
                             struct wi_batch *b, struct wi_err *err)
{
    int close = s->coord_events >= WI_CITUS_NODE_EVENTS, n;
    struct wi_err reset;

    if (close && wi_pg_cmd(pg, "wi_citus_conns_close", 0, NULL, err) < 0)
        return -1;
    n = wi_dispatch_batch_keyed(pg, dispatch_shard_stmt.name, s->key[k], s->lock_timeout, limit, p, b, err);
    if (close) {
        s->coord_events = 0;
        /* A lost connection takes the setting with it. Otherwise a RESET that fails leaves Citus
         * closing its connections after every transaction of this session (slower, not wrong)
         * until the next such batch resets it; the batch's own outcome stands. */
        if (wi_pg_ok(pg) && wi_pg_cmd(pg, "wi_citus_conns_keep", 0, NULL, &reset) < 0 &&
            wi_log_every("citus_conns_keep", 60.0))
            log_warnx("citus_conns_keep", "error=%s", WI_LOG_Q(reset.msg));
    }
    if (n > 0)
        s->coord_events += n;
    return n;
}

/* Shard k's batch: on the worker holding it when direct and that node is not resting, else (or
 * when that fails, see wi_citus_dispatch) through the coordinator pg. As wi_dispatch_batch_keyed. */
static int shard_batch(struct wi_pg *pg, struct wi_citus_shards *s, int k, int worker, int limit,
                       const struct wi_policy *p, struct wi_batch *b, struct wi_err *err)
{
    struct wi_citus_node *nd = s->node[k] >= 0 ? &s->nodes[s->node[k]] : NULL;
    char key[300];
    int n;

    if (nd && nd->rest_until <= wi_clock_s()) {
        if (node_open(s, nd, err) == 0) {
            n = wi_dispatch_batch_keyed(nd->pg, dispatch_here_stmt.name, s->key[k], s->lock_timeout, limit, p, b, err);
            if (n > 0 && (nd->events += n) >= nd->check_at && node_spent(nd)) {
                /* The session's memory back: the next batch opens a new one (wi_citus_dispatch). */
                wi_pg_free(nd->pg);
                nd->pg = NULL;
            }
            if (n >= 0 || (wi_dispatch_handler_missing(err) && wi_pg_ok(nd->pg)))
                return n;
        }
        /* Down, refusing, or the call failed: committed whole there or not at all. */
        snprintf(key, sizeof key, "citus_node_fallback %s:%d", nd->name, nd->port);
        if (wi_log_every(key, 60.0))
            log_warnx("citus_node_fallback", "worker=%d node=%s:%d error=%s note=\"its shards' batches go through the "
                      "coordinator for %.0fs; the shards' nodes are loaded again\"", worker, WI_LOG_Q(nd->name), nd->port,
                      WI_LOG_Q(err->msg), WI_CITUS_NODE_REST_S);
        wi_pg_free(nd->pg);
        nd->pg = NULL;
        nd->rest_until = wi_clock_s() + WI_CITUS_NODE_REST_S;
        s->reload = 1;
    }
    return coordinator_batch(pg, s, k, limit, p, b, err);
}

int wi_citus_dispatch(struct wi_pg *pg, struct wi_citus_shards *s, int worker, int limit, const struct wi_policy *p,
                      struct wi_batch *b, struct wi_err *err)
{
    int tried, n = 0, refused = 0, skipped = 0, pass;
    double now = wi_clock_s();
    struct wi_err refusal;

    char lock_timeout[sizeof s->lock_timeout];

    /* A direct batch failed last time, or the nodes were read a while ago (shards move, nodes
     * stop syncing metadata): which node holds which shard may have changed. */
    if (s->reload || (s->direct_url && now - s->loaded_at > WI_CITUS_NODES_RELOAD_S)) {
        memcpy(lock_timeout, s->lock_timeout, sizeof lock_timeout);
        if (wi_citus_shards_load(pg, s, s->next, lock_timeout, err) < 0)
            return -1;
        if (s->n == 0)
            return 0;
    }
    /* Pass 0 passes over the shards that came back empty lately (empty_until > now); pass 1,
     * only when pass 0 found nothing and passed one over, tries those before the worker goes
     * idle. A shard pass 0 tried and found empty has empty_until >= now + WI_CITUS_EMPTY_S
     * since; one it passed over, less. */
    for (pass = 0; pass < 2 && n == 0 && (pass == 0 || skipped); pass++) {
        for (tried = 0; tried < s->n && n == 0; tried++) {
            int k = s->next;
            int resting = s->empty_until[k] > now && s->empty_until[k] < now + WI_CITUS_EMPTY_S;

            s->next = (s->next + 1) % s->n; /* round robin: each batch on the next shard */
            if (s->rest_until[k] > now || (pass == 0) == resting) {
                skipped |= resting;
                continue;
            }
            if ((n = shard_batch(pg, s, k, worker, limit, p, b, err)) < 0) {
                if (!wi_dispatch_handler_missing(err) || !wi_pg_ok(pg))
                    return -1;
                /* Its node lacks a routed handler (not propagated yet): nothing ran or was charged.
                 * The shard rests; the others go on. */
                wi_dispatch_log_missing(worker, err);
                s->rest_until[k] = wi_clock_s() + WI_CITUS_REST_S;
                refusal = *err;
                refused = 1;
                n = 0;
            }
            s->empty_until[k] = n == 0 ? wi_clock_s() + WI_CITUS_EMPTY_S : 0;
        }
    }
    if (n > 0)
        return n;
    if (refused) {
        *err = refusal;
        return -1;
    }
    /* Idle: the keys again, in case shards were split or added (a key per new shard). */
    memcpy(lock_timeout, s->lock_timeout, sizeof lock_timeout);
    return wi_citus_shards_load(pg, s, s->next, lock_timeout, err) < 0 ? -1 : 0;
}

/* Length of the dollar-quote tag at p ("$body$", "$$"), or 0 when p starts none. */
static size_t dollar_tag(const char *p)
{
    size_t n = 1;

    while (p[n] == '_' || (p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
           (n > 1 && p[n] >= '0' && p[n] <= '9'))
        n++;
    return p[n] == '$' ? n + 1 : 0;
}

/* The end of the statement starting at p: its ';' or the terminating NUL. */
static const char *statement_end(const char *p)
{
    size_t tag;
    const char *q;

    for (; *p && *p != ';'; p++) {
        if (*p == '\'' || *p == '"') { /* '' and "" inside double the quote: two strings in a row */
            q = strchr(p + 1, *p);
            p = q ? q : p + strlen(p) - 1;
        } else if (p[0] == '-' && p[1] == '-') {
            q = strchr(p, '\n');
            p = q ? q : p + strlen(p) - 1;
        } else if (p[0] == '/' && p[1] == '*') {
            q = strstr(p + 2, "*/");
            p = q ? q + 1 : p + strlen(p) - 1;
        } else if (*p == '$' && (tag = dollar_tag(p)) > 0) {
            char close[64];
            if (tag >= sizeof close)
                continue;
            memcpy(close, p, tag);
            close[tag] = '\0';
            q = strstr(p + tag, close);
            p = q ? q + tag - 1 : p + strlen(p) - 1;
        }
    }
    return p;
}

int wi_citus_script(struct wi_pg *pg, const char *sql, struct wi_err *err)
{
    const char *p = sql, *end;
    char *one;
    int rc;

    while (*p) {
        end = statement_end(p);
        if (strspn(p, " \t\r\n") < (size_t)(end - p)) {
            if (!(one = strndup(p, (size_t)(end - p))))
                return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            rc = wi_pg_script(pg, one, err);
            free(one);
            if (rc < 0)
                return -1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}
