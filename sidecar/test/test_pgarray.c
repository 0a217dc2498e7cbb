/* test_pgarray.c - array literals: quoting, escaping, NULLs, the empty array, reuse. With
 * WI_TEST_DATABASE_URL set, each literal also goes through PostgreSQL's own array parser
 * ($1::text[]) and must come back element for element. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "minitest.h"
#include "pg/pgarray.h"
#include "pg/pgw.h"

static const char *const tricky[] = {
    "plain", "", "with space", "a,b", "{braces}", "\"quoted\"", "back\\slash", "\\\"", "NULL", "null",
    "tab\there\nnewline", "{\"id\":\"rcpt_1\",\"note\":\"a \\\"b\\\" c\"}", "caf\xc3\xa9", " lead and trail ",
};
#define NTRICKY (int)(sizeof tricky / sizeof tricky[0])

/* $1::text[] back as one row per element: ordinality, is null, value. */
static void round_trip(struct wi_pg *pg, const char *lit, const char *const *want, int n)
{
    const char *params[1] = {lit};
    struct wi_err err;
    PGresult *r = wi_pg_exec(pg, "t_unnest", 1, params, PGRES_TUPLES_OK, &err);
    int i;

    CHECK(r != NULL);
    if (!r) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK(PQntuples(r) == n);
    for (i = 0; i < n && i < PQntuples(r); i++) {
        if (!want[i]) {
            CHECK(PQgetisnull(r, i, 0));
        } else {
            CHECK(!PQgetisnull(r, i, 0));
            CHECK(strcmp(PQgetvalue(r, i, 0), want[i]) == 0);
        }
    }
    PQclear(r);
}

int main(void)
{
    static const struct wi_pg_stmt stmts[] = {
        {"t_unnest", "SELECT u FROM unnest($1::text[]) WITH ORDINALITY x(u, o) ORDER BY o"}};
    struct wi_pgarray a = {0};
    const char *url = getenv("WI_TEST_DATABASE_URL"), *lit;
    const char *with_nulls[] = {NULL, "x", NULL, "NULL"};
    struct wi_pg *pg = NULL;
    struct wi_err err;
    int i;

    if (url && *url) {
        alarm(30);
        pg = wi_pg_connect(url, stmts, 1, &err);
        CHECK(pg != NULL);
    }

    /* Empty, then elements after an empty end. */
    CHECK(strcmp(wi_pgarray_end(&a), "{}") == 0);
    CHECK(wi_pgarray_add_str(&a, "a") == 0);
    CHECK(strcmp(wi_pgarray_end(&a), "{\"a\"}") == 0);
    CHECK(wi_pgarray_add_str(&a, NULL) == 0);
    CHECK(wi_pgarray_add(&a, "b\"c\\d", 5) == 0);
    CHECK(strcmp(wi_pgarray_end(&a), "{\"a\",NULL,\"b\\\"c\\\\d\"}") == 0);
    CHECK(a.n == 3);

    /* Only len bytes are taken. */
    wi_pgarray_reset(&a, 1 << 20);
    CHECK(wi_pgarray_add(&a, "abcdef", 3) == 0);
    CHECK(strcmp(wi_pgarray_end(&a), "{\"abc\"}") == 0);

    /* NULL elements: unquoted NULL; the string "NULL" stays a string. */
    wi_pgarray_reset(&a, 1 << 20);
    for (i = 0; i < 4; i++)
        CHECK(wi_pgarray_add_str(&a, with_nulls[i]) == 0);
    lit = wi_pgarray_end(&a);
    CHECK(strcmp(lit, "{NULL,\"x\",NULL,\"NULL\"}") == 0);
    if (pg)
        round_trip(pg, lit, with_nulls, 4);

    /* Every character the array parser treats specially, through the real parser. */
    wi_pgarray_reset(&a, 1 << 20);
    for (i = 0; i < NTRICKY; i++)
        CHECK(wi_pgarray_add_str(&a, tricky[i]) == 0);
    lit = wi_pgarray_end(&a);
    CHECK(lit != NULL && a.n == NTRICKY);
    if (pg)
        round_trip(pg, lit, tricky, NTRICKY);

    /* Growth past the first allocation; a reset above keep_bytes frees the buffer. */
    wi_pgarray_reset(&a, 1 << 20);
    {
        char big[5000];
        memset(big, '"', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        CHECK(wi_pgarray_add_str(&a, big) == 0);
        CHECK(wi_pgarray_add_str(&a, big) == 0);
        lit = wi_pgarray_end(&a);
        CHECK(lit != NULL && strlen(lit) == 2 + 2 * (2 + 2 * (sizeof big - 1)) + 1);
        if (pg) {
            const char *want[2] = {big, big};
            round_trip(pg, lit, want, 2);
        }
    }
    wi_pgarray_reset(&a, 4096);
    CHECK(a.buf == NULL && a.cap == 0 && a.n == 0);
    CHECK(strcmp(wi_pgarray_end(&a), "{}") == 0);

    wi_pgarray_free(&a);
    wi_pgarray_free(NULL);
    wi_pg_free(pg);
    DONE("test_pgarray");
}
