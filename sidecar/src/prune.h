/* prune.h - `prune`: retention, deletes done events received before a cut-off. */
#ifndef WI_PRUNE_H
#define WI_PRUNE_H

#include "wi_err.h"

/* The shortest --older-than accepted: 3 days, Stripe's retry window (others: 24-72 h).
 * A shorter retention would forget events providers still redeliver, which would then be
 * inserted and processed again. */
#define WI_PRUNE_MIN_AGE (3 * 86400.0)

/* Deletes status = 'done' rows received more than older_than seconds ago (optionally only
 * in scope; NULL = all), in batches of 5000 so no transaction holds many row locks. Never
 * touches pending or quarantined rows. Returns the number deleted, or -1 with *err. */
long wi_prune(const char *conninfo, double older_than, const char *scope, struct wi_err *err);

#endif
