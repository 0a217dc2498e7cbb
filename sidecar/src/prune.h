/* prune.h - retention: deletes done events received before a cut-off, and delivered outbox
 * effects processed before it, in small batches (`prune`, and `run --retain` through
 * retention.c). */
#ifndef WI_PRUNE_H
#define WI_PRUNE_H

#include "pgw.h"
#include "wi_err.h"

/* The shortest --older-than / --retain accepted: 3 days, Stripe's retry window (others:
 * 24-72 h). A shorter retention would forget events providers still redeliver, which would
 * then be inserted and processed again. */
#define WI_PRUNE_MIN_AGE (3 * 86400.0)

/* The batched deletes, prepared by whoever calls wi_prune_step() / wi_prune_effects_step(). */
extern const struct wi_pg_stmt wi_prune_stmt;
extern const struct wi_pg_stmt wi_prune_effects_stmt;

/* Effects are pruned on schemas from this version on (webhook_inbox_outbox_delivered_idx). */
#define WI_PRUNE_EFFECTS_SCHEMA 6

/* One batch on an open connection (wi_prune_stmt prepared, outside a transaction: the
 * batch commits on its own): deletes at most limit status = 'done' rows received more than
 * older_than seconds ago (only in scope unless NULL), skipping rows locked by others. Never
 * touches pending or quarantined rows. Returns the number deleted, or -1 with *err. */
long wi_prune_step(struct wi_pg *pg, double older_than, const char *scope, int limit, struct wi_err *err);

/* The same for the outbox (wi_prune_effects_stmt prepared): deletes at most limit
 * status = 'delivered' effects whose processed_at is more than older_than seconds ago (only
 * those emitted by scope's events unless NULL). Never touches pending or quarantined
 * effects. Once deleted, an operation id emitted again is a new effect, delivered again.
 * Returns the number deleted, or -1 with *err. */
long wi_prune_effects_step(struct wi_pg *pg, double older_than, const char *scope, int limit, struct wi_err *err);

/* `prune`: connects to conninfo and runs batches of 5000 until none is left, so no
 * transaction holds many row locks: events, then (schema v6 on) delivered effects, whose
 * count goes to *effects. Then (schema v7 on) records one webhook_inbox_actions row
 * (action prune, by actor: see audit.h), also after a failure that came once something was
 * deleted; *audited says whether the row was written. Refuses older_than <
 * WI_PRUNE_MIN_AGE. Returns the number of events deleted, or -1 with *err (*effects then
 * counts what was deleted before). */
long wi_prune(const char *conninfo, double older_than, const char *scope, const char *actor, long *effects,
              int *audited, struct wi_err *err);

#endif
