/* prune.h - retention: empties done events received before a cut-off (their keys are kept
 * --remember-pruned longer, then deleted), and deletes delivered outbox effects processed
 * before it, in small batches (`prune`, and `run --retain` through retention.c). */
#ifndef WI_PRUNE_H
#define WI_PRUNE_H

#include "pg/pgw.h"
#include "wi_err.h"

/* The shortest --older-than / --retain accepted: 3 days, Stripe's retry window (others:
 * 24-72 h). A shorter retention would forget events providers still redeliver, which would
 * then be inserted and processed again. */
#define WI_PRUNE_MIN_AGE (3 * 86400.0)

/* The batched statements, prepared by wi_prune_prepare(): wi_prune_stmt deletes (schemas
 * before v8), wi_prune_keep_stmt empties, wi_forget_stmt deletes emptied rows; the _markers
 * ones (v13 on) also delete those events' SQL once-markers. */
extern const struct wi_pg_stmt wi_prune_stmt;
extern const struct wi_pg_stmt wi_prune_keep_stmt;
extern const struct wi_pg_stmt wi_forget_stmt;
extern const struct wi_pg_stmt wi_prune_keep_markers_stmt;
extern const struct wi_pg_stmt wi_forget_markers_stmt;
extern const struct wi_pg_stmt wi_prune_effects_stmt;

/* From this schema version on (db/008) a pruned event keeps its key: its row is emptied
 * (payload, raw_body, request_headers, attempt_log, outcome, last_error; pruned_at set) and
 * deleted only --remember-pruned later, so a redelivery or a replayed capture of it is still
 * a duplicate instead of a new event. */
#define WI_PRUNE_KEYS_SCHEMA 8

/* Effects are pruned on schemas from this version on (webhook_inbox_outbox_delivered_idx). */
#define WI_PRUNE_EFFECTS_SCHEMA 6

/* From this version on (db/013) the SQL route's once-markers carry their event's key and go
 * with the event when it is emptied or deleted. */
#define WI_PRUNE_MARKERS_SCHEMA 13

/* Prepares on pg the statements the steps below use for a database at schema version.
 * Returns 0, or -1 with *err. */
int wi_prune_prepare(struct wi_pg *pg, int version, struct wi_err *err);

/* One batch on an open connection (wi_prune_prepare for version done, outside a
 * transaction: the batch commits on its own): empties (version >= 8) or deletes at most
 * limit status = 'done' rows received more than older_than seconds ago (only in scope unless
 * NULL), skipping rows locked by others, with their once-markers (version >= 13). Never
 * touches pending or quarantined rows. Returns the number emptied or deleted, or -1 with *err. */
long wi_prune_step(struct wi_pg *pg, int version, double older_than, const char *scope, int limit,
                   struct wi_err *err);

/* One batch (version >= 8, prepared): deletes at most limit emptied rows whose pruned_at is
 * more than remember seconds ago (>= 0; only in scope unless NULL), with their once-markers
 * (version >= 13). From then on a delivery of that key is a new event. Returns the number
 * deleted, or -1 with *err. */
long wi_forget_step(struct wi_pg *pg, int version, double remember, const char *scope, int limit, struct wi_err *err);

/* The same for the outbox (wi_prune_effects_stmt prepared): deletes at most limit
 * status = 'delivered' effects whose processed_at is more than older_than seconds ago (only
 * those emitted by scope's events unless NULL). Never touches pending or quarantined
 * effects. Once deleted, an operation id emitted again is a new effect, delivered again.
 * Returns the number deleted, or -1 with *err. */
long wi_prune_effects_step(struct wi_pg *pg, double older_than, const char *scope, int limit, struct wi_err *err);

/* `prune`: connects to conninfo and runs batches of 5000 until none is left, so no
 * transaction holds many row locks: events (emptied from v8 on, then emptied rows older than
 * remember seconds deleted, counted in *forgotten; deleted before v8), then (schema v6 on)
 * delivered effects, whose count goes to *effects. Then (schema v8 on) records one
 * webhook_inbox_actions row (action prune, by actor: see audit.h), also after a failure that
 * came once something was done; *audited says whether the row was written. Refuses
 * older_than < WI_PRUNE_MIN_AGE. Returns the number of events pruned, or -1 with *err
 * (*effects and *forgotten then count what was done before). */
long wi_prune(const char *conninfo, double older_than, double remember, const char *scope, const char *actor,
              long *effects, long *forgotten, int *audited, struct wi_err *err);

#endif
