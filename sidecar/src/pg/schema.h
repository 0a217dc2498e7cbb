/* schema.h - the inbox schema version this sidecar was built for, and the check that makes
 * `run` and `stats` refuse a database whose schema is missing, older, or too new for it. */
#ifndef WI_SCHEMA_H
#define WI_SCHEMA_H

#include "pg/pgw.h"

/* The schema version this binary speaks: db/NNN files up to this number and db/functions/,
 * embedded for `migrate`; equal to what db/functions/schema_version.sql makes
 * webhook_inbox_schema_version() return (spec/webhook_inbox/schema_layout_spec.rb checks).
 * Required even with no --destination or --retain configured: one version for `migrate` and
 * for the check (the deploy runs the migration first, as for every upgrade), and a database
 * at v32 still accepts v4 sidecars (min_worker stays 4). */
#define WI_SCHEMA_VERSION 32

/* Outcomes of wi_schema_check(). */
enum {
    WI_SCHEMA_OK = 0,      /* version >= ours and min_worker <= ours: work */
    WI_SCHEMA_STALE = 1,   /* no version function, or a version older than ours: migrate */
    WI_SCHEMA_TOO_NEW = 2  /* min_worker above ours: this binary must be upgraded */
};

/* What the database says; -1 where it says nothing (no version function). */
struct wi_schema {
    int version;
    int min_worker;
};

/* Statements to prepare at connect (they name no inbox object, so they prepare on an empty
 * database); wi_schema_check() prepares the version query itself once the functions exist. */
extern const struct wi_pg_stmt wi_schema_stmts[];
extern const int wi_schema_stmts_count;

/* Reads the schema version of pg's database into *found and compares it with
 * WI_SCHEMA_VERSION. Returns WI_SCHEMA_*, or -1 with *err when a query failed. */
int wi_schema_check(struct wi_pg *pg, struct wi_schema *found, struct wi_err *err);

/* The one-line reason and fix for a WI_SCHEMA_STALE or WI_SCHEMA_TOO_NEW outcome (static
 * text; "" for WI_SCHEMA_OK). */
const char *wi_schema_problem(int outcome);

/* Error codes of wi_schema_require() (the sidecar's 300-399 range). */
enum { WI_ERR_SCHEMA_STALE = 310, WI_ERR_SCHEMA_TOO_NEW = 311 };

/* For one-shot commands (`stats`): returns 0 when the schema is usable, else -1 with *err:
 * a failed query (WI_ERR_PG), or WI_ERR_SCHEMA_* with what the database holds in err->msg;
 * print wi_schema_err_problem(err) beside it. */
int wi_schema_require(struct wi_pg *pg, struct wi_err *err);

/* The reason and fix for a WI_ERR_SCHEMA_* error, else NULL. */
const char *wi_schema_err_problem(const struct wi_err *err);

#endif
