/* test_store.c - unit tests of the store core that need no server: interrupt bookkeeping
 * (an interrupt that arrives before a call, e.g. during the binding's jsonb pre-scan, is
 * not lost). Built plain and under ASan/UBSan by store.mk. */
#include <stdio.h>
#include <string.h>
#include "../store.h"

static int failures, checks;

#define CHECK(cond, ...)                                               \
    do {                                                               \
        checks++;                                                      \
        if (!(cond)) {                                                 \
            failures++;                                                \
            fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                              \
            fputc('\n', stderr);                                       \
        }                                                              \
    } while (0)

/* Nothing listens on port 1 of the loopback: a connect attempt fails at once. */
#define NOWHERE "host=127.0.0.1 port=1 dbname=x user=x"

static void test_interrupt_before_insert_is_kept(void)
{
    struct wi_err err;
    struct wi_store_row row = {"s", 1, "e", 1, "", 0, "{}", 2, 0, 0, NULL, 0};
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

int main(void)
{
    test_interrupt_before_insert_is_kept();
    printf("test_store: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
