/* retry.h - transient-failure bookkeeping: exponential backoff with jitter and a cap, and
 * the separate transaction that records attempts, next_attempt_at and last_error. */
#ifndef WI_RETRY_H
#define WI_RETRY_H

#include <stdint.h>
#include "pgw.h"

extern const struct wi_pg_stmt wi_retry_stmt;

/* Delay in seconds before the next attempt after `failures` earlier failures (0 for the
 * first): d = min(cap, base * 2^failures); returns d/2 + u * d/2 ("equal jitter"), so the
 * result is in [d/2, d] and never above cap. u is a uniform number in [0, 1). */
double wi_retry_delay(int failures, double base, double cap, double u);

/* A uniform number in [0, 1) from a per-caller xorshift state (seed it non-zero). */
double wi_retry_uniform(uint64_t *state);

/* Records a transient failure in its own transaction (autocommit), only if the row is
 * still pending with seen_attempts. Writes the new status ("pending", "quarantined", or
 * "" when the row moved meanwhile) into status[16]. Returns 0 or -1 with *err. */
int wi_retry_record(struct wi_pg *pg, const char *scope, const char *event_id, int seen_attempts, long long delay_ms,
                    const char *error, int max_attempts, char status[16], struct wi_err *err);

#endif
