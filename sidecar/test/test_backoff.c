/* test_backoff.c - wi_retry_delay: doubling, equal jitter bounds, cap, overflow; uniform(). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>

#include "minitest.h"
#include "retry.h"

int main(void)
{
    uint64_t st = 42;
    int i, k;

    /* u = 0 gives the lower bound d/2, u -> 1 the upper bound d. */
    CHECK(fabs(wi_retry_delay(0, 1.0, 3600, 0.0) - 0.5) < 1e-9);
    CHECK(fabs(wi_retry_delay(0, 1.0, 3600, 0.999999) - 1.0) < 1e-5);
    CHECK(fabs(wi_retry_delay(3, 1.0, 3600, 0.0) - 4.0) < 1e-9);
    CHECK(fabs(wi_retry_delay(3, 0.25, 3600, 0.5) - 1.5) < 1e-9);
    /* The cap bounds every delay, also with jitter, and huge attempt counts do not overflow. */
    CHECK(wi_retry_delay(20, 1.0, 60, 0.99) <= 60.0);
    CHECK(wi_retry_delay(20, 1.0, 60, 0.0) >= 30.0);
    CHECK(wi_retry_delay(1000000, 1.0, 60, 0.5) <= 60.0);
    CHECK(isfinite(wi_retry_delay(1023, 1e300, 1e308, 0.5)));
    CHECK(wi_retry_delay(-5, 1.0, 60, 0.0) == 0.5);
    /* Out-of-range u is clamped. */
    CHECK(wi_retry_delay(0, 1.0, 60, 7.0) <= 1.0);
    CHECK(wi_retry_delay(0, 1.0, 60, -1.0) == 0.5);
    /* Monotonic bounds: each attempt's range starts where the previous one's ended, until the cap. */
    for (i = 0; i < 12; i++)
        CHECK(wi_retry_delay(i + 1, 0.1, 1e9, 0.0) >= wi_retry_delay(i, 0.1, 1e9, 0.999999) - 1e-9);

    /* uniform() stays in [0, 1) and is not constant; a zero seed still works. */
    for (k = 0; k < 100000; k++) {
        double u = wi_retry_uniform(&st);
        if (u < 0 || u >= 1) {
            CHECK(0);
            break;
        }
    }
    {
        uint64_t z = 0;
        double a = wi_retry_uniform(&z), b = wi_retry_uniform(&z);
        CHECK(a != b);
        CHECK(z != 0);
    }
    DONE("test_backoff");
}
