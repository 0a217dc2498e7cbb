/* reconcile_square.c - Square's Events API as reconcile reads it: POST /v2/events/search
 * (28 days kept; created_at start_at/end_at, newest first, limit 100, the body's cursor for
 * the next page; merchant= filters merchant_ids), events inserted as deliveries would store
 * them, keyed by event_id as the receiver keys a Square delivery (one longer than
 * WI_EVENT_ID_MAX bytes as the receiver keys it, event_id.h; $8/$9, reconcile.h). */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define SQUARE_VERSION "2025-01-23" /* Square-Version: the API version whose shapes this reads */

static const char *const options[] = {"mode", "merchant", "rate", NULL};

/* An answer with no event omits "events"; $7 the merchant (NULL: any). */
static const char page_sql[] =
    "WITH items AS ("
    "  SELECT e, " WI_RC_SID_SQL("event_id", "$8", "$9") " AS sid,"
    "            CASE WHEN e->>'created_at' ~ '^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?(Z|[+-]\\d\\d:\\d\\d)$'"
    "                 THEN (e->>'created_at')::timestamptz END AS t"
    "    FROM jsonb_array_elements(CASE WHEN jsonb_typeof($1::jsonb->'events') = 'array'"
    "                              THEN $1::jsonb->'events' ELSE '[]' END) e),"
    " ok AS ("
    "  SELECT e, sid FROM items"
    "   WHERE jsonb_typeof(e->'event_id') = 'string' AND octet_length(sid) BETWEEN 1 AND " WI_EVENT_ID_MAX_TEXT
    "     AND octet_length(coalesce(e->>'type', '')) <= 255"
    "     AND t BETWEEN to_timestamp($4::double precision) AND to_timestamp($5::double precision)"
    "     AND e @> $6::jsonb AND ($7::text IS NULL OR e->>'merchant_id' = $7::text)),"
    " ins AS ("
    "  INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at)"
    "  SELECT $2::text, sid, coalesce(e->>'type', ''), e, now() FROM ok"
    "  ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING 1)"
    " SELECT jsonb_typeof($1::jsonb) = 'object' AND $1::jsonb->'errors' IS NULL"
    "        AND coalesce(jsonb_typeof($1::jsonb->'events'), 'array') = 'array'"
    "        AND coalesce(jsonb_typeof($1::jsonb->'cursor'), 'string') = 'string',"
    "        (SELECT count(*) FROM items), (SELECT count(*) FROM ins),"
    "        (SELECT count(*) FROM items) - (SELECT count(*) FROM ok),"
    "        coalesce($3::text, nullif($1::jsonb->>'cursor', '')),"
    "        NULL::text,"
    "        " WI_RC_UNKEYED_SQL("event_id");

/* A cursor is opaque: kept only when it is safe inside a JSON string as is. */
static int cursor_ok(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 1024 &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~%=+/-") == n;
}

static int check(struct wi_rc_endpoint *ep, const char *key, struct wi_err *err)
{
    (void)key; /* Square's tokens do not say their environment: mode= does (default live) */
    if (ep->live < 0)
        ep->live = 1;
    if (ep->account && !wi_rc_id_ok(ep->account, 64))
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: merchant must be a Square merchant id", ep->name);
    return 0;
}

static int page_url(const struct wi_rc_endpoint *ep, const char *base, double since, double until, const char *cursor,
                    char *url, size_t n)
{
    int w = snprintf(url, n, "%s/v2/events/search", base);
    (void)ep, (void)since, (void)until, (void)cursor;
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

static void rfc3339(double t, char *out, size_t n)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int page_body(const struct wi_rc_endpoint *ep, double since, double until, const char *cursor, char *body,
                     size_t n)
{
    char from[32], to[32], merchant[96] = "", after[1100] = "";
    int w;
    if (cursor && !cursor_ok(cursor))
        return -1;
    rfc3339(since, from, sizeof from);
    rfc3339(until, to, sizeof to);
    if (ep->account)
        snprintf(merchant, sizeof merchant, ", \"merchant_ids\": [\"%s\"]", ep->account);
    if (cursor)
        snprintf(after, sizeof after, ", \"cursor\": \"%s\"", cursor);
    w = snprintf(body, n,
                 "{\"limit\": 100%s, \"query\": {\"filter\": {\"created_at\": "
                 "{\"start_at\": \"%s\", \"end_at\": \"%s\"}%s},"
                 " \"sort\": {\"field\": \"DEFAULT\", \"order\": \"DESC\"}}}",
                 after, from, to, merchant);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

static int headers(const struct wi_rc_endpoint *ep, const char *key, char (*lines)[512], int n)
{
    static const char *const extra[] = {"Square-Version: " SQUARE_VERSION, "Content-Type: application/json",
                                        "Accept: application/json", NULL};
    (void)ep;
    return wi_rc_bearer(key, extra, lines, n);
}

static void filters(const struct wi_rc_endpoint *ep, char *contains, size_t cn, char *merchant, size_t mn)
{
    snprintf(contains, cn, "{}");
    snprintf(merchant, mn, "%s", ep->account ? ep->account : "");
}

const struct wi_rc_api wi_rc_square = {
    .name = "square",
    .base = "https://connect.squareup.com",
    .sandbox_base = "https://connect.squareupsandbox.com",
    .max_age_s = 28 * 86400.0,
    .test_base_env = "WEBHOOK_INBOX_TEST_SQUARE_API",
    .options = options,
    .mode = WI_RC_INSERT,
    .page_sql = page_sql,
    .page_nparams = 7,
    .check = check,
    .page_url = page_url,
    .page_body = page_body,
    .headers = headers,
    .filters = filters,
};
