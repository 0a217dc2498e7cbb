/* dispatch.c - the prepared calls of webhook_inbox_dispatch_batch(), its keyed forms (citus.c) and
 * webhook_inbox_dispatch(). */
#define _POSIX_C_SOURCE 200809L
#include "claim/dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* The handler name never passes through C: the SQL function resolves the route and calls
 * the regproc (printed quoted by PostgreSQL) inside BEGIN ... EXCEPTION, a savepoint. */
const struct wi_pg_stmt wi_dispatch_stmt = {
    "wi_dispatch", "SELECT result, detail, attempts, latency_ms, charged, retry_in_ms"
                   " FROM webhook_inbox_dispatch($1, $2, $3, $4::int, $5::bigint, $6::bigint, $7::bigint)"};

const struct wi_pg_stmt wi_dispatch_batch_stmt = {
    "wi_dispatch_batch", "SELECT source_scope, event_id, event_type, result, detail, attempts, latency_ms, charged,"
                         " retry_in_ms FROM webhook_inbox_dispatch_batch($1::int, $2, $3::int, $4::bigint,"
                         " $5::bigint, $6::bigint)"};

/* The policy as text parameters, in the order both statements take them after their keys. */
struct policy_params {
    char max[16], base[24], cap[24], delay[24];
};

static void policy_params(const struct wi_policy *p, struct policy_params *pp)
{
    snprintf(pp->max, sizeof pp->max, "%d", p->max_attempts);
    snprintf(pp->base, sizeof pp->base, "%lld", p->backoff_base_ms);
    snprintf(pp->cap, sizeof pp->cap, "%lld", p->backoff_cap_ms);
    snprintf(pp->delay, sizeof pp->delay, "%lld", p->unrouted_delay_ms);
}

/* Fills the result columns of e from row i, starting at column c (result, detail, attempts,
 * latency_ms, charged, retry_in_ms). Returns 0 or -1 (out of memory). */
static int fill_result(PGresult *res, int i, int c, struct wi_event *e)
{
    snprintf(e->result, sizeof e->result, "%s", PQgetvalue(res, i, c));
    free(e->detail);
    e->detail = PQgetisnull(res, i, c + 1) ? NULL : strdup(PQgetvalue(res, i, c + 1));
    if (!PQgetisnull(res, i, c + 2))
        e->attempts = atoi(PQgetvalue(res, i, c + 2));
    e->latency_ms = PQgetisnull(res, i, c + 3) ? 0 : atof(PQgetvalue(res, i, c + 3));
    e->charged = !PQgetisnull(res, i, c + 4) && !strcmp(PQgetvalue(res, i, c + 4), "t");
    e->retry_in_ms = PQgetisnull(res, i, c + 5) ? -1 : atoll(PQgetvalue(res, i, c + 5));
    return !PQgetisnull(res, i, c + 1) && !e->detail ? -1 : 0;
}

/* Copies the rows of the batch statement into *b. Returns n or -1 (out of memory). */
static int fill_batch(PGresult *res, struct wi_batch *b, struct wi_err *err)
{
    int i, n = PQntuples(res);

    if (n == 0)
        return 0;
    if (!(b->ev = calloc((size_t)n, sizeof *b->ev)))
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    for (i = 0; i < n; i++) {
        struct wi_event *e = &b->ev[i];
        b->n = i + 1;
        e->scope = strdup(PQgetvalue(res, i, 0));
        e->event_id = strdup(PQgetvalue(res, i, 1));
        e->event_type = strdup(PQgetvalue(res, i, 2));
        if (!e->scope || !e->event_id || !e->event_type || fill_result(res, i, 3, e) < 0) {
            wi_batch_free(b);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
    }
    return n;
}

/* The batch statements' parameters from params[at]: the limit, then the policy; the strings
 * live in lim and pp. */
static void batch_params(const char **params, int at, char *lim, size_t lim_size, int limit, const struct wi_policy *p,
                         struct policy_params *pp)
{
    snprintf(lim, lim_size, "%d", limit);
    policy_params(p, pp);
    params[at] = lim;
    params[at + 1] = p->unrouted;
    params[at + 2] = pp->max;
    params[at + 3] = pp->base;
    params[at + 4] = pp->cap;
    params[at + 5] = pp->delay;
}

int wi_dispatch_batch_tx(struct wi_pg *pg, int limit, const struct wi_policy *p, struct wi_batch *b,
                         struct wi_err *err)
{
    char lim[16];
    struct policy_params pp;
    const char *params[6];
    PGresult *res;
    int n;

    wi_batch_free(b);
    batch_params(params, 0, lim, sizeof lim, limit, p, &pp);
    if (wi_pg_exec_tx(pg, "wi_begin", wi_dispatch_batch_stmt.name, 6, params, "wi_commit", "wi_rollback", &res, err) < 0)
        return -1;
    n = fill_batch(res, b, err);
    PQclear(res);
    return n;
}

int wi_dispatch_batch_keyed(struct wi_pg *pg, const char *name, const char *key, const char *lock_timeout, int limit,
                            const struct wi_policy *p, struct wi_batch *b, struct wi_err *err)
{
    char lim[16];
    struct policy_params pp;
    const char *params[8];
    PGresult *res;
    int n;

    wi_batch_free(b);
    params[0] = key;
    params[1] = lock_timeout;
    batch_params(params, 2, lim, sizeof lim, limit, p, &pp);
    if (!(res = wi_pg_exec(pg, name, 8, params, PGRES_TUPLES_OK, err)))
        return -1;
    n = fill_batch(res, b, err);
    PQclear(res);
    return n;
}

int wi_dispatch(struct wi_pg *pg, struct wi_event *e, const struct wi_policy *p, struct wi_err *err)
{
    struct policy_params pp;
    const char *params[7];
    PGresult *res;

    policy_params(p, &pp);
    params[0] = e->scope;
    params[1] = e->event_id;
    params[2] = p->unrouted;
    params[3] = pp.max;
    params[4] = pp.base;
    params[5] = pp.cap;
    params[6] = pp.delay;
    if (!(res = wi_pg_exec(pg, wi_dispatch_stmt.name, 7, params, PGRES_TUPLES_OK, err)))
        return -1;
    if (PQntuples(res) != 1) {
        int n = PQntuples(res);
        PQclear(res);
        return wi_err_set(err, WI_ERR_PG, "dispatch returned %d rows", n);
    }
    if (fill_result(res, 0, 0, e) < 0) {
        PQclear(res);
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    PQclear(res);
    return 0;
}

int wi_dispatch_handler_missing(const struct wi_err *err)
{
    return err && !strncmp(err->msg, "WIH01:", 6);
}

void wi_dispatch_log_missing(int worker, const struct wi_err *err)
{
    if (!wi_log_every(err->msg, 60.0))
        return;
    log_errorx("handler_missing", "worker=%d error=%s note=\"events of this route wait, uncharged, and are tried again: "
               "create the function on that node\"", worker, WI_LOG_Q(err->msg));
}
