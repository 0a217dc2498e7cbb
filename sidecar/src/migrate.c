/* migrate.c - `migrate`: the embedded db/NNN_*.sql files, in order, one transaction each,
 * serialized across processes by a session advisory lock; never over a newer schema. */
#define _POSIX_C_SOURCE 200809L
#include "migrate.h"

#include "log.h"
#include "pgw.h"
#include "schema.h"

static const struct wi_pg_stmt stmts[] = {
    {"wi_lock", "SELECT pg_advisory_lock($1::bigint)"},
    {"wi_unlock", "SELECT pg_advisory_unlock($1::bigint)"},
    {"wi_begin", "BEGIN"},
    {"wi_commit", "COMMIT"},
    {"wi_rollback", "ROLLBACK"},
    {"wi_quiet", "SET client_min_messages = warning"},
};

int wi_migrate(const char *conninfo, FILE *out, struct wi_err *err)
{
    const char *key[1] = {WI_MIGRATE_LOCK_KEY};
    struct wi_pg *pg = wi_pg_connect(conninfo, stmts, (int)(sizeof stmts / sizeof stmts[0]), err);
    struct wi_err ignore;
    struct wi_schema found;
    int i, rc = -1;

    if (!pg)
        return -1;
    if (wi_pg_prepare(pg, wi_schema_stmts, wi_schema_stmts_count, err) < 0 ||
        wi_pg_cmd(pg, "wi_quiet", 0, NULL, err) < 0 || wi_pg_cmd(pg, "wi_lock", 1, key, err) < 0)
        goto done;
    /* Under the lock: a newer release may have migrated already. Re-running our older files
     * would put older function bodies back under its version number. */
    if (wi_schema_check(pg, &found, err) < 0)
        goto unlock;
    if (found.version > WI_SCHEMA_VERSION) {
        fprintf(out, "inbox schema is v%d, newer than this sidecar's v%d: left as it is\n", found.version,
                WI_SCHEMA_VERSION);
        rc = 0;
        goto unlock;
    }
    for (i = 0; i < wi_migrations_count; i++) {
        /* Static file text compiled into the binary: no values, so no parameters needed. */
        if (wi_pg_cmd(pg, "wi_begin", 0, NULL, err) < 0)
            goto unlock;
        if (wi_pg_script(pg, wi_migrations[i].sql, err) < 0) {
            log_warnx("migration_failed", "file=%s error=%s", wi_migrations[i].name, WI_LOG_Q(err->msg));
            (void)wi_pg_cmd(pg, "wi_rollback", 0, NULL, &ignore);
            goto unlock;
        }
        if (wi_pg_cmd(pg, "wi_commit", 0, NULL, err) < 0)
            goto unlock;
        log_debug("migrated", "file=%s", wi_migrations[i].name);
    }
    if (wi_schema_check(pg, &found, err) < 0)
        goto unlock;
    if (found.version != WI_SCHEMA_VERSION) { /* the embedded files and WI_SCHEMA_VERSION disagree */
        wi_err_set(err, WI_ERR_ARG, "after migrating, the schema says v%d, not v%d", found.version, WI_SCHEMA_VERSION);
        goto unlock;
    }
    fprintf(out, "inbox schema v%d: applied %s .. %s\n", found.version, wi_migrations[0].name,
            wi_migrations[wi_migrations_count - 1].name);
    rc = 0;
unlock:
    if (wi_pg_ok(pg))
        (void)wi_pg_cmd(pg, "wi_unlock", 1, key, &ignore);
done:
    wi_pg_free(pg);
    return rc;
}
