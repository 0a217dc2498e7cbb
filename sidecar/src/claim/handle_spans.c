/* handle_spans.c - the handled events' spans: their receipt contexts read, a child span each
 * with the id the dispatch derived for the handler's effects. */
#define _POSIX_C_SOURCE 200809L
#include "claim/handle_spans.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "observability/otlp.h"
#include "pg/pgarray.h"

/* source_scope = ANY names the shards on Citus (a router query per scope); rows whose key is
 * another pair of the two lists are skipped in C. */
const struct wi_pg_stmt wi_handle_spans_stmt = {
    "wi_trace_contexts", "SELECT source_scope, event_id, trace_context FROM webhook_inbox"
                         " WHERE source_scope = ANY ($1::text[]) AND event_id = ANY ($2::text[])"
                         " AND trace_context IS NOT NULL"};

/* The index of the event of b with this key, looking from hint on (rows mostly come in the
 * batch's order); -1 when none. */
static int find(const struct wi_batch *b, const char *scope, const char *id, int hint)
{
    int k, i;

    for (k = 0; k < b->n; k++) {
        i = (hint + k) % b->n;
        if (!strcmp(b->ev[i].event_id, id) && !strcmp(b->ev[i].scope, scope))
            return i;
    }
    return -1;
}

static void add_span(const struct wi_event *e, const struct wi_traceparent *parent, long long start_ns, long long end_ns)
{
    struct wi_span s;

    memset(&s, 0, sizeof s);
    /* the span the dispatch named as the handler's context (its effects' parent) */
    if (wi_traceparent_handle(parent, e->scope, e->event_id, e->attempts, &s.ctx) < 0)
        return;
    memcpy(s.parent_id, parent->span_id, sizeof s.parent_id);
    s.name = "webhook_inbox.handle";
    s.kind = WI_SPAN_INTERNAL;
    s.start_ns = start_ns;
    s.end_ns = end_ns;
    s.error = !strcmp(e->result, "quarantined") || !strcmp(e->result, "retry");
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.source_scope", e->scope, 0};
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.event_type", e->event_type, 0};
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.event_id", e->event_id, 0};
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.result", e->result, 0};
    s.attrs[s.nattrs++] = (struct wi_span_attr){"webhook_inbox.attempt", NULL, e->attempts + 1};
    wi_otlp_add(&s);
}

void wi_handle_spans(struct wi_pg *pg, const struct wi_batch *b, long long start_ns, long long end_ns)
{
    struct wi_pgarray scopes = {0}, ids = {0};
    const char *params[2];
    struct wi_err err;
    PGresult *res;
    int i, r, n = 0, hint = 0;

    if (!wi_otlp_on() || b->n == 0)
        return;
    for (i = 0; i < b->n; i++)
        if (b->ev[i].result[0] && strcmp(b->ev[i].result, "skipped")) {
            wi_pgarray_add_str(&scopes, b->ev[i].scope);
            wi_pgarray_add_str(&ids, b->ev[i].event_id);
            n++;
        }
    params[0] = wi_pgarray_end(&scopes);
    params[1] = wi_pgarray_end(&ids);
    if (n == 0 || !params[0] || !params[1])
        goto done;
    if (!(res = wi_pg_exec(pg, wi_handle_spans_stmt.name, 2, params, PGRES_TUPLES_OK, &err))) {
        if (wi_log_every("trace_contexts_failed", 60.0))
            log_warnx("trace_contexts_failed", "error=%s note=\"no handle spans for this batch\"", WI_LOG_Q(err.msg));
        goto done;
    }
    for (r = 0; r < PQntuples(res); r++) {
        struct wi_traceparent parent;
        const char *tc = PQgetvalue(res, r, 2);

        if ((i = find(b, PQgetvalue(res, r, 0), PQgetvalue(res, r, 1), hint)) < 0 ||
            wi_traceparent_parse(tc, (size_t)PQgetlength(res, r, 2), &parent) < 0)
            continue;
        hint = i + 1;
        add_span(&b->ev[i], &parent, start_ns, end_ns);
    }
    PQclear(res);
done:
    wi_pgarray_free(&scopes);
    wi_pgarray_free(&ids);
}
