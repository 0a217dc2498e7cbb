/* requeue.c - quarantined -> pending (attempts 0, due now), filtered by scope/id/type. */
#define _POSIX_C_SOURCE 200809L
#include "requeue.h"

#include <stdlib.h>

#include "pgw.h"

static const struct wi_pg_stmt stmts[] = {
    {"wi_requeue",
     "WITH moved AS ("
     " UPDATE webhook_inbox SET status = 'pending', attempts = 0, next_attempt_at = now(),"
     "  last_error = NULL, outcome = NULL, processed_at = NULL"
     " WHERE status = 'quarantined'"
     "  AND ($1::text IS NULL OR source_scope = $1) AND ($2::text IS NULL OR event_id = $2)"
     "  AND ($3::text IS NULL OR event_type = $3)"
     " RETURNING 1)"
     " SELECT count(*), pg_notify('webhook_inbox', '') FROM moved"},
};

long wi_requeue(const char *conninfo, const char *scope, const char *event_id, const char *type, int all,
                struct wi_err *err)
{
    const char *params[3] = {scope, event_id, type};
    struct wi_pg *pg;
    PGresult *res;
    long n;

    if (!all && !scope && !event_id && !type)
        return wi_err_set(err, WI_ERR_ARG, "requeue needs --id, --event-id, --type, --scope or --all");
    if (!(pg = wi_pg_connect(conninfo, stmts, 1, err)))
        return -1;
    res = wi_pg_exec(pg, "wi_requeue", 3, params, PGRES_TUPLES_OK, err);
    if (!res) {
        wi_pg_free(pg);
        return -1;
    }
    n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    wi_pg_free(pg);
    return n;
}
