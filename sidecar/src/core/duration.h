/* duration.h - durations as the configuration, --destination options and --reconcile
 * intervals write them: "250ms", "2s", "1.5" (seconds), "5m", "1h", "30d". Pure C. */
#ifndef WI_DURATION_H
#define WI_DURATION_H

/* Parses s ("250ms", "2s", "1.5", "5m" or "5min", "1h", "30d"). Returns 0 and sets *seconds,
 * or -1 (*seconds untouched) on syntax errors, NaN, infinity and negative values. */
int wi_duration_parse(const char *s, double *seconds);

#endif
