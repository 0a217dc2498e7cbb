/* audit.c - the actor of an admin command and the audit row of a prune (webhook_inbox_actions). */
#define _POSIX_C_SOURCE 200809L
#include "admin/audit.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const struct wi_pg_stmt wi_audit_prune_stmt = {
    "wi_audit_prune",
    "INSERT INTO webhook_inbox_actions (actor, action, filter, count)"
    " VALUES ($1, 'prune', jsonb_strip_nulls(jsonb_build_object('older_than_s', $2::double precision,"
    "  'scope', $3::text, 'effects_deleted', $4::bigint)), $5::bigint)"};

void wi_audit_actor(const char *flag, char *buf, size_t n)
{
    char host[256];
    const char *user = getenv("USER");

    if (flag && *flag) {
        snprintf(buf, n, "%s", flag);
        return;
    }
    if (gethostname(host, sizeof host) != 0 || !*host)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0'; /* gethostname need not terminate a name it cut */
    snprintf(buf, n, "%s@%s", user && *user ? user : "unknown", host);
}

int wi_audit_prune(struct wi_pg *pg, const char *actor, double older_than, const char *scope, long events,
                   long effects, struct wi_err *err)
{
    char age[32], nev[24], nef[24];
    const char *params[5] = {actor, age, scope, nef, nev};

    snprintf(age, sizeof age, "%.3f", older_than);
    snprintf(nev, sizeof nev, "%ld", events);
    snprintf(nef, sizeof nef, "%ld", effects);
    return wi_pg_cmd(pg, wi_audit_prune_stmt.name, 5, params, err);
}
