/* audit.h - who runs an admin command (--actor, else $USER@host), and the
 * webhook_inbox_actions row of a `prune` (requeue and replay are recorded by
 * webhook_inbox_requeue() itself, as the dashboard's are). */
#ifndef WI_AUDIT_H
#define WI_AUDIT_H

#include <stddef.h>

#include "pg/pgw.h"
#include "wi_err.h"

/* The schema version from which webhook_inbox_actions accepts 'prune' (db/008). */
#define WI_AUDIT_PRUNE_SCHEMA 8

/* The record statement, prepared by whoever calls wi_audit_prune(). */
extern const struct wi_pg_stmt wi_audit_prune_stmt;

/* Writes the actor into buf (size n, always NUL-terminated, cut to fit): flag when it is set
 * and not empty, else "$USER@hostname" ("unknown" for either part that is not known). */
void wi_audit_actor(const char *flag, char *buf, size_t n);

/* Inserts one 'prune' row (filter {"older_than_s", "scope" when set, "effects_deleted"},
 * count = events deleted). Returns 0, or -1 with *err. */
int wi_audit_prune(struct wi_pg *pg, const char *actor, double older_than, const char *scope, long events,
                   long effects, struct wi_err *err);

#endif
