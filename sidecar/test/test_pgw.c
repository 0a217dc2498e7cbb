/* test_pgw.c - the libpq wrapper against a real PostgreSQL named by WI_TEST_DATABASE_URL
 * (spec/sidecar/pgw_spec.rb runs it on the throwaway cluster; without the variable it skips).
 * Checks that a pipelined transaction whose send fails ends cleanly: no wait for results a
 * pipeline without a sync point never gets, no connection left in pipeline mode. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <unistd.h>

#include "minitest.h"
#include "pg/pgw.h"

int main(void)
{
    static const struct wi_pg_stmt stmts[] = {
        {"t_begin", "BEGIN"}, {"t_one", "SELECT 1"}, {"t_commit", "COMMIT"}, {"t_rollback", "ROLLBACK"}};
    const char *url = getenv("WI_TEST_DATABASE_URL");
    const char **too_many;
    struct wi_err err;
    struct wi_pg *pg;
    PGresult *out = NULL;

    if (!url || !*url) {
        printf("test_pgw: skipped (WI_TEST_DATABASE_URL unset)\n");
        return 0;
    }
    alarm(30); /* a hang fails the test instead of the run */
    pg = wi_pg_connect(url, stmts, 4, &err);
    CHECK(pg != NULL);
    if (!pg)
        DONE("test_pgw");

    /* libpq refuses to queue the middle statement (more than 65535 parameters) after BEGIN
     * was queued: the send fails with the connection still up. */
    too_many = calloc(70000, sizeof *too_many);
    CHECK(wi_pg_exec_tx(pg, "t_begin", "t_one", 70000, too_many, "t_commit", "t_rollback", &out, &err) == -1);
    CHECK(out == NULL);
    free(too_many);
    /* Usable afterwards, outside any transaction and pipeline. */
    CHECK(wi_pg_cmd(pg, "t_one", 0, NULL, &err) == 0);
    CHECK(wi_pg_exec_tx(pg, "t_begin", "t_one", 0, NULL, "t_commit", "t_rollback", &out, &err) == 0);
    CHECK(out != NULL && PQntuples(out) == 1);
    PQclear(out);
    CHECK(wi_pg_cmd(pg, "t_commit", 0, NULL, &err) == 0); /* no transaction left open: only a warning */
    wi_pg_free(pg);
    DONE("test_pgw");
}
