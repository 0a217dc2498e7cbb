/* duration.c - the duration syntax of the configuration, --destination options and
 * --reconcile intervals: a non-negative number and an optional unit. */
#include "core/duration.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int wi_duration_parse(const char *s, double *seconds)
{
    char *end;
    double v, mult = 1.0;

    if (!s || !*s)
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        return -1;
    if (strcmp(end, "") == 0 || strcmp(end, "s") == 0)
        mult = 1.0;
    else if (strcmp(end, "ms") == 0)
        mult = 0.001;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        mult = 60.0;
    else if (strcmp(end, "h") == 0)
        mult = 3600.0;
    else if (strcmp(end, "d") == 0)
        mult = 86400.0;
    else
        return -1;
    *seconds = v * mult;
    return 0;
}
