/* reconcile_endpoint.c - `--endpoint NAME=PROVIDER:SCOPE [key=value ...]`: the endpoints
 * reconcile knows, each naming its provider's API shape and the scope its events go to. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <stdlib.h>
#include <string.h>

#include "delivery/destination.h"

static const struct wi_rc_api *const apis[] = {&wi_rc_stripe, &wi_rc_github, &wi_rc_paddle, &wi_rc_square};

static const struct wi_rc_api *find_api(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof apis / sizeof *apis; i++)
        if (strlen(apis[i]->name) == n && !strncmp(apis[i]->name, name, n))
            return apis[i];
    return NULL;
}

/* Options every provider takes: the walk's bounds. */
static const char *const common[] = {"max_pages", "deadline", NULL};

static int allowed(const struct wi_rc_api *api, const char *k, size_t n)
{
    for (const char *const *o = common; *o; o++)
        if (strlen(*o) == n && !strncmp(*o, k, n))
            return 1;
    for (const char *const *o = api->options; *o; o++)
        if (strlen(*o) == n && !strncmp(*o, k, n))
            return 1;
    return 0;
}

static int set_str(char **dst, const char *v, size_t n, struct wi_err *err)
{
    free(*dst);
    if (!(*dst = strndup(v, n)))
        return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    return 0;
}

/* v (vn bytes) as a number in lo..hi into *out. Returns 0, or -1 when it is not one. */
static int number(const char *v, size_t vn, double lo, double hi, double *out)
{
    char buf[32], *end;
    if (vn == 0 || vn >= sizeof buf)
        return -1;
    memcpy(buf, v, vn);
    buf[vn] = '\0';
    *out = strtod(buf, &end);
    return end == buf || *end || !(*out >= lo && *out <= hi) ? -1 : 0;
}

/* One key=value option (already allowed for the provider). */
static int option(struct wi_rc_endpoint *ep, const char *k, size_t kn, const char *v, size_t vn, struct wi_err *err)
{
    if ((kn == 7 && !strncmp(k, "account", 7)) || (kn == 8 && !strncmp(k, "merchant", 8)))
        return set_str(&ep->account, v, vn, err);
    if (kn == 4 && !strncmp(k, "hook", 4))
        return set_str(&ep->hook, v, vn, err);
    if (kn == 3 && !strncmp(k, "app", 3))
        return set_str(&ep->app, v, vn, err);
    if (kn == 4 && !strncmp(k, "mode", 4)) {
        const char *other = ep->api->sandbox_base ? "sandbox" : "test"; /* the provider's word */
        if (vn == 4 && !strncmp(v, "live", 4))
            ep->live = 1;
        else if (vn == strlen(other) && !strncmp(v, other, vn))
            ep->live = 0;
        else
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: mode must be live or %s", ep->name, other);
        return 0;
    }
    if (kn == 11 && !strncmp(k, "failed_only", 11)) {
        ep->failed_only = vn == 4 && !strncmp(v, "true", 4);
        if (!ep->failed_only && !(vn == 5 && !strncmp(v, "false", 5)))
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: failed_only must be true or false", ep->name);
        return 0;
    }
    if (kn == 4 && !strncmp(k, "rate", 4)) {
        if (number(v, vn, 0.01, 100, &ep->rate) < 0)
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: rate must be 0.01..100 requests per second", ep->name);
        return 0;
    }
    if (kn == 9 && !strncmp(k, "max_pages", 9)) {
        double n;
        if (number(v, vn, 1, 1000000, &n) < 0 || n != (long)n)
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: max_pages must be 1..1000000 pages", ep->name);
        ep->max_pages = (long)n;
        return 0;
    }
    if (kn == 8 && !strncmp(k, "deadline", 8)) {
        if (number(v, vn, 1, 86400, &ep->deadline_s) < 0)
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: deadline must be 1..86400 seconds", ep->name);
        return 0;
    }
    return wi_err_set(err, WI_ERR_ARG, "endpoint %s: unknown option", ep->name);
}

int wi_rc_endpoint_parse(const char *spec, struct wi_rc_endpoint *ep, struct wi_err *err)
{
    const char *eq = strchr(spec, '='), *colon, *p, *end;
    size_t nl;

    memset(ep, 0, sizeof *ep);
    ep->live = -1;
    ep->rate = 5;
    ep->max_pages = WI_RC_MAX_PAGES;
    ep->deadline_s = WI_RC_DEADLINE_S;
    nl = eq ? (size_t)(eq - spec) : 0;
    if (!eq || nl > 63) {
        wi_err_set(err, WI_ERR_ARG, "--endpoint: expected NAME=PROVIDER:SCOPE [key=value ...]");
        goto fail;
    }
    memcpy(ep->name, spec, nl);
    ep->name[nl] = '\0';
    if (!wi_dest_name_ok(ep->name)) { /* the same rule as destinations: it names env vars */
        wi_err_set(err, WI_ERR_ARG, "--endpoint: a name must match [a-z][a-z0-9_]{0,62}");
        goto fail;
    }
    colon = strchr(eq + 1, ':');
    end = eq + 1 + strcspn(eq + 1, " ");
    if (!colon || colon > end || !(ep->api = find_api(eq + 1, (size_t)(colon - eq - 1)))) {
        wi_err_set(err, WI_ERR_ARG, "endpoint %s: PROVIDER must be stripe, github, paddle or square, then :SCOPE",
                   ep->name);
        goto fail;
    }
    if (end - colon - 1 < 1 || end - colon - 1 > 255) {
        wi_err_set(err, WI_ERR_ARG, "endpoint %s: the scope must be 1..255 bytes without spaces", ep->name);
        goto fail;
    }
    if (set_str(&ep->scope, colon + 1, (size_t)(end - colon - 1), err) < 0)
        goto fail;
    for (p = end; *p;) {
        const char *k, *v, *tend;
        p += strspn(p, " ");
        if (!*p)
            break;
        k = p;
        tend = p + strcspn(p, " ");
        v = memchr(k, '=', (size_t)(tend - k));
        if (!v || !allowed(ep->api, k, (size_t)(v - k))) {
            wi_err_set(err, WI_ERR_ARG, "endpoint %s: unknown option %.*s (%s takes: see docs/operations.md)", ep->name,
                       (int)(v ? v - k : tend - k > 30 ? 30 : tend - k), k, ep->api->name);
            goto fail;
        }
        if (option(ep, k, (size_t)(v - k), v + 1, (size_t)(tend - v - 1), err) < 0)
            goto fail;
        p = tend;
    }
    return 0;
fail:
    wi_rc_endpoint_clear(ep);
    return -1;
}

void wi_rc_endpoint_clear(struct wi_rc_endpoint *ep)
{
    if (!ep)
        return;
    free(ep->scope);
    free(ep->account);
    free(ep->hook);
    free(ep->app);
    memset(ep, 0, sizeof *ep);
}

int wi_rc_endpoint_find(const struct wi_config *cfg, const char *name, struct wi_rc_endpoint *ep, struct wi_err *err)
{
    size_t n = strlen(name);
    for (int i = cfg->endpoints.n - 1; i >= 0; i--) { /* the last definition wins */
        const char *s = cfg->endpoints.v[i];
        if (!strncmp(s, name, n) && s[n] == '=')
            return wi_rc_endpoint_parse(s, ep, err);
    }
    return wi_err_set(err, WI_ERR_ARG, "no --endpoint %.63s=PROVIDER:SCOPE is defined", name);
}
