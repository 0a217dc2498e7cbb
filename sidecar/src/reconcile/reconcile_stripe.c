/* reconcile_stripe.c - Stripe's events API as reconcile reads it: GET /v1/events (newest
 * first, 100 a page, starting_after pagination, created[gte]/[lte], delivery_success=false
 * with failed_only), events inserted as deliveries would store them, keyed by the event id
 * (one longer than WI_EVENT_ID_MAX bytes as the receiver keys it, event_id.h). */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <stdio.h>
#include <string.h>

static const char *const options[] = {"account", "mode", "failed_only", "rate", NULL};

/* An event the endpoint's scope takes: its mode ($6 contains livemode), and no connected
 * account but the configured one ($7). Types are bounded like the receiver's; an id is
 * stored under the receiver's key for it, sid ($8/$9, reconcile.h). */
static const char page_sql[] =
    "WITH items AS ("
    "  SELECT e, " WI_RC_SID_SQL("id", "$8", "$9") " AS sid"
    "    FROM jsonb_array_elements(CASE WHEN jsonb_typeof($1::jsonb->'data') = 'array'"
    "                              THEN $1::jsonb->'data' ELSE '[]' END) e),"
    " ok AS ("
    "  SELECT e, sid FROM items"
    "   WHERE jsonb_typeof(e->'id') = 'string' AND octet_length(sid) BETWEEN 1 AND " WI_EVENT_ID_MAX_TEXT
    "     AND octet_length(coalesce(e->>'type', '')) <= 255 AND jsonb_typeof(e->'created') = 'number'"
    "     AND (e->>'created')::numeric BETWEEN $4::double precision AND $5::double precision"
    "     AND e @> $6::jsonb AND coalesce(e->>'account', $7::text) IS NOT DISTINCT FROM $7::text),"
    " ins AS ("
    "  INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at, ordering_key,"
    "                             ordering_at, next_attempt_at)" /* ordering as the Stripe entry's (db/014) */
    "  SELECT $2::text, sid, coalesce(e->>'type', ''), e, now(), k, t, least(now(), t)"
    "    FROM ok, LATERAL (SELECT webhook_inbox_ordering_key(e, 'data.object.id') AS k) o,"
    "         LATERAL (SELECT CASE WHEN k IS NOT NULL THEN coalesce(webhook_inbox_ordering_time(e, 'created'), now())"
    "                         END AS t) ot"
    "  ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING 1)"
    " SELECT jsonb_typeof($1::jsonb->'data') = 'array' AND jsonb_typeof($1::jsonb->'has_more') = 'boolean',"
    "        (SELECT count(*) FROM items), (SELECT count(*) FROM ins),"
    "        (SELECT count(*) FROM items) - (SELECT count(*) FROM ok),"
    "        coalesce($3::text, CASE WHEN ($1::jsonb->>'has_more')::boolean"
    "                                 AND NOT EXISTS (SELECT 1 FROM items WHERE (e->>'created')::numeric < $4::double precision)"
    "                                THEN $1::jsonb->'data'->-1->>'id' END),"
    "        NULL::text,"
    "        " WI_RC_UNKEYED_SQL("id");

static int check(struct wi_rc_endpoint *ep, const char *key, struct wi_err *err)
{
    int live;
    if (!strncmp(key, "sk_live_", 8) || !strncmp(key, "rk_live_", 8))
        live = 1;
    else if (!strncmp(key, "sk_test_", 8) || !strncmp(key, "rk_test_", 8))
        live = 0;
    else
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: the API key is not a Stripe secret or restricted key "
                          "(sk_live_, sk_test_, rk_live_, rk_test_)", ep->name);
    if (ep->live >= 0 && ep->live != live)
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: mode=%s but the API key is a %s key", ep->name,
                          ep->live ? "live" : "test", live ? "live" : "test");
    ep->live = live;
    if (ep->account && (strncmp(ep->account, "acct_", 5) || !wi_rc_id_ok(ep->account, 64)))
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: account must be a Connect account id (acct_...)", ep->name);
    return 0;
}

static int page_url(const struct wi_rc_endpoint *ep, const char *base, double since, double until, const char *cursor,
                    char *url, size_t n)
{
    char after[300] = "";
    int w;
    if (cursor) {
        if (!wi_rc_id_ok(cursor, 255))
            return -1;
        snprintf(after, sizeof after, "&starting_after=%s", cursor);
    }
    w = snprintf(url, n, "%s/v1/events?limit=100&created%%5Bgte%%5D=%.0f&created%%5Blte%%5D=%.0f%s%s", base, since,
                 until, ep->failed_only ? "&delivery_success=false" : "", after);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

static int headers(const struct wi_rc_endpoint *ep, const char *key, char (*lines)[512], int n)
{
    char account[128];
    const char *extra[2] = {account, NULL};
    if (ep->account && snprintf(account, sizeof account, "Stripe-Account: %s", ep->account) >= (int)sizeof account)
        return -1;
    return wi_rc_bearer(key, ep->account ? extra : NULL, lines, n);
}

static void filters(const struct wi_rc_endpoint *ep, char *contains, size_t cn, char *account, size_t an)
{
    snprintf(contains, cn, "{\"livemode\": %s}", ep->live == 1 ? "true" : "false");
    snprintf(account, an, "%s", ep->account ? ep->account : "");
}

const struct wi_rc_api wi_rc_stripe = {
    .name = "stripe",
    .base = "https://api.stripe.com",
    .test_base_env = "WEBHOOK_INBOX_TEST_STRIPE_API",
    .options = options,
    .mode = WI_RC_INSERT,
    .page_sql = page_sql,
    .page_nparams = 7,
    .check = check,
    .page_url = page_url,
    .headers = headers,
    .filters = filters,
};
