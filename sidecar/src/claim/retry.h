/* retry.h - charging a transient failure through webhook_inbox_charge_failure() (attempts,
 * backoff, last_error, quarantine at the maximum; the backoff is computed server-side by
 * webhook_inbox_retry_delay_ms()), and the jittered, doubling reconnect backoff. */
#ifndef WI_RETRY_H
#define WI_RETRY_H

#include <stdint.h>
#include "claim/claim.h"
#include "claim/dispatch.h"
#include "pg/pgw.h"

extern const struct wi_pg_stmt wi_retry_stmt;

/* A uniform number in [0, 1) from a per-caller xorshift state (seed it non-zero). */
double wi_retry_uniform(uint64_t *state);

/* Reconnect delays of the sidecar's connections: from WI_RECONNECT_MIN_S, doubled per
 * consecutive failure up to WI_RECONNECT_MAX_S; each nap jittered to [delay/2, delay]. */
#define WI_RECONNECT_MIN_S 0.2
#define WI_RECONNECT_MAX_S 5.0

/* Returns the nap before the next attempt (*delay jittered) and doubles *delay (capped). */
double wi_retry_backoff(double *delay, uint64_t *state);

/* Charges e one transient failure with `error`, only if its row is still pending with
 * e->attempts (nobody handled or charged it meanwhile), in the caller's transaction (or
 * autocommit when none is open). Sets e->result ("retry", "quarantined", or "" when the row
 * had moved), e->charged, e->retry_in_ms, and e->detail to a copy of error. Returns 0 or -1
 * with *err. */
int wi_retry_charge(struct wi_pg *pg, struct wi_event *e, const char *error, const struct wi_policy *p,
                    struct wi_err *err);

#endif
