/* requeue.c - quarantined -> pending (requeue) or done -> pending (replay), filtered by
 * scope/id/type, through webhook_inbox_requeue(): audited in webhook_inbox_actions with the
 * actor, as the dashboard's actions are. */
#define _POSIX_C_SOURCE 200809L
#include "admin/requeue.h"

#include <stdlib.h>

#include "pg/pgw.h"
#include "pg/schema.h"

/* The filter holds only the keys given (jsonb_strip_nulls): '{}' for --all. */
static const struct wi_pg_stmt stmts[] = {
    {"wi_requeue",
     "SELECT moved FROM webhook_inbox_requeue($1, jsonb_strip_nulls(jsonb_build_object("
     "'scope', $2::text, 'event_id', $3::text, 'type', $4::text)), $5)"},
};

long wi_requeue(const char *conninfo, int replay, const char *scope, const char *event_id, const char *type, int all,
                const char *actor, struct wi_err *err)
{
    const char *params[5] = {replay ? "replay" : "requeue", scope, event_id, type, actor};
    struct wi_pg *pg;
    PGresult *res;
    long n;

    if (!all && !scope && !event_id && !type)
        return wi_err_set(err, WI_ERR_ARG, "%s needs --id, --event-id, --type, --scope%s", replay ? "replay" : "requeue",
                          replay ? "" : " or --all");
    if (replay && all)
        return wi_err_set(err, WI_ERR_ARG, "--replay --all would run every done event again: give a filter");
    if (!(pg = wi_pg_connect(conninfo, wi_schema_stmts, wi_schema_stmts_count, err)))
        return -1;
    if (wi_schema_require(pg, err) < 0 || wi_pg_prepare(pg, stmts, 1, err) < 0 ||
        !(res = wi_pg_exec(pg, "wi_requeue", 5, params, PGRES_TUPLES_OK, err))) {
        wi_pg_free(pg);
        return -1;
    }
    n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    wi_pg_free(pg);
    return n;
}
