/* outbox_admin.c - `stats` for the outbox (effects per destination) and `requeue --effects`:
 * one statement each on the caller's or a fresh connection. */
#define _POSIX_C_SOURCE 200809L
#include "admin/outbox_admin.h"

#include <stdlib.h>

#include "core/log.h"
#include "delivery/destination.h"

static const struct wi_pg_stmt stats_stmt = {
    "wi_outbox_stats", "SELECT destination, pending, retrying, leased, round(oldest_pending_age_s::numeric, 1),"
                       " quarantined, delivered, to_json(destination)::text FROM webhook_inbox_outbox_stats()"};

int wi_outbox_stats(struct wi_pg *pg, int json, FILE *out, struct wi_err *err)
{
    /* v7's delivered counts the last hour only (it reads no older delivered row): named so. */
    static const char *const cols[] = {"pending", "retrying", "leased", "oldest_pending_age_s", "quarantined",
                                       "delivered_last_hour"};
    PGresult *r;
    int i, c;

    if (wi_pg_prepare(pg, &stats_stmt, 1, err) < 0 || !(r = wi_pg_exec(pg, stats_stmt.name, 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    fputs(json ? ",\"outbox\":{" : "outbox                 (effects per destination)\n", out);
    for (i = 0; i < PQntuples(r); i++) {
        if (json) {
            fprintf(out, "%s%s:{", i ? "," : "", PQgetvalue(r, i, 7));
            for (c = 0; c < 6; c++)
                fprintf(out, "%s\"%s\":%s", c ? "," : "", cols[c], PQgetisnull(r, i, c + 1) ? "null" : PQgetvalue(r, i, c + 1));
            fputc('}', out);
        } else {
            char name[160];
            fprintf(out, "  destination=%s", wi_log_quote(name, sizeof name, PQgetvalue(r, i, 0), 120));
            for (c = 0; c < 6; c++)
                fprintf(out, " %s=%s", cols[c], PQgetisnull(r, i, c + 1) ? "-" : PQgetvalue(r, i, c + 1));
            fputc('\n', out);
        }
    }
    if (json)
        fputc('}', out);
    PQclear(r);
    return 0;
}

long wi_outbox_requeue(const char *conninfo, const char *operation_id, const char *destination, int all,
                       struct wi_err *err)
{
    static const struct wi_pg_stmt stmt = {"wi_outbox_requeue", "SELECT webhook_inbox_outbox_requeue($1, $2)"};
    const char *params[2] = {operation_id, destination};
    struct wi_pg *pg;
    PGresult *r;
    long n;

    if (!all && !operation_id && !destination)
        return wi_err_set(err, WI_ERR_ARG, "requeue --effects needs --operation-id, --destination NAME or --all");
    if (all && destination)
        return wi_err_set(err, WI_ERR_ARG, "requeue --effects: --all means every destination; "
                          "give --destination NAME without --all for one");
    if (destination && !wi_dest_name_ok(destination))
        return wi_err_set(err, WI_ERR_ARG, "requeue --effects: a destination name must match [a-z][a-z0-9_]{0,62}");
    if (!(pg = wi_pg_connect(conninfo, &stmt, 1, err)))
        return -1;
    if (!(r = wi_pg_exec(pg, stmt.name, 2, params, PGRES_TUPLES_OK, err))) {
        wi_pg_free(pg);
        return -1;
    }
    n = atol(PQgetvalue(r, 0, 0));
    PQclear(r);
    wi_pg_free(pg);
    return n;
}
