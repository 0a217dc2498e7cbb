/* migrate.c - `migrate`: the embedded db/NNN_*.sql files newer than the database's version,
 * in order, one transaction each, serialized across processes by a session advisory lock;
 * never over a newer schema; then,
 * on a Citus cluster (`--citus`, or a layout already there), db/citus/NNN_*.sql. */
#define _POSIX_C_SOURCE 200809L
#include "migrate.h"

#include <stdlib.h>

#include "citus.h"
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
    {"wi_citus_triggers", "SET citus.enable_unsafe_triggers = on"},
    /* Before the layout, Citus warns about every function over a table still local. */
    {"wi_citus_quiet", "SET client_min_messages = error"},
    /* DDL on a distributed table and then CREATE FUNCTION in one transaction: Citus needs
     * the shards' DDL on the one connection per node that the function goes through. */
    {"wi_citus_sequential", "SET citus.multi_shard_modify_mode = sequential"},
};

/* Applies files[0..n) in order, one transaction each (on Citus one statement at a time:
 * citus.h); dir prefixes their names in logs.
 * Returns 0 or -1 with *err (the failing file rolled back). */
static int apply(struct wi_pg *pg, const struct wi_migration *files, int n, const char *dir, int citus,
                 struct wi_err *err)
{
    struct wi_err ignore;
    int i;

    for (i = 0; i < n; i++) {
        /* Static file text compiled into the binary: no values, so no parameters needed. */
        if (wi_pg_cmd(pg, "wi_begin", 0, NULL, err) < 0)
            return -1;
        if ((citus ? wi_citus_script(pg, files[i].sql, err) : wi_pg_script(pg, files[i].sql, err)) < 0) {
            log_warnx("migration_failed", "file=%s%s error=%s", dir, files[i].name, WI_LOG_Q(err->msg));
            (void)wi_pg_cmd(pg, "wi_rollback", 0, NULL, &ignore);
            return -1;
        }
        if (wi_pg_cmd(pg, "wi_commit", 0, NULL, err) < 0)
            return -1;
        log_debug("migrated", "file=%s%s", dir, files[i].name);
    }
    return 0;
}

/* The index of the first embedded file newer than version (file NNN brings the schema to
 * NNN; the files are sorted, numbers may skip one), wi_migrations_count when none is; 0
 * (apply them all) for no version or a file not numbered in increasing order. */
static int first_newer(int version)
{
    int i, prev = 0, from = wi_migrations_count;

    if (version <= 0)
        return 0;
    for (i = 0; i < wi_migrations_count; i++) {
        int num = atoi(wi_migrations[i].name);
        if (num <= prev)
            return 0;
        if (num > version && from == wi_migrations_count)
            from = i;
        prev = num;
    }
    return from;
}

int wi_migrate(const char *conninfo, int citus, FILE *out, struct wi_err *err)
{
    const char *key[1] = {WI_MIGRATE_LOCK_KEY};
    struct wi_pg *pg = wi_pg_connect(conninfo, stmts, (int)(sizeof stmts / sizeof stmts[0]), err);
    struct wi_err ignore;
    struct wi_schema found;
    int rc = -1, layout, installed, from;

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
    if ((layout = wi_citus_layout(pg, err)) < 0)
        goto unlock;
    if (citus && !layout && (installed = wi_citus_installed(pg, err)) != 1) {
        if (installed == 0)
            wi_err_set(err, WI_ERR_ARG, "--citus: the citus extension is not installed in this database "
                                        "(CREATE EXTENSION citus on the coordinator and add the workers first)");
        goto unlock;
    }
    citus = citus || layout;
    if (citus && (wi_pg_cmd(pg, "wi_citus_triggers", 0, NULL, err) < 0 || wi_pg_cmd(pg, "wi_citus_quiet", 0, NULL, err) < 0 ||
                  wi_pg_cmd(pg, "wi_citus_sequential", 0, NULL, err) < 0))
        goto unlock;
    /* Only the files newer than the database. Applying the older ones again took strong
     * locks on the inbox (ALTER TABLE, DROP TRIGGER: ACCESS EXCLUSIVE) even when nothing
     * changed, so every sidecar start queued the receipts behind any open transaction, and it
     * put older function bodies back live until the newer files committed. A database that
     * says no version (functions dropped, an old dump) gets every file. */
    from = first_newer(found.version);
    if (apply(pg, wi_migrations + from, wi_migrations_count - from, "", citus, err) < 0)
        goto unlock;
    if (citus && apply(pg, wi_citus_migrations, wi_citus_migrations_count, "citus/", citus, err) < 0)
        goto unlock;
    if (wi_schema_check(pg, &found, err) < 0)
        goto unlock;
    if (found.version != WI_SCHEMA_VERSION) { /* the embedded files and WI_SCHEMA_VERSION disagree */
        wi_err_set(err, WI_ERR_ARG, "after migrating, the schema says v%d, not v%d", found.version, WI_SCHEMA_VERSION);
        goto unlock;
    }
    if (from < wi_migrations_count)
        fprintf(out, "inbox schema v%d: applied %s .. %s%s\n", found.version, wi_migrations[from].name,
                wi_migrations[wi_migrations_count - 1].name,
                citus ? " and the Citus layout (db/citus/; wake-ups by polling: --poll-interval)" : "");
    else
        fprintf(out, "inbox schema v%d: up to date%s\n", found.version,
                citus ? "; the Citus layout applied (db/citus/; wake-ups by polling: --poll-interval)" : "");
    rc = 0;
unlock:
    if (wi_pg_ok(pg))
        (void)wi_pg_cmd(pg, "wi_unlock", 1, key, &ignore);
done:
    wi_pg_free(pg);
    return rc;
}
