/* metrics.c - outcome counters of this process, and the stats subcommand. */
#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "outbox.h"
#include "schema.h"

static atomic_long counters[WI_M_COUNT];

void wi_metrics_add(int which, long n) { atomic_fetch_add(&counters[which], n); }
long wi_metrics_get(int which) { return atomic_load(&counters[which]); }

void wi_metrics_log_summary(void)
{
    log_info("summary", "done=%ld quarantined=%ld retry=%ld batches=%ld reconnects=%ld waiting=%ld",
             wi_metrics_get(WI_M_DONE), wi_metrics_get(WI_M_QUARANTINED), wi_metrics_get(WI_M_RETRY),
             wi_metrics_get(WI_M_BATCHES), wi_metrics_get(WI_M_RECONNECTS), wi_metrics_get(WI_M_WAITING));
}

static const struct wi_pg_stmt stmts[] = {
    /* Ages and latencies rounded to 0.1 (numeric: prints as written, valid JSON). */
    {"wi_stats", "SELECT pending, round(oldest_pending_age_s::numeric, 1), pending_attempts, retrying,"
                 " quarantined, done, round(latency_p50_ms::numeric, 1), round(latency_p95_ms::numeric, 1),"
                 " round(latency_p99_ms::numeric, 1) FROM webhook_inbox_stats()"},
    {"wi_stats_hist", "SELECT attempts, count(*) FROM webhook_inbox WHERE status <> 'done'"
                      " GROUP BY attempts ORDER BY attempts"},
    /* Event types are provider text: JSON-escaped by the server for --json. */
    {"wi_stats_unrouted", "SELECT coalesce(sum(pending), 0), coalesce(jsonb_object_agg(event_type, pending), '{}')::text"
                          " FROM webhook_inbox_unrouted()"},
    {"wi_stats_unrouted_types", "SELECT event_type, pending FROM webhook_inbox_unrouted()"},
};

static const char *names[] = {"pending", "oldest_pending_age_s", "pending_attempts_sum", "retrying",
                              "quarantined", "done", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms"};

int wi_metrics_stats(const char *conninfo, int json, FILE *out, struct wi_err *err)
{
    struct wi_pg *pg = wi_pg_connect(conninfo, wi_schema_stmts, wi_schema_stmts_count, err);
    PGresult *res = NULL, *hist = NULL, *unrouted = NULL;
    int i, rc = -1;

    if (!pg)
        return -1;
    if (wi_schema_require(pg, err) < 0 || wi_pg_prepare(pg, stmts, (int)(sizeof stmts / sizeof stmts[0]), err) < 0)
        goto done;
    if (!(res = wi_pg_exec(pg, "wi_stats", 0, NULL, PGRES_TUPLES_OK, err)))
        goto done;
    if (!(hist = wi_pg_exec(pg, "wi_stats_hist", 0, NULL, PGRES_TUPLES_OK, err)))
        goto done;
    if (!(unrouted = wi_pg_exec(pg, json ? "wi_stats_unrouted" : "wi_stats_unrouted_types", 0, NULL, PGRES_TUPLES_OK,
                                err)))
        goto done;
    if (json)
        fputc('{', out);
    for (i = 0; i < 9; i++) {
        const char *v = PQgetisnull(res, 0, i) ? NULL : PQgetvalue(res, 0, i);
        if (json)
            fprintf(out, "%s\"%s\":%s", i ? "," : "", names[i], v ? v : "null");
        else
            fprintf(out, "%-22s %s\n", names[i], v ? v : "-");
    }
    if (json)
        fputs(",\"attempts_histogram\":{", out);
    else
        fputs("attempts_histogram     (pending + quarantined)\n", out);
    for (i = 0; i < PQntuples(hist); i++) {
        if (json)
            fprintf(out, "%s\"%s\":%s", i ? "," : "", PQgetvalue(hist, i, 0), PQgetvalue(hist, i, 1));
        else
            fprintf(out, "  attempts=%-5s %s\n", PQgetvalue(hist, i, 0), PQgetvalue(hist, i, 1));
    }
    if (json) {
        fprintf(out, "},\"waiting_for_route\":%s,\"waiting_for_route_types\":%s", PQgetvalue(unrouted, 0, 0),
                PQgetvalue(unrouted, 0, 1));
        if (wi_outbox_stats(pg, json, out, err) < 0) /* ,"outbox":{...} */
            goto done;
        fputs("}\n", out);
    } else {
        long total = 0;
        for (i = 0; i < PQntuples(unrouted); i++)
            total += atol(PQgetvalue(unrouted, i, 1));
        fprintf(out, "%-22s %ld\n", "waiting_for_route", total);
        for (i = 0; i < PQntuples(unrouted); i++) {
            char type[160];
            fprintf(out, "  type=%-17s %s\n", wi_log_quote(type, sizeof type, PQgetvalue(unrouted, i, 0), 120),
                    PQgetvalue(unrouted, i, 1));
        }
        if (wi_outbox_stats(pg, json, out, err) < 0)
            goto done;
    }
    rc = 0;
done:
    PQclear(unrouted);
    PQclear(hist);
    PQclear(res);
    wi_pg_free(pg);
    return rc;
}
