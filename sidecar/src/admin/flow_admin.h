/* flow_admin.h - `pause` and `resume`: hold a route (event type pattern), a scope or a
 * destination, and let it go again, optionally at a rate (events/s over all sidecars),
 * through webhook_inbox_pause() / webhook_inbox_resume() (db/015), audited. */
#ifndef WI_FLOW_ADMIN_H
#define WI_FLOW_ADMIN_H

#include <stdio.h>

#include "pg/pgw.h"
#include "wi_err.h"

/* What an operator holds: kind "route", "scope" or "destination", and its name. */
struct wi_flow_target {
    const char *kind;
    const char *target;
};

/* Picks the one target of the flags given (type: a route pattern, scope, destination); NULL
 * for unset. Returns 0, or -1 with *err (WI_ERR_ARG) when none or more than one is set. */
int wi_flow_target(const char *type, const char *scope, const char *destination, struct wi_flow_target *t,
                   struct wi_err *err);

/* Pauses t, recorded with actor. Returns the pending events (effects) it holds now, or -1
 * with *err (WI_ERR_ARG for a target the database refuses). */
long wi_flow_pause(const char *conninfo, const struct wi_flow_target *t, const char *actor, struct wi_err *err);

/* Resumes t at rate events/s (a decimal number > 0; NULL: unlimited), recorded with actor.
 * Returns the events made due (a destination: its due effects), or -1 with *err. */
long wi_flow_resume(const char *conninfo, const struct wi_flow_target *t, const char *rate, const char *actor,
                    struct wi_err *err);

/* Prints the pause and rate rules (webhook_inbox_flow_stats(): kind, target, paused, rate,
 * pending) on out: text lines, or with json `,"flow":[...]` to be placed inside the stats
 * object. Returns 0, or -1 with *err. */
int wi_flow_stats(struct wi_pg *pg, int json, FILE *out, struct wi_err *err);

#endif
