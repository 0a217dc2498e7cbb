/* outbox_admin.h - the outbox seen by an operator: `stats` (effects per destination, from
 * webhook_inbox_outbox_stats()) and `requeue --effects` (quarantined effects back to
 * pending). Short-lived commands; the deliverer itself is outbox.h. */
#ifndef WI_OUTBOX_ADMIN_H
#define WI_OUTBOX_ADMIN_H

#include <stdio.h>
#include "pgw.h"

/* Prints the outbox per destination (webhook_inbox_outbox_stats()) on out: text lines, or,
 * with json, `"outbox":{...}` to be placed inside the stats object (a leading comma
 * included). Returns 0, or -1 with *err. */
int wi_outbox_stats(struct wi_pg *pg, int json, FILE *out, struct wi_err *err);

/* quarantined effects -> pending, attempts reset, by operation id (NULL with all = every
 * one). Returns how many, or -1 with *err. */
long wi_outbox_requeue(const char *conninfo, const char *operation_id, int all, struct wi_err *err);

#endif
