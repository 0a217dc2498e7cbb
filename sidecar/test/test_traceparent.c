/* test_traceparent.c - the W3C traceparent parser (observability/traceparent.c): what it keeps,
 * what it refuses, every truncation, a child's new span id and a handle span's derived one. */
#include <stdlib.h>
#include <string.h>

#include "minitest.h"
#include "observability/traceparent.h"

#define GOOD "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static int parses(const char *s)
{
    struct wi_traceparent tp;
    return wi_traceparent_parse(s, strlen(s), &tp) == 0;
}

int main(void)
{
    static const char *const bad[] = {
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", /* upper case */
        "00-00000000000000000000000000000000-b7ad6b7169203331-01", /* zero trace id */
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", /* zero span id */
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", /* another version */
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", /* separators */
        "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331_01",
        "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01", /* not hex */
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-", /* too long */
        "",
    };
    struct wi_traceparent tp, child;
    char out[WI_TRACEPARENT_LEN + 1], buf[WI_TRACEPARENT_LEN + 8];
    size_t i;

    CHECK(wi_traceparent_parse(GOOD, strlen(GOOD), &tp) == 0);
    CHECK(tp.trace_id[0] == 0x0a && tp.trace_id[15] == 0x9c && tp.span_id[0] == 0xb7 && tp.span_id[7] == 0x31);
    CHECK(tp.flags == 1);
    wi_traceparent_format(&tp, out);
    CHECK(strcmp(out, GOOD) == 0);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!parses(bad[i]));
    CHECK(wi_traceparent_parse(NULL, 55, &tp) < 0);
    /* every truncation point, from a buffer holding only those bytes (ASan sees an over-read) */
    for (i = 0; i < WI_TRACEPARENT_LEN; i++) {
        char *cut = malloc(i ? i : 1);
        memcpy(cut, GOOD, i);
        CHECK(wi_traceparent_parse(cut, i, &tp) < 0);
        free(cut);
    }
    /* a valid one inside a longer buffer: only len bytes count */
    memcpy(buf, GOOD "zzzz", WI_TRACEPARENT_LEN + 4);
    CHECK(wi_traceparent_parse(buf, WI_TRACEPARENT_LEN, &tp) == 0);
    CHECK(wi_traceparent_parse(buf, WI_TRACEPARENT_LEN + 1, &tp) < 0);

    CHECK(wi_traceparent_parse(GOOD, strlen(GOOD), &tp) == 0);
    CHECK(wi_traceparent_child(&tp, &child) == 0);
    CHECK(memcmp(child.trace_id, tp.trace_id, 16) == 0 && child.flags == tp.flags);
    CHECK(memcmp(child.span_id, tp.span_id, 8) != 0);
    wi_traceparent_format(&child, out);
    CHECK(parses(out));

    /* the handle span: derived, the same vector db/functions/traces.sql's
     * webhook_inbox_handle_trace_context() gives (spec/integration/trace_context_spec.rb) */
    CHECK(wi_traceparent_handle(&tp, "stripe:acct_1:live", "evt_1", 2, &child) == 0);
    wi_traceparent_format(&child, out);
    CHECK(strcmp(out, "00-0af7651916cd43dd8448eb211c80319c-428e77060a7f45fe-01") == 0);
    CHECK(wi_traceparent_handle(&tp, "s", "\xc3\xa9", 0, &child) == 0);
    wi_traceparent_format(&child, out);
    CHECK(strcmp(out, "00-0af7651916cd43dd8448eb211c80319c-873418cc503b05ef-01") == 0);
    /* another attempt, another span; the scope/id boundary counts */
    CHECK(wi_traceparent_handle(&tp, "stripe:acct_1:live", "evt_1", 3, &child) == 0);
    wi_traceparent_format(&child, out);
    CHECK(strcmp(out + 36, "428e77060a7f45fe-01") != 0);
    {
        struct wi_traceparent a, b;
        CHECK(wi_traceparent_handle(&tp, "ab", "c", 0, &a) == 0 && wi_traceparent_handle(&tp, "a", "bc", 0, &b) == 0);
        CHECK(memcmp(a.span_id, b.span_id, 8) != 0);
    }
    DONE("test_traceparent");
}
