/* flow_admin.c - `pause` / `resume` of a route, scope or destination: one statement each,
 * on a fresh connection, after the schema check (the functions come with db/015). */
#define _POSIX_C_SOURCE 200809L
#include "admin/flow_admin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "pg/schema.h"

static const struct wi_pg_stmt stmts[] = {
    {"wi_pause", "SELECT held FROM webhook_inbox_pause($1, $2, $3)"},
    {"wi_resume", "SELECT released FROM webhook_inbox_resume($1, $2, $3::float8, $4)"},
};

int wi_flow_target(const char *type, const char *scope, const char *destination, struct wi_flow_target *t,
                   struct wi_err *err)
{
    int n = !!type + !!scope + !!destination;

    if (n != 1)
        return wi_err_set(err, WI_ERR_ARG, "%s: give one of --type PATTERN (a route), --scope SCOPE or "
                          "--destination NAME", n ? "one target at a time" : "nothing to act on");
    t->kind = type ? "route" : scope ? "scope" : "destination";
    t->target = type ? type : scope ? scope : destination;
    return 0;
}

/* Runs one of stmts with params; returns its first value as a count, or -1 with *err. A
 * value the database refuses (22023, 22P02) is WI_ERR_ARG. */
static long run(const char *conninfo, const char *name, int n, const char *const *params, struct wi_err *err)
{
    struct wi_pg *pg;
    PGresult *res;
    long count;

    if (!(pg = wi_pg_connect(conninfo, wi_schema_stmts, wi_schema_stmts_count, err)))
        return -1;
    if (wi_schema_require(pg, err) < 0 || wi_pg_prepare(pg, stmts, 2, err) < 0 ||
        !(res = wi_pg_exec(pg, name, n, params, PGRES_TUPLES_OK, err))) {
        const char *state = wi_pg_last_sqlstate(pg);
        if (!strcmp(state, "22023") || !strcmp(state, "22P02") || !strcmp(state, "23514"))
            err->code = WI_ERR_ARG;
        wi_pg_free(pg);
        return -1;
    }
    count = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ? atol(PQgetvalue(res, 0, 0)) : 0;
    PQclear(res);
    wi_pg_free(pg);
    return count;
}

long wi_flow_pause(const char *conninfo, const struct wi_flow_target *t, const char *actor, struct wi_err *err)
{
    const char *params[3] = {t->kind, t->target, actor};
    return run(conninfo, "wi_pause", 3, params, err);
}

long wi_flow_resume(const char *conninfo, const struct wi_flow_target *t, const char *rate, const char *actor,
                    struct wi_err *err)
{
    const char *params[4] = {t->kind, t->target, rate, actor};
    char *end;
    double r;

    if (rate) {
        errno = 0;
        r = strtod(rate, &end);
        if (errno || end == rate || *end || !(r > 0) || r > 100000)
            return wi_err_set(err, WI_ERR_ARG, "--rate is events per second: a number > 0 and <= 100000");
    }
    return run(conninfo, "wi_resume", 4, params, err);
}

/* Targets are operator and provider text: JSON-quoted by the server for --json. */
static const struct wi_pg_stmt stats_stmt = {
    "wi_flow_stats", "SELECT kind, target, paused, rate, pending, json_build_object('kind', kind, 'target', target,"
                     " 'paused', paused, 'rate', rate, 'pending', pending)::text FROM webhook_inbox_flow_stats()"};

int wi_flow_stats(struct wi_pg *pg, int json, FILE *out, struct wi_err *err)
{
    PGresult *r;
    int i;

    if (wi_pg_prepare(pg, &stats_stmt, 1, err) < 0 || !(r = wi_pg_exec(pg, stats_stmt.name, 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    fputs(json ? ",\"flow\":[" : "flow                   (paused and rate-limited routes, scopes, destinations)\n", out);
    for (i = 0; i < PQntuples(r); i++) {
        if (json) {
            fprintf(out, "%s%s", i ? "," : "", PQgetvalue(r, i, 5));
        } else {
            char target[300];
            fprintf(out, "  %s=%s %s rate=%s pending=%s\n", PQgetvalue(r, i, 0),
                    wi_log_quote(target, sizeof target, PQgetvalue(r, i, 1), 255),
                    !strcmp(PQgetvalue(r, i, 2), "t") ? "paused" : "running",
                    PQgetisnull(r, i, 3) ? "-" : PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
        }
    }
    if (json)
        fputc(']', out);
    PQclear(r);
    return 0;
}
