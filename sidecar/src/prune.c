/* prune.c - retention: delete old done events in small batches. */
#define _POSIX_C_SOURCE 200809L
#include "prune.h"

#include <stdio.h>
#include <stdlib.h>

#include "pgw.h"

static const struct wi_pg_stmt stmts[] = {
    {"wi_prune",
     "WITH doomed AS ("
     " SELECT source_scope, event_id FROM webhook_inbox"
     " WHERE status = 'done' AND received_at < now() - $1::double precision * interval '1 second'"
     "  AND ($2::text IS NULL OR source_scope = $2)"
     " LIMIT 5000 FOR UPDATE SKIP LOCKED),"
     " gone AS (DELETE FROM webhook_inbox w USING doomed d"
     "  WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id RETURNING 1)"
     " SELECT count(*) FROM gone"},
};

long wi_prune(const char *conninfo, double older_than, const char *scope, struct wi_err *err)
{
    char age[32];
    const char *params[2] = {age, scope};
    struct wi_pg *pg;
    long total = 0, n;

    if (older_than <= 0)
        return wi_err_set(err, WI_ERR_ARG, "prune needs --older-than (e.g. 30d)");
    if (older_than < WI_PRUNE_MIN_AGE)
        return wi_err_set(err, WI_ERR_ARG, "--older-than must be at least 3d (keep done events longer than providers retry)");
    snprintf(age, sizeof age, "%.3f", older_than);
    if (!(pg = wi_pg_connect(conninfo, stmts, 1, err)))
        return -1;
    do {
        PGresult *res = wi_pg_exec(pg, "wi_prune", 2, params, PGRES_TUPLES_OK, err);
        if (!res) {
            wi_pg_free(pg);
            return -1;
        }
        n = atol(PQgetvalue(res, 0, 0));
        PQclear(res);
        total += n;
    } while (n > 0);
    wi_pg_free(pg);
    return total;
}
