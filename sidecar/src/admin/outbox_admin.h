/* outbox_admin.h - the outbox seen by an operator: `stats` (effects per destination, from
 * webhook_inbox_outbox_stats()) and `requeue --effects` (quarantined effects back to
 * pending). Short-lived commands; the deliverer itself is outbox.h. */
#ifndef WI_OUTBOX_ADMIN_H
#define WI_OUTBOX_ADMIN_H

#include <stdio.h>
#include "pg/pgw.h"

/* Prints the outbox per destination (webhook_inbox_outbox_stats(): pending, retrying,
 * leased, oldest_pending_age_s, quarantined, delivered_last_hour) on out: text lines, or,
 * with json, `"outbox":{...}` to be placed inside the stats object (a leading comma
 * included). Returns 0, or -1 with *err. */
int wi_outbox_stats(struct wi_pg *pg, int json, FILE *out, struct wi_err *err);

/* quarantined effects -> pending, attempts reset (webhook_inbox_outbox_requeue()), by
 * operation id and/or destination (NULL = any); at least one of them, or all = 1 (every
 * quarantined effect, of every destination: then destination must be NULL). Returns how
 * many, or -1 with *err (WI_ERR_ARG for missing or contradictory filters and a destination
 * name that is not [a-z][a-z0-9_]{0,62}). */
long wi_outbox_requeue(const char *conninfo, const char *operation_id, const char *destination, int all,
                       struct wi_err *err);

#endif
