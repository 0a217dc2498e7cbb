/* dispatch.c - one prepared call of webhook_inbox_dispatch() per claimed event. */
#define _POSIX_C_SOURCE 200809L
#include "dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handler name never passes through C: the SQL function resolves the route and calls
 * the regproc (printed quoted by PostgreSQL) inside BEGIN ... EXCEPTION, a savepoint. */
const struct wi_pg_stmt wi_dispatch_stmt = {
    "wi_dispatch", "SELECT result, detail, attempts, latency_ms FROM webhook_inbox_dispatch($1, $2, $3)"};

const struct wi_pg_stmt wi_dispatch_batch_stmt = {
    "wi_dispatch_batch", "SELECT source_scope, event_id, event_type, result, detail, attempts, latency_ms"
                         " FROM webhook_inbox_dispatch_batch($1::int, $2)"};

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
        snprintf(e->result, sizeof e->result, "%s", PQgetvalue(res, i, 3));
        e->detail = PQgetisnull(res, i, 4) ? NULL : strdup(PQgetvalue(res, i, 4));
        e->attempts = PQgetisnull(res, i, 5) ? 0 : atoi(PQgetvalue(res, i, 5));
        e->latency_ms = PQgetisnull(res, i, 6) ? 0 : atof(PQgetvalue(res, i, 6));
        if (!e->scope || !e->event_id || !e->event_type) {
            wi_batch_free(b);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
    }
    return n;
}

int wi_dispatch_batch_tx(struct wi_pg *pg, int limit, const char *unrouted, struct wi_batch *b, struct wi_err *err)
{
    char lim[16];
    const char *params[2] = {lim, unrouted};
    PGresult *res;
    int n;

    wi_batch_free(b);
    snprintf(lim, sizeof lim, "%d", limit);
    if (wi_pg_exec_tx(pg, "wi_begin", wi_dispatch_batch_stmt.name, 2, params, "wi_commit", "wi_rollback", &res, err) < 0)
        return -1;
    n = fill_batch(res, b, err);
    PQclear(res);
    return n;
}

int wi_dispatch(struct wi_pg *pg, struct wi_event *e, const char *unrouted, struct wi_err *err)
{
    const char *params[3] = {e->scope, e->event_id, unrouted};
    PGresult *res = wi_pg_exec(pg, wi_dispatch_stmt.name, 3, params, PGRES_TUPLES_OK, err);

    if (!res)
        return -1;
    if (PQntuples(res) != 1) {
        int n = PQntuples(res);
        PQclear(res);
        return wi_err_set(err, WI_ERR_PG, "dispatch returned %d rows", n);
    }
    snprintf(e->result, sizeof e->result, "%s", PQgetvalue(res, 0, 0));
    free(e->detail);
    e->detail = PQgetisnull(res, 0, 1) ? NULL : strdup(PQgetvalue(res, 0, 1));
    if (!PQgetisnull(res, 0, 2))
        e->attempts = atoi(PQgetvalue(res, 0, 2));
    e->latency_ms = PQgetisnull(res, 0, 3) ? 0 : atof(PQgetvalue(res, 0, 3));
    PQclear(res);
    return 0;
}
