/* migrate.c - `migrate`: the embedded db/NNN_*.sql files newer than the database's version,
 * in order, then every file of db/functions/ (repeatable), one transaction each,
 * serialized across processes by a session advisory lock; never over a newer schema; then,
 * on a Citus cluster (`--citus`, or a layout already there), db/citus/NNN_*.sql. */
#define _POSIX_C_SOURCE 200809L
#include "admin/migrate.h"

#include <stdlib.h>
#include <string.h>

#include "citus/citus.h"
#include "core/log.h"
#include "pg/pgarray.h"
#include "pg/pgw.h"
#include "pg/schema.h"

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
    /* The names of $1 no function visible on the search path has (any arguments). */
    {"wi_missing_functions", "SELECT n FROM unnest($1::text[]) n WHERE NOT EXISTS (SELECT 1 FROM pg_proc p"
                             " WHERE p.proname = n AND pg_function_is_visible(p.oid)) ORDER BY n"},
};

/* A PostgreSQL name is at most NAMEDATALEN - 1 (63) bytes; db/functions/ defines ~80 functions. */
#define FN_MAX 64
#define FNS_MAX 512

/* The functions files[0..n) leave defined: the name after each "CREATE OR REPLACE FUNCTION "
 * that starts a line, less those a later "DROP FUNCTION IF EXISTS " names, added to *a. Returns 0, or -1 when out of memory or past FNS_MAX names. */
static int chain_functions(const struct wi_migration *files, int n, struct wi_pgarray *a)
{
    static const char create[] = "CREATE OR REPLACE FUNCTION ", drop[] = "DROP FUNCTION IF EXISTS ";
    char(*names)[FN_MAX] = calloc(FNS_MAX, FN_MAX);
    int count = 0, i, k, rc = -1;
    const char *p;

    if (!names)
        return -1;
    for (i = 0; i < n; i++) {
        for (p = files[i].sql; *p; p++) {
            int is_create = (p == files[i].sql || p[-1] == '\n') && !strncmp(p, create, sizeof create - 1);
            int is_drop = !is_create && (p == files[i].sql || p[-1] == '\n') && !strncmp(p, drop, sizeof drop - 1);
            const char *name;
            size_t len;

            if (!is_create && !is_drop)
                continue;
            name = p + (is_create ? sizeof create : sizeof drop) - 1;
            len = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_");
            p = name + len - 1;
            if (len == 0 || len >= FN_MAX)
                continue;
            for (k = 0; k < count && !(strlen(names[k]) == len && !memcmp(names[k], name, len)); k++)
                ;
            if (is_drop && k < count) {
                memcpy(names[k], names[--count], FN_MAX);
            } else if (is_create && k == count) {
                if (count == FNS_MAX)
                    goto done;
                memcpy(names[count], name, len);
                names[count++][len] = '\0';
            }
        }
    }
    for (k = 0; k < count; k++)
        if (wi_pgarray_add_str(a, names[k]) < 0)
            goto done;
    rc = 0;
done:
    free(names);
    return rc;
}

/* The first function (by name) db/functions/ defines that the database lacks (dropped by hand, or by a restore that left them out), copied into name[FN_MAX];
 * "" when none is missing. Returns the number missing, or -1 with *err. */
static int missing_functions(struct wi_pg *pg, char *name, struct wi_err *err)
{
    struct wi_pgarray a = {0};
    const char *params[1];
    PGresult *res;
    int n = -1;

    name[0] = '\0';
    if (chain_functions(wi_function_files, wi_function_files_count, &a) < 0 || !(params[0] = wi_pgarray_end(&a))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory listing the schema's functions");
        goto done;
    }
    if (!(res = wi_pg_exec(pg, "wi_missing_functions", 1, params, PGRES_TUPLES_OK, err)))
        goto done;
    if ((n = PQntuples(res)) > 0)
        snprintf(name, FN_MAX, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
done:
    wi_pgarray_free(&a);
    return n;
}

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
    char fn[FN_MAX];
    int rc = -1, layout, installed, from, missing, functions, before;

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
    /* Only the numbered files newer than the database. Applying the older ones again took
     * strong locks on the inbox (ALTER TABLE: ACCESS EXCLUSIVE) even when nothing changed,
     * so every sidecar start queued the receipts behind any open transaction. A database that
     * says no version (an old dump) gets every file. The function files replace functions
     * only (no lock on a table): every migrate applies them, which also puts back a function
     * dropped under a current version; on Citus (where each replace goes to every node and
     * the layout then re-labels them) only when the version is older or one is missing. */
    before = found.version;
    from = first_newer(found.version);
    if ((missing = missing_functions(pg, fn, err)) < 0)
        goto unlock;
    if (missing > 0 && found.version >= WI_SCHEMA_VERSION)
        log_warnx("schema_function_missing", "function=%s missing=%d schema=%d note=\"re-applying db/functions/\"",
                  fn, missing, found.version);
    functions = !citus || from < wi_migrations_count || found.version < WI_SCHEMA_VERSION || missing > 0;
    if (apply(pg, wi_migrations + from, wi_migrations_count - from, "", citus, err) < 0)
        goto unlock;
    if (functions && apply(pg, wi_function_files, wi_function_files_count, "functions/", citus, err) < 0)
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
        fprintf(out, "inbox schema v%d: applied %s .. %s and db/functions/%s\n", found.version, wi_migrations[from].name,
                wi_migrations[wi_migrations_count - 1].name,
                citus ? " and the Citus layout (db/citus/; wake-ups by polling: --poll-interval)" : "");
    else if (before < WI_SCHEMA_VERSION)
        fprintf(out, "inbox schema v%d: applied db/functions/%s\n", found.version,
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
