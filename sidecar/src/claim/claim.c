/* claim.c - FOR UPDATE SKIP LOCKED claim of due pending rows, oldest due first, one event
 * per ordering key at a time (the key's advisory lock held until the transaction ends). */
#define _POSIX_C_SOURCE 200809L
#include "claim/claim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-object ordering (db/014): a keyed row waits while an earlier row of its key is pending,
 * or quarantined under a strict route. The same filter as webhook_inbox_dispatch_batch's
 * claim; inlined (a function holding EXISTS is not), one webhook_inbox_ordering_idx probe per
 * keyed candidate. */
#define NOT_BLOCKED                                                                            \
    " AND (w.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM webhook_inbox p"                \
    " WHERE p.source_scope = w.source_scope AND p.ordering_key = w.ordering_key"              \
    " AND p.status <> 'done'"                                                                 \
    " AND (p.ordering_at, p.received_at, p.event_id) < (w.ordering_at, w.received_at, w.event_id)" \
    " AND (p.status = 'pending' OR webhook_inbox_route_strict(w.event_type))))"

/* Served by webhook_inbox_claim_idx (partial index on pending rows). Then each keyed row's
 * key (db/021): a transaction-level advisory lock tried on the rows the claim locked (outside
 * the subquery, which its LIMIT keeps the filter out of); a row whose key another transaction
 * holds - a later event of its key running - is left out, pending, until that one ends. */
const struct wi_pg_stmt wi_claim_stmt = {
    "wi_claim",
    "SELECT source_scope, event_id, event_type, attempts FROM (SELECT w.source_scope, w.event_id, w.event_type,"
    " w.attempts, w.ordering_key FROM webhook_inbox w"
    " WHERE status = 'pending' AND next_attempt_at <= now()" NOT_BLOCKED
    " ORDER BY next_attempt_at, received_at LIMIT $1::int FOR UPDATE SKIP LOCKED) c"
    " WHERE c.ordering_key IS NULL"
    " OR pg_try_advisory_xact_lock(webhook_inbox_ordering_lock_id(c.source_scope, c.ordering_key))"};

/* A row that waits for its key's predecessor is not due: the predecessor is (or holds it for
 * good, strict), so the idle worker sleeps until the predecessor's time, not 0.1 s. Read from
 * the session's claim cursor (webhook_inbox_next_due, db/functions/claim_dispatch.sql): under a
 * long-open snapshot a probe from the head walked every event processed since, after every
 * batch. */
const struct wi_pg_stmt wi_next_due_stmt = {"wi_next_due", "SELECT webhook_inbox_next_due()"};

/* Has the session's next claim read the rows before its cursor if it comes up short, whatever
 * that read cost last time (claim_dispatch.sql): `run --once` claims so before it exits. */
const struct wi_pg_stmt wi_claim_before_now_stmt = {"wi_claim_before_now",
                                                     "SELECT set_config('webhook_inbox.claim_before', '', false)"};

/* The probe from the head, for the Citus layout, whose claims keep no cursor (worker.c). */
const struct wi_pg_stmt wi_next_due_from_head_stmt = {
    "wi_next_due",
    "SELECT extract(epoch FROM w.next_attempt_at - clock_timestamp())::float8 FROM webhook_inbox w"
    " WHERE status = 'pending'" NOT_BLOCKED " ORDER BY next_attempt_at, received_at LIMIT 1"};

void wi_batch_free(struct wi_batch *b)
{
    int i;
    if (!b)
        return;
    for (i = 0; i < b->n; i++) {
        free(b->ev[i].scope);
        free(b->ev[i].event_id);
        free(b->ev[i].event_type);
        free(b->ev[i].detail);
    }
    free(b->ev);
    b->ev = NULL;
    b->n = 0;
}

int wi_claim(struct wi_pg *pg, int limit, struct wi_batch *b, struct wi_err *err)
{
    char lim[16];
    const char *params[1] = {lim};
    PGresult *res;
    int i, n;

    wi_batch_free(b);
    snprintf(lim, sizeof lim, "%d", limit);
    res = wi_pg_exec(pg, wi_claim_stmt.name, 1, params, PGRES_TUPLES_OK, err);
    if (!res)
        return -1;
    n = PQntuples(res);
    if (n == 0) {
        PQclear(res);
        return 0;
    }
    b->ev = calloc((size_t)n, sizeof *b->ev);
    if (!b->ev) {
        PQclear(res);
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    }
    for (i = 0; i < n; i++) {
        struct wi_event *e = &b->ev[i];
        e->scope = strdup(PQgetvalue(res, i, 0));
        e->event_id = strdup(PQgetvalue(res, i, 1));
        e->event_type = strdup(PQgetvalue(res, i, 2));
        e->attempts = atoi(PQgetvalue(res, i, 3));
        b->n = i + 1;
        if (!e->scope || !e->event_id || !e->event_type) {
            PQclear(res);
            wi_batch_free(b);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
    }
    PQclear(res);
    return n;
}

double wi_claim_next_due(struct wi_pg *pg)
{
    struct wi_err err;
    PGresult *res = wi_pg_exec(pg, wi_next_due_stmt.name, 0, NULL, PGRES_TUPLES_OK, &err);
    double d = -1;
    if (!res)
        return -1;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        d = atof(PQgetvalue(res, 0, 0));
        if (d < 0)
            d = 0;
    }
    PQclear(res);
    return d;
}
