/* test_store.c - unit tests of the store core that need no server: interrupt bookkeeping
 * (an interrupt that arrives before a call, e.g. during the binding's jsonb pre-scan, is
 * not lost), which refusals split a batch, and password redaction (redact.c). Built plain
 * and under ASan/UBSan by store.mk. */
#include <stdio.h>
#include <string.h>
#include "../redact.h"
#include "../store.h"

#include "check.h"

/* Nothing listens on port 1 of the loopback: a connect attempt fails at once. */
#define NOWHERE "host=127.0.0.1 port=1 dbname=x user=x"

static void test_interrupt_before_insert_is_kept(void)
{
    struct wi_err err;
    struct wi_store_row row = {"s", 1, "e", 1, "", 0, "{}", 2, 0, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0};
    struct wi_store_result out;
    struct wi_store *s = wi_store_new(NOWHERE, 1000, 1000, &err);

    CHECK(s != NULL, "wi_store_new: %s", err.msg);
    if (!s)
        return;
    /* The interrupt comes first (the binding's pre-scan runs before wi_store_insert). */
    wi_store_interrupt(s);
    CHECK(wi_store_insert(s, &row, &out, &err) == -1, "insert succeeded");
    CHECK(err.code == WI_STORE_EINTR, "got code %d (%s), want WI_STORE_EINTR", err.code, err.msg);
    /* Consumed: the next call really tries (and fails to connect). */
    CHECK(wi_store_insert(s, &row, &out, &err) == -1, "insert succeeded");
    CHECK(err.code == WI_STORE_ECONNECT, "got code %d (%s), want WI_STORE_ECONNECT", err.code, err.msg);
    wi_store_interrupt(s);
    CHECK(wi_store_connect(s, &err) == -1 && err.code == WI_STORE_EINTR,
          "connect after interrupt: code %d (%s)", err.code, err.msg);
    wi_store_free(s);
}

/* The batch entry point: argument checks and interrupt bookkeeping, no server needed. */
static void test_batch_without_server(void)
{
    struct wi_err err;
    struct wi_store_row rows[2] = {{"s", 1, "e1", 2, "", 0, "{}", 2, 0, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0},
                                   {"s", 1, "e2", 2, "", 0, "{}", 2, 0, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0}};
    struct wi_store_result outs[2];
    struct wi_store *s = wi_store_new(NOWHERE, 1000, 1000, &err);

    CHECK(s != NULL, "wi_store_new: %s", err.msg);
    if (!s)
        return;
    CHECK(wi_store_insert_batch(s, rows, 0, outs, &err) == 0, "empty batch: %s", err.msg);
    CHECK(wi_store_insert_batch(s, rows, WI_STORE_BATCH_MAX + 1, outs, &err) == -1 && err.code == WI_ERR_ARG,
          "oversized batch: code %d", err.code);
    wi_store_interrupt(s);
    CHECK(wi_store_insert_batch(s, rows, 2, outs, &err) == -1 && err.code == WI_STORE_EINTR,
          "interrupted batch: code %d (%s)", err.code, err.msg);
    CHECK(wi_store_insert_batch(s, rows, 2, outs, &err) == -1 && err.code == WI_STORE_ECONNECT,
          "batch after interrupt: code %d (%s)", err.code, err.msg);
    CHECK(wi_store_insert_batch(s, rows, 1, outs, &err) == -1 && err.code == WI_STORE_ECONNECT,
          "one-row batch: code %d (%s)", err.code, err.msg);
    wi_store_close(s);
    wi_store_free(s);
}

struct span_case {
    const char *url;
    const char *password; /* NULL: none found */
    int split;
};

static const struct span_case spans[] = {
    {"postgres://u:pw@h/d", "pw", 0},
    {"postgresql://u:p@ss@h:5432/d", "p@ss", 1},
    {"postgres://u:p/ss@h/d", "p/ss", 1},
    {"postgres://u:p?x@ss@h/d?user=a@b", "p?x@ss", 1},
    {"postgres://u:pw@h/d?user=a@b", "pw", 0},
    {"postgres://u:p%40ss@h/d", "p%40ss", 0},
    {"postgres://u:@h/d", "", 0},
    {"postgres://u@h/d", NULL, 0},
    {"postgres://h:5432/d?user=a@b", NULL, 0},
    {"postgres://h/db@x", NULL, 0},
    {"postgres://", NULL, 0},
    {"host=h password=p@ss", NULL, 0},
    {"", NULL, 0},
};

static void test_password_span(void)
{
    size_t i, off, len;

    for (i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        const struct span_case *c = &spans[i];
        int found = wi_redact_password_span(c->url, &off, &len);
        CHECK(found == (c->password != NULL), "%s: found=%d", c->url, found);
        if (found && c->password)
            CHECK(len == strlen(c->password) && !strncmp(c->url + off, c->password, len),
                  "%s: span '%.*s', want '%s'", c->url, (int)len, c->url + off, c->password);
        CHECK(wi_redact_url_split(c->url) == c->split, "%s: split", c->url);
    }
    CHECK(!wi_redact_url_split(NULL), "NULL");
}

static void test_scrub(void)
{
    char msg[128];

    snprintf(msg, sizeof msg, "host \"ss@h\" p@ss and p%%40ss; libpq pw");
    wi_redact_scrub(msg, "postgres://u:p%40ss@h/d", "pw");
    CHECK(!strcmp(msg, "host \"ss@h\" **** and ******; libpq **"), "got %s", msg);
    snprintf(msg, sizeof msg, "nothing to hide");
    wi_redact_scrub(msg, "host=h", NULL);
    CHECK(!strcmp(msg, "nothing to hide"), "got %s", msg);
    snprintf(msg, sizeof msg, "trailing %%");
    wi_redact_scrub(msg, "postgres://u:ab%4@h/d", NULL); /* a truncated escape stays as is */
    CHECK(!strcmp(msg, "trailing %"), "got %s", msg);
}

static void test_store_refuses_split_url(void)
{
    struct wi_err err;
    struct wi_store *s = wi_store_new("postgres://u:hunter2@Xyzzy@127.0.0.1:1/d", 1000, 1000, &err);

    CHECK(s == NULL && err.code == WI_ERR_ARG, "split URL accepted");
    CHECK(!strstr(err.msg, "hunter2") && !strstr(err.msg, "Xyzzy"), "message shows the password: %s", err.msg);
    wi_store_free(s);
}

/* Which refusals split a batch row by row (one row's fault) and which fail it whole. */
static void test_row_errors(void)
{
    static const char *const one_row[] = {"22P02", "23514", "23503", "54000", "40001", "40P01",
                                          "P0001", "0A000", "XX000"};
    static const char *const every_row[] = {"08006", "26000", "28P01", "3D000", "42P01", "42501",
                                            "53100", "55P03", "57014", "57P01", "58030", "F0000", "25006"};
    size_t i;

    for (i = 0; i < sizeof one_row / sizeof one_row[0]; i++)
        CHECK(wi_store_row_error(one_row[i]), "%s should split a batch", one_row[i]);
    for (i = 0; i < sizeof every_row / sizeof every_row[0]; i++)
        CHECK(!wi_store_row_error(every_row[i]), "%s should fail the batch whole", every_row[i]);
    CHECK(!wi_store_row_error("") && !wi_store_row_error(NULL) && !wi_store_row_error("2351"),
          "no SQLSTATE is no row's fault");
}

int main(void)
{
    test_row_errors();
    test_interrupt_before_insert_is_kept();
    test_batch_without_server();
    test_password_span();
    test_scrub();
    test_store_refuses_split_url();
    printf("test_store: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
