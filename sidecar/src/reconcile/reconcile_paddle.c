/* reconcile_paddle.c - Paddle Billing's event stream as reconcile reads it: GET /events
 * (90 days kept; order_by=id[DESC], newest first; per_page=200; the next page from
 * meta.pagination.next's `after`), events inserted as deliveries would store them, keyed by
 * event_id as the receiver keys a Paddle delivery (one longer than WI_EVENT_ID_MAX bytes as the
 * receiver keys it, event_id.h; $6/$7, reconcile.h). Sandbox keys go to sandbox-api.paddle.com. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <stdio.h>
#include <string.h>

static const char *const options[] = {"mode", "rate", NULL};

/* occurred_at is RFC 3339; one that is not is skipped, never cast (a cast would fail the page).
 * The list has no time filter: the walk stops at the first page holding an event older than
 * since, and events younger than until are left to their delivery. */
static const char page_sql[] =
    "WITH items AS ("
    "  SELECT e, " WI_RC_SID_SQL("event_id", "$6", "$7") " AS sid,"
    "            CASE WHEN e->>'occurred_at' ~ '^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?(Z|[+-]\\d\\d:\\d\\d)$'"
    "                 THEN (e->>'occurred_at')::timestamptz END AS t"
    "    FROM jsonb_array_elements(CASE WHEN jsonb_typeof($1::jsonb->'data') = 'array'"
    "                              THEN $1::jsonb->'data' ELSE '[]' END) e),"
    " ok AS ("
    "  SELECT e, sid FROM items"
    "   WHERE jsonb_typeof(e->'event_id') = 'string' AND octet_length(sid) BETWEEN 1 AND " WI_EVENT_ID_MAX_TEXT
    "     AND octet_length(coalesce(e->>'event_type', '')) <= 255"
    "     AND t BETWEEN to_timestamp($4::double precision) AND to_timestamp($5::double precision)),"
    " ins AS ("
    "  INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at)"
    "  SELECT $2::text, sid, coalesce(e->>'event_type', ''), e, now() FROM ok"
    "  ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING 1),"
    " pg AS (SELECT $1::jsonb->'meta'->'pagination' AS p),"
    " nxt AS (SELECT substring(p->>'next' FROM '[?&]after=([A-Za-z0-9_]{1,255})(&|$)') AS after FROM pg)"
    " SELECT jsonb_typeof($1::jsonb->'data') = 'array' AND jsonb_typeof(p->'has_more') = 'boolean'"
    "        AND (NOT (p->>'has_more')::boolean OR after IS NOT NULL),"
    "        (SELECT count(*) FROM items), (SELECT count(*) FROM ins),"
    "        (SELECT count(*) FROM items) - (SELECT count(*) FROM ok),"
    "        coalesce($3::text, CASE WHEN (p->>'has_more')::boolean"
    "              AND NOT EXISTS (SELECT 1 FROM items WHERE t < to_timestamp($4::double precision))"
    "             THEN after END),"
    "        NULL::text,"
    "        " WI_RC_UNKEYED_SQL("event_id")
    "   FROM pg, nxt";

/* pdl_live_apikey_... / pdl_sdbx_apikey_... say their environment; an older key does not:
 * then mode= says it (default live). */
static int check(struct wi_rc_endpoint *ep, const char *key, struct wi_err *err)
{
    int live = !strncmp(key, "pdl_live_", 9) ? 1 : !strncmp(key, "pdl_sdbx_", 9) ? 0 : -1;
    if (live >= 0 && ep->live >= 0 && ep->live != live)
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: mode=%s but the API key is a %s key", ep->name,
                          ep->live ? "live" : "sandbox", live ? "live" : "sandbox");
    ep->live = live >= 0 ? live : ep->live >= 0 ? ep->live : 1;
    return 0;
}

static int page_url(const struct wi_rc_endpoint *ep, const char *base, double since, double until, const char *cursor,
                    char *url, size_t n)
{
    int w;
    (void)ep, (void)since, (void)until;
    if (cursor && !wi_rc_id_ok(cursor, 255))
        return -1;
    w = snprintf(url, n, "%s/events?per_page=200&order_by=id%%5BDESC%%5D%s%s", base, cursor ? "&after=" : "",
                 cursor ? cursor : "");
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

static int headers(const struct wi_rc_endpoint *ep, const char *key, char (*lines)[512], int n)
{
    static const char *const extra[] = {"Paddle-Version: 1", NULL};
    (void)ep;
    return wi_rc_bearer(key, extra, lines, n);
}

const struct wi_rc_api wi_rc_paddle = {
    .name = "paddle",
    .base = "https://api.paddle.com",
    .sandbox_base = "https://sandbox-api.paddle.com",
    .max_age_s = 90 * 86400.0,
    .test_base_env = "WEBHOOK_INBOX_TEST_PADDLE_API",
    .options = options,
    .mode = WI_RC_INSERT,
    .page_sql = page_sql,
    .page_nparams = 5,
    .check = check,
    .page_url = page_url,
    .headers = headers,
};
