/* clock.h - the monotonic clock in seconds, for deadlines, naps and rate limits. */
#ifndef WI_CLOCK_H
#define WI_CLOCK_H

#include <time.h>

static inline double wi_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
