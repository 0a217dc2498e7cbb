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
