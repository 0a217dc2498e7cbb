/* prune.c - retention: delete old done events in small batches. */
#define _POSIX_C_SOURCE 200809L
#include "prune.h"

#include <stdio.h>
#include <stdlib.h>

const struct wi_pg_stmt wi_prune_stmt = {
    "wi_prune",
    "WITH doomed AS ("
    " SELECT source_scope, event_id FROM webhook_inbox"
    " WHERE status = 'done' AND received_at < now() - $1::double precision * interval '1 second'"
    "  AND ($2::text IS NULL OR source_scope = $2)"
    " LIMIT $3::int FOR UPDATE SKIP LOCKED),"
    " gone AS (DELETE FROM webhook_inbox w USING doomed d"
    "  WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id RETURNING 1)"
    " SELECT count(*) FROM gone"};

long wi_prune_step(struct wi_pg *pg, double older_than, const char *scope, int limit, struct wi_err *err)
{
    char age[32], lim[16];
    const char *params[3] = {age, scope, lim};
    PGresult *res;
    long n;

    if (older_than < WI_PRUNE_MIN_AGE) /* also the last line of defence for --retain */
        return wi_err_set(err, WI_ERR_ARG, "retention below 3d refused");
    snprintf(age, sizeof age, "%.3f", older_than);
    snprintf(lim, sizeof lim, "%d", limit);
    if (!(res = wi_pg_exec(pg, wi_prune_stmt.name, 3, params, PGRES_TUPLES_OK, err)))
        return -1;
    n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    return n;
}

long wi_prune(const char *conninfo, double older_than, const char *scope, struct wi_err *err)
{
    struct wi_pg *pg;
    long total = 0, n;

    if (older_than <= 0)
        return wi_err_set(err, WI_ERR_ARG, "prune needs --older-than (e.g. 30d)");
    if (older_than < WI_PRUNE_MIN_AGE)
        return wi_err_set(err, WI_ERR_ARG, "--older-than must be at least 3d (keep done events longer than providers retry)");
    if (!(pg = wi_pg_connect(conninfo, &wi_prune_stmt, 1, err)))
        return -1;
    do {
        if ((n = wi_prune_step(pg, older_than, scope, 5000, err)) < 0) {
            wi_pg_free(pg);
            return -1;
        }
        total += n;
    } while (n > 0);
    wi_pg_free(pg);
    return total;
}
