/* citus.c - the sidecar on a Citus cluster: the layout check, the one-shard claim statements and
 * the batch delegated to each shard's node in turn. */
#define _POSIX_C_SOURCE 200809L
#include "citus/citus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

static const struct wi_pg_stmt layout_stmts[] = {
    {"wi_citus_layout", "SELECT to_regprocedure('webhook_inbox_citus_claim(integer)') IS NOT NULL"},
    {"wi_citus_installed", "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"},
};

/* The shard keys, none on a layout without the shard dispatch (an older db/citus/). */
static const struct wi_pg_stmt shard_stmts[] = {
    {"wi_citus_shard_keys",
     "SELECT k FROM webhook_inbox_citus_shard_keys() k"
     " WHERE to_regprocedure('webhook_inbox_citus_dispatch_shard(text, text, integer, text, integer, bigint, bigint, bigint)')"
     " IS NOT NULL"},
};

/* wi_dispatch_batch_stmt's columns; $1 the shard key, $2 the lock_timeout, then its parameters. */
static const struct wi_pg_stmt dispatch_shard_stmt = {
    "wi_citus_dispatch_shard", "SELECT source_scope, event_id, event_type, result, detail, attempts, latency_ms, charged,"
                               " retry_in_ms FROM webhook_inbox_citus_dispatch_shard($1, $2, $3::int, $4, $5::int,"
                               " $6::bigint, $7::bigint, $8::bigint)"};

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

void wi_citus_shards_free(struct wi_citus_shards *s)
{
    int i;

    for (i = 0; i < s->n; i++)
        free(s->key[i]);
    free(s->key);
    free(s->rest_until);
    free(s->empty_until);
    s->key = NULL;
    s->rest_until = NULL;
    s->empty_until = NULL;
    s->n = s->next = 0;
}

int wi_citus_shards_load(struct wi_pg *pg, struct wi_citus_shards *s, int start, const char *lock_timeout,
                         struct wi_err *err)
{
    PGresult *res;
    int i, n;

    wi_citus_shards_free(s);
    if (wi_pg_prepare(pg, shard_stmts, 1, err) < 0)
        return -1;
    if (!(res = wi_pg_exec(pg, "wi_citus_shard_keys", 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    if ((n = PQntuples(res)) == 0) {
        PQclear(res);
        return 0;
    }
    if (wi_pg_prepare(pg, &dispatch_shard_stmt, 1, err) < 0) {
        PQclear(res);
        return -1;
    }
    if (!(s->key = calloc((size_t)n, sizeof *s->key)) || !(s->rest_until = calloc((size_t)n, sizeof *s->rest_until)) ||
        !(s->empty_until = calloc((size_t)n, sizeof *s->empty_until))) {
        free(s->key);
        free(s->rest_until);
        s->key = NULL;
        s->rest_until = NULL;
        PQclear(res);
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    for (i = 0; i < n; i++) {
        s->n = i + 1;
        if (!(s->key[i] = strdup(PQgetvalue(res, i, 0)))) {
            PQclear(res);
            wi_citus_shards_free(s);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
    }
    PQclear(res);
    snprintf(s->lock_timeout, sizeof s->lock_timeout, "%s", lock_timeout);
    s->next = (start % n + n) % n;
    return 0;
}

int wi_citus_dispatch(struct wi_pg *pg, struct wi_citus_shards *s, int worker, int limit, const struct wi_policy *p,
                      struct wi_batch *b, struct wi_err *err)
{
    int tried, n = 0, refused = 0, skipped = 0, pass;
    double now = wi_clock_s();
    struct wi_err refusal;

    char lock_timeout[sizeof s->lock_timeout];

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
            if ((n = wi_dispatch_batch_keyed(pg, dispatch_shard_stmt.name, s->key[k], s->lock_timeout, limit, p, b, err)) < 0) {
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
