/* prune.c - retention: empty old done events (their keys stay for --remember-pruned, then
 * go, from v13 with their SQL once-markers), delete old delivered outbox effects, in small batches; `prune` records what it did in
 * webhook_inbox_actions (audit.c). */
#define _POSIX_C_SOURCE 200809L
#include "retention/prune.h"

#include <stdio.h>
#include <stdlib.h>

#include "admin/audit.h"
#include "citus/citus.h"
#include "delivery/destination.h"
#include "pg/schema.h"

const struct wi_pg_stmt wi_prune_stmt = {
    "wi_prune",
    "WITH doomed AS ("
    " SELECT source_scope, event_id FROM webhook_inbox"
    " WHERE status = 'done' AND received_at < now() - $1::double precision * interval '1 second'"
    "  AND ($2::text IS NULL OR source_scope = $2)"
    " LIMIT $3::int FOR UPDATE SKIP LOCKED),"
    " gone AS (DELETE FROM webhook_inbox w USING doomed d"
    "  WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id RETURNING 1)"
    " SELECT count(*) FROM gone"};

/* From v8: the row stays, emptied, so its key still makes a redelivery a duplicate.
 * Through webhook_inbox_prunable_idx (done rows not emptied yet, by received_at). */
#define KEEP_SQL \
    "WITH doomed AS (" \
    " SELECT source_scope, event_id FROM webhook_inbox" \
    " WHERE status = 'done' AND pruned_at IS NULL" \
    "  AND received_at < now() - $1::double precision * interval '1 second'" \
    "  AND ($2::text IS NULL OR source_scope = $2)" \
    " LIMIT $3::int FOR UPDATE SKIP LOCKED)," \
    " gone AS (UPDATE webhook_inbox w SET payload = NULL, raw_body = NULL, request_headers = NULL," \
    "  attempt_log = '[]', outcome = NULL, last_error = NULL, pruned_at = now() FROM doomed d" \
    "  WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id RETURNING w.source_scope, w.event_id)"

/* Through webhook_inbox_pruned_idx. An emptied row is final (status done, never requeued:
 * webhook_inbox_filter_sql leaves it out), so the lock only keeps two pruners apart. */
#define FORGET_SQL \
    "WITH doomed AS (" \
    " SELECT source_scope, event_id FROM webhook_inbox" \
    " WHERE pruned_at IS NOT NULL AND pruned_at < now() - $1::double precision * interval '1 second'" \
    "  AND ($2::text IS NULL OR source_scope = $2)" \
    " LIMIT $3::int FOR UPDATE SKIP LOCKED)," \
    " gone AS (DELETE FROM webhook_inbox w USING doomed d" \
    "  WHERE w.source_scope = d.source_scope AND w.event_id = d.event_id RETURNING w.source_scope, w.event_id)"

/* From v13: the SQL route's once-markers of those events (webhook_inbox_effects_received,
 * keyed by their event: webhook_inbox_effects_received_event_idx) go with them, in the same
 * statement, so they are bounded by its limit. An emptied or deleted event is never
 * dispatched again, so nothing asks for its marker. */
#define MARKERS_SQL \
    ", markers AS (DELETE FROM webhook_inbox_effects_received r USING gone g" \
    "  WHERE r.source_scope = g.source_scope AND r.source_event_id = g.event_id)"

const struct wi_pg_stmt wi_prune_keep_stmt = {"wi_prune_keep", KEEP_SQL " SELECT count(*) FROM gone"};
const struct wi_pg_stmt wi_forget_stmt = {"wi_forget", FORGET_SQL " SELECT count(*) FROM gone"};
const struct wi_pg_stmt wi_prune_keep_markers_stmt = {"wi_prune_keep_markers",
                                                      KEEP_SQL MARKERS_SQL " SELECT count(*) FROM gone"};
const struct wi_pg_stmt wi_forget_markers_stmt = {"wi_forget_markers", FORGET_SQL MARKERS_SQL " SELECT count(*) FROM gone"};

/* Through webhook_inbox_outbox_delivered_idx (processed_at, WHERE status = 'delivered': v7).
 * delivered is final: no other statement changes such a row, so the lock only keeps two
 * pruners apart. The app's dedupe rows of those effects (webhook_inbox_effects_received, when
 * receive_effect ran them) go with them: once the effect is gone nothing delivers that
 * operation id again, and an emit after the window is a new effect, which the app must run. */
const struct wi_pg_stmt wi_prune_effects_stmt = {
    "wi_prune_effects",
    "WITH doomed AS ("
    " SELECT o.operation_id, o.source_scope FROM webhook_inbox_outbox o"
    " WHERE o.status = 'delivered' AND o.processed_at < now() - $1::double precision * interval '1 second'"
    "  AND ($2::text IS NULL OR o.source_scope = $2)"
    /* A Ruby handler's run (db/009) is its once-marker: while its event is not done (another
     * handler quarantined), a requeue must find it delivered, not run that handler again. */
    "  AND (o.destination <> '" WI_DEST_RESERVED_RUBY "' OR NOT EXISTS (SELECT 1 FROM webhook_inbox w"
    "   WHERE w.source_scope = o.source_scope AND w.event_id = o.source_event_id AND w.status <> 'done'))"
    " LIMIT $3::int FOR UPDATE OF o SKIP LOCKED),"
    " gone AS (DELETE FROM webhook_inbox_outbox o USING doomed d"
    "  WHERE o.operation_id = d.operation_id AND o.source_scope IS NOT DISTINCT FROM d.source_scope" /* v26's key; NULL before */
    "  RETURNING o.operation_id),"
    " received AS (DELETE FROM webhook_inbox_effects_received r USING gone g WHERE r.operation_id = g.operation_id)"
    " SELECT count(*) FROM gone"};

/* Runs one batch statement (age in seconds, scope, limit); returns its count or -1. */
static long batch(struct wi_pg *pg, const char *stmt, double age_s, const char *scope, int limit, struct wi_err *err)
{
    char age[32], lim[16];
    const char *params[3] = {age, scope, lim};
    PGresult *res;
    long n;

    snprintf(age, sizeof age, "%.3f", age_s);
    snprintf(lim, sizeof lim, "%d", limit);
    if (!(res = wi_pg_exec(pg, stmt, 3, params, PGRES_TUPLES_OK, err)))
        return -1;
    n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    return n;
}

static long step(struct wi_pg *pg, const char *stmt, double older_than, const char *scope, int limit,
                 struct wi_err *err)
{
    if (older_than < WI_PRUNE_MIN_AGE) /* also the last line of defence for --retain */
        return wi_err_set(err, WI_ERR_ARG, "retention below 3d refused");
    return batch(pg, stmt, older_than, scope, limit, err);
}

/* The statements for a schema version: events, then their markers from v13. */
static const struct wi_pg_stmt *prune_stmt(int version)
{
    if (version >= WI_PRUNE_MARKERS_SCHEMA)
        return &wi_prune_keep_markers_stmt;
    return version >= WI_PRUNE_KEYS_SCHEMA ? &wi_prune_keep_stmt : &wi_prune_stmt;
}

static const struct wi_pg_stmt *forget_stmt(int version)
{
    return version >= WI_PRUNE_MARKERS_SCHEMA ? &wi_forget_markers_stmt : &wi_forget_stmt;
}

int wi_prune_prepare(struct wi_pg *pg, int version, struct wi_err *err)
{
    if (wi_citus_prepare(pg, prune_stmt(version), 1, err) < 0 ||
        (version >= WI_PRUNE_KEYS_SCHEMA && wi_citus_prepare(pg, forget_stmt(version), 1, err) < 0) ||
        (version >= WI_PRUNE_EFFECTS_SCHEMA && wi_citus_prepare(pg, &wi_prune_effects_stmt, 1, err) < 0))
        return -1;
    return 0;
}

long wi_prune_step(struct wi_pg *pg, int version, double older_than, const char *scope, int limit,
                   struct wi_err *err)
{
    return step(pg, prune_stmt(version)->name, older_than, scope, limit, err);
}

long wi_forget_step(struct wi_pg *pg, int version, double remember, const char *scope, int limit, struct wi_err *err)
{
    if (remember < 0)
        return wi_err_set(err, WI_ERR_ARG, "--remember-pruned must not be negative");
    return batch(pg, forget_stmt(version)->name, remember, scope, limit, err);
}

long wi_prune_effects_step(struct wi_pg *pg, double older_than, const char *scope, int limit, struct wi_err *err)
{
    return step(pg, wi_prune_effects_stmt.name, older_than, scope, limit, err);
}

/* The audit row of a prune that deleted events or effects before failing: best effort (the
 * connection may be the failure), and the first error is the one reported. */
static void record_partial(struct wi_pg *pg, int audited, const char *actor, double older_than, const char *scope,
                           long total, long effects)
{
    struct wi_err ignored;

    if (audited && (total > 0 || effects > 0) && wi_pg_ok(pg))
        wi_audit_prune(pg, actor, older_than, scope, total, effects, &ignored);
}

long wi_prune(const char *conninfo, double older_than, double remember, const char *scope, const char *actor,
              long *effects, long *forgotten, int *audited, struct wi_err *err)
{
    struct wi_pg *pg;
    struct wi_schema found;
    long total = 0, n;
    int rc, keep_keys;

    *effects = 0;
    *forgotten = 0;
    *audited = 0;
    if (older_than <= 0)
        return wi_err_set(err, WI_ERR_ARG, "prune needs --older-than (e.g. 30d)");
    if (older_than < WI_PRUNE_MIN_AGE)
        return wi_err_set(err, WI_ERR_ARG, "--older-than must be at least 3d (keep done events longer than providers retry)");
    if (!(pg = wi_pg_connect(conninfo, wi_schema_stmts, wi_schema_stmts_count, err)))
        return -1;
    /* Any schema with an inbox prunes events (deleting them before v8, emptying them and
     * forgetting their keys later from v8 on); effects from v6 on (the outbox and its index);
     * the audit row from v8 on (webhook_inbox_actions takes 'prune'). */
    if ((rc = wi_schema_check(pg, &found, err)) < 0)
        goto fail;
    keep_keys = found.version >= WI_PRUNE_KEYS_SCHEMA;
    if (wi_prune_prepare(pg, found.version, err) < 0 ||
        (found.version >= WI_AUDIT_PRUNE_SCHEMA && wi_pg_prepare(pg, &wi_audit_prune_stmt, 1, err) < 0))
        goto fail;
    *audited = found.version >= WI_AUDIT_PRUNE_SCHEMA;
    do {
        if ((n = wi_prune_step(pg, found.version, older_than, scope, 5000, err)) < 0)
            goto fail;
        total += n;
    } while (n > 0);
    while (keep_keys) {
        if ((n = wi_forget_step(pg, found.version, remember, scope, 5000, err)) < 0)
            goto fail;
        *forgotten += n;
        if (n == 0)
            break;
    }
    if (found.version >= WI_PRUNE_EFFECTS_SCHEMA) {
        do {
            if ((n = wi_prune_effects_step(pg, older_than, scope, 5000, err)) < 0)
                goto fail;
            *effects += n;
        } while (n > 0);
    }
    if (*audited && wi_audit_prune(pg, actor, older_than, scope, total, *effects, err) < 0) {
        *audited = 0;
        goto fail_recorded;
    }
    wi_pg_free(pg);
    return total;
fail:
    record_partial(pg, *audited, actor, older_than, scope, total, *effects);
fail_recorded:
    wi_pg_free(pg);
    return -1;
}
