/* reconcile_github.c - GitHub's hook deliveries API as reconcile reads it: list a
 * repository's or organization's hook deliveries (hook=, a token), or a GitHub App's
 * (app=: GET /app/hook/deliveries, an App JWT), newest first, per_page=100, cursor from
 * the Link header, and for each failed one no later attempt delivered, ask GitHub to
 * redeliver it (POST .../deliveries/{id}/attempts). Redelivery, not the listed payload:
 * GitHub resends the very bytes it signed, so the receiver verifies them and keys the event
 * by the SHA-256 of that body as it keys every delivery - a payload re-serialized from the
 * API's JSON could differ by a byte and count twice. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <stdio.h>
#include <string.h>

static const char *const options[] = {"hook", "app", "rate", NULL};

/* To redeliver: a failed attempt (not 2xx) in the window whose GUID no attempt on this page
 * delivered, newer than the attempt last redelivered for that GUID; one per GUID. */
static const char page_sql[] =
    "WITH items AS ("
    "  SELECT d FROM jsonb_array_elements(CASE WHEN jsonb_typeof($1::jsonb) = 'array' THEN $1::jsonb ELSE '[]' END) d),"
    " win AS ("
    "  SELECT d FROM items"
    "   WHERE jsonb_typeof(d->'id') = 'number' AND jsonb_typeof(d->'guid') = 'string'"
    "     AND (d->>'delivered_at')::timestamptz BETWEEN to_timestamp($4::double precision)"
    "                                             AND to_timestamp($5::double precision)),"
    " todo AS ("
    "  SELECT max((d->>'id')::bigint) AS id, d->>'guid' AS guid FROM win"
    "   WHERE NOT coalesce((d->>'status_code')::int BETWEEN 200 AND 299, false)"
    "     AND NOT EXISTS (SELECT 1 FROM items s WHERE s.d->>'guid' = win.d->>'guid'"
    "                        AND (s.d->>'status_code')::int BETWEEN 200 AND 299)"
    "     AND NOT EXISTS (SELECT 1 FROM webhook_inbox_redeliveries r"
    "                      WHERE r.source_scope = $2::text AND r.delivery_guid = win.d->>'guid'"
    "                        AND r.delivery_id >= (win.d->>'id')::bigint)"
    "   GROUP BY 2)"
    " SELECT jsonb_typeof($1::jsonb) = 'array', (SELECT count(*) FROM items), 0::bigint,"
    "        (SELECT count(*) FROM items) - (SELECT count(*) FROM win),"
    "        CASE WHEN NOT EXISTS (SELECT 1 FROM items"
    "                               WHERE (d->>'delivered_at')::timestamptz < to_timestamp($4::double precision))"
    "             THEN $3::text END,"
    "        (SELECT string_agg(id || ' ' || guid, E'\\n' ORDER BY id) FROM todo)";

static int name_ok(const char *s, size_t n)
{
    return n > 0 && n <= 100 && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") >= n &&
           !(n <= 2 && s[0] == '.');
}

/* repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID */
static int hook_ok(const char *h)
{
    const char *p = h, *s;
    int parts = !strncmp(h, "repos/", 6) ? 2 : !strncmp(h, "orgs/", 5) ? 1 : 0;
    if (!parts)
        return 0;
    p = strchr(h, '/') + 1;
    while (parts--) {
        if (!(s = strchr(p, '/')) || !name_ok(p, (size_t)(s - p)))
            return 0;
        p = s + 1;
    }
    if (strncmp(p, "hooks/", 6))
        return 0;
    p += 6;
    return *p && strspn(p, "0123456789") == strlen(p) && strlen(p) <= 19;
}

/* The deliveries' path under the base: the App's webhook, or the hook= named. */
static const char *hook_path(const struct wi_rc_endpoint *ep)
{
    return ep->app ? "app/hook" : ep->hook;
}

static int check(struct wi_rc_endpoint *ep, const char *key, struct wi_err *err)
{
    (void)key;
    if (ep->app) {
        size_t n = strlen(ep->app);
        if (ep->hook)
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: hook= or app=, not both", ep->name);
        if (n < 1 || n > 64 ||
            strspn(ep->app, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: app= must be the GitHub App's id (or client id)",
                              ep->name);
        return 0;
    }
    if (!ep->hook || !hook_ok(ep->hook))
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: hook= must be repos/OWNER/REPO/hooks/ID or "
                          "orgs/ORG/hooks/ID (the webhook whose deliveries to recover), or app=APP_ID", ep->name);
    return 0;
}

static int page_url(const struct wi_rc_endpoint *ep, const char *base, double since, double until, const char *cursor,
                    char *url, size_t n)
{
    int w;
    (void)since, (void)until; /* the list has no time filter: the page statement reads delivered_at */
    if (cursor && strspn(cursor, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~%=-") !=
                      strlen(cursor))
        return -1;
    w = snprintf(url, n, "%s/%s/deliveries?per_page=100%s%s", base, hook_path(ep), cursor ? "&cursor=" : "",
                 cursor ? cursor : "");
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

static int redeliver_url(const struct wi_rc_endpoint *ep, const char *base, const char *id, char *url, size_t n)
{
    int w;
    if (!*id || strspn(id, "0123456789") != strlen(id))
        return -1;
    w = snprintf(url, n, "%s/%s/deliveries/%s/attempts", base, hook_path(ep), id);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

static int headers(const struct wi_rc_endpoint *ep, const char *key, char (*lines)[512], int n)
{
    static const char *const extra[] = {"Accept: application/vnd.github+json", "X-GitHub-Api-Version: 2022-11-28",
                                        NULL};
    (void)ep;
    return wi_rc_bearer(key, extra, lines, n);
}

static const char *jwt_iss(const struct wi_rc_endpoint *ep)
{
    return ep->app;
}

const struct wi_rc_api wi_rc_github = {
    .name = "github",
    .base = "https://api.github.com",
    .test_base_env = "WEBHOOK_INBOX_TEST_GITHUB_API",
    .options = options,
    .mode = WI_RC_REDELIVER,
    .page_sql = page_sql,
    .page_nparams = 5,
    .check = check,
    .page_url = page_url,
    .redeliver_url = redeliver_url,
    .headers = headers,
    .jwt_iss = jwt_iss,
};
