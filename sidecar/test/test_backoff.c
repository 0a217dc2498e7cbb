/* test_backoff.c - wi_retry_uniform(), the jitter source of the reconnect backoff: in [0, 1),
 * not constant, a zero seed still works; wi_retry_backoff(): each nap in [delay/2, delay],
 * the delay doubled from WI_RECONNECT_MIN_S up to WI_RECONNECT_MAX_S. (The retry backoff of events is computed by
 * webhook_inbox_retry_delay_ms() in SQL; spec/sidecar/attempts_spec.rb checks its bounds.) */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>

#include "claim/retry.h"
#include "minitest.h"

int main(void)
{
    uint64_t st = 42;
    double sum = 0;
    int k;

    for (k = 0; k < 100000; k++) {
        double u = wi_retry_uniform(&st);
        if (u < 0 || u >= 1) {
            CHECK(0);
            break;
        }
        sum += u;
    }
    CHECK(sum / 100000 > 0.49 && sum / 100000 < 0.51); /* roughly uniform */
    {
        uint64_t z = 0;
        double a = wi_retry_uniform(&z), b = wi_retry_uniform(&z);
        CHECK(a != b);
        CHECK(z != 0);
    }
    {
        uint64_t st2 = 7;
        double d = WI_RECONNECT_MIN_S, before, nap;
        int ok = 1;
        for (k = 0; k < 12; k++) {
            before = d;
            nap = wi_retry_backoff(&d, &st2);
            ok &= nap >= before / 2 && nap <= before;
            ok &= d == (before * 2 > WI_RECONNECT_MAX_S ? WI_RECONNECT_MAX_S : before * 2);
        }
        CHECK(ok);
        CHECK(d == WI_RECONNECT_MAX_S);
    }
    DONE("test_backoff");
}
