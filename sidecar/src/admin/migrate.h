/* migrate.h - applying the schema embedded at build time (db/NNN_*.sql, db/functions/), under an advisory
 * lock so that several sidecars starting together apply it one after another. */
#ifndef WI_MIGRATE_H
#define WI_MIGRATE_H

#include <stdio.h>
#include "wi_err.h"

/* One embedded migration file (generated into migrations.c by the build). */
struct wi_migration {
    const char *name; /* "001_inbox.sql" */
    const char *sql;
};
extern const struct wi_migration wi_migrations[];
extern const int wi_migrations_count;
/* db/functions/ (function_files.c): every function's one definition, repeatable. */
extern const struct wi_migration wi_function_files[];
extern const int wi_function_files_count;
/* db/citus/NNN_*.sql (citus_migrations.c): the Citus layout, applied after the chain. */
extern const struct wi_migration wi_citus_migrations[];
extern const int wi_citus_migrations_count;

/* Connects and, holding pg_advisory_lock(WI_MIGRATE_LOCK_KEY), applies the embedded
 * numbered files newer than the database's schema version (every one when it says none), in
 * order, then every function file (db/functions/), each in its own transaction, and writes
 * one line to out saying the schema version (never the SQL). On a current database it
 * changes no table and takes no lock on the inbox: it replaces the functions (CREATE OR
 * REPLACE), and puts back one dropped under it (with a warning naming it); on Citus it
 * leaves a current database's functions alone unless one is missing. Idempotent. A database
 * whose schema is newer than WI_SCHEMA_VERSION is left as it is (one line says so; returns
 * 0). citus: also apply the Citus layout (db/citus/) after them; a database that has it
 * already gets it again whatever citus says (the files run with citus.enable_unsafe_triggers
 * there). Returns 0 or -1 with *err (the citus extension missing, with citus, is an error). */
int wi_migrate(const char *conninfo, int citus, FILE *out, struct wi_err *err);

#define WI_MIGRATE_LOCK_KEY "7310582026110401" /* arbitrary, constant: "webhook_inbox migrate" */

#endif
