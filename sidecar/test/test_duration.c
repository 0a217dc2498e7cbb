/* test_duration.c - the duration syntax (core/duration.c): units, and what is refused. */
#include "core/duration.h"
#include "minitest.h"

int main(void)
{
    double s;

    CHECK(wi_duration_parse("250ms", &s) == 0 && s > 0.2499 && s < 0.2501);
    CHECK(wi_duration_parse("2s", &s) == 0 && s == 2.0);
    CHECK(wi_duration_parse("1.5", &s) == 0 && s == 1.5);
    CHECK(wi_duration_parse("5m", &s) == 0 && s == 300.0);
    CHECK(wi_duration_parse("1h", &s) == 0 && s == 3600.0);
    CHECK(wi_duration_parse("", &s) < 0);
    CHECK(wi_duration_parse("-1s", &s) < 0);
    CHECK(wi_duration_parse("3 s", &s) < 0);
    CHECK(wi_duration_parse("30d", &s) == 0 && s == 30 * 86400.0);
    CHECK(wi_duration_parse("10w", &s) < 0);
    CHECK(wi_duration_parse("nan", &s) < 0);
    CHECK(wi_duration_parse("inf", &s) < 0);

    s = 7.0;
    CHECK(wi_duration_parse("12x", &s) < 0 && s == 7.0); /* a refusal leaves *seconds as it was */
    DONE("test_duration");
}
