/* schema.c - the inbox schema version check: webhook_inbox_schema_version() and
 * webhook_inbox_schema_min_worker() (db/functions/schema_version.sql) against WI_SCHEMA_VERSION. */
#define _POSIX_C_SOURCE 200809L
#include "pg/schema.h"

#include <stdlib.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

const struct wi_pg_stmt wi_schema_stmts[] = {
    /* to_regprocedure(): NULL instead of an error when the function does not exist. */
    {"wi_schema_exists", "SELECT to_regprocedure('webhook_inbox_schema_version()') IS NOT NULL"
                         " AND to_regprocedure('webhook_inbox_schema_min_worker()') IS NOT NULL"},
};
const int wi_schema_stmts_count = (int)(sizeof wi_schema_stmts / sizeof wi_schema_stmts[0]);

/* Prepared only once the functions are known to exist. */
static const struct wi_pg_stmt version_stmt = {
    "wi_schema_version", "SELECT webhook_inbox_schema_version(), webhook_inbox_schema_min_worker()"};

int wi_schema_check(struct wi_pg *pg, struct wi_schema *found, struct wi_err *err)
{
    PGresult *res;
    int exists;

    found->version = found->min_worker = -1;
    if (!(res = wi_pg_exec(pg, "wi_schema_exists", 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    exists = PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (!exists)
        return WI_SCHEMA_STALE;
    if (wi_pg_prepare(pg, &version_stmt, 1, err) < 0)
        return -1;
    if (!(res = wi_pg_exec(pg, version_stmt.name, 0, NULL, PGRES_TUPLES_OK, err)))
        return -1;
    if (PQntuples(res) == 1) {
        found->version = PQgetisnull(res, 0, 0) ? -1 : atoi(PQgetvalue(res, 0, 0));
        found->min_worker = PQgetisnull(res, 0, 1) ? -1 : atoi(PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    if (found->version < WI_SCHEMA_VERSION)
        return WI_SCHEMA_STALE;
    if (found->min_worker > WI_SCHEMA_VERSION)
        return WI_SCHEMA_TOO_NEW;
    return WI_SCHEMA_OK;
}

const char *wi_schema_problem(int outcome)
{
    switch (outcome) {
    case WI_SCHEMA_STALE:
        return "inbox schema missing or older than v" STR(WI_SCHEMA_VERSION) ": run `bin/rails db:migrate` (after "
               "`bin/rails g webhook_inbox:install`) or `webhook-inbox-sidecar migrate`";
    case WI_SCHEMA_TOO_NEW:
        return "this sidecar is older than the schema requires: upgrade it";
    default:
        return "";
    }
}

int wi_schema_require(struct wi_pg *pg, struct wi_err *err)
{
    struct wi_schema found;
    int rc = wi_schema_check(pg, &found, err);

    if (rc < 0)
        return -1;
    if (rc == WI_SCHEMA_STALE && found.version < 0)
        return wi_err_set(err, WI_ERR_SCHEMA_STALE, "found no schema version");
    if (rc == WI_SCHEMA_STALE)
        return wi_err_set(err, WI_ERR_SCHEMA_STALE, "found schema v%d", found.version);
    if (rc == WI_SCHEMA_TOO_NEW)
        return wi_err_set(err, WI_ERR_SCHEMA_TOO_NEW, "schema v%d needs sidecar v%d or newer, this is v%d",
                          found.version, found.min_worker, WI_SCHEMA_VERSION);
    return 0;
}

const char *wi_schema_err_problem(const struct wi_err *err)
{
    if (err->code == WI_ERR_SCHEMA_STALE)
        return wi_schema_problem(WI_SCHEMA_STALE);
    if (err->code == WI_ERR_SCHEMA_TOO_NEW)
        return wi_schema_problem(WI_SCHEMA_TOO_NEW);
    return NULL;
}
