/* reconcile.c - one walk over a provider's list for one endpoint: its API key from the
 * environment, one request per 1/rate seconds, Retry-After honoured, 5xx and cut-off
 * answers retried, each page's rows and the cursor committed together. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "core/clock.h"
#include "core/log.h"
#include "pg/pgarray.h"
#include "pg/pgw.h"
#include "pg/schema.h"
#include "reconcile/jwt_sign.h"
#include "reconcile/reconcile_http.h"

#define DEFAULT_REACH_S (72 * 3600.0) /* a scheduled walk with no complete walk before it */
#define OVERLAP_S 60.0                /* a scheduled walk starts this long before the last one ended */
#define REQ_TIMEOUT_MS 30000L
#define MAX_WAITS 20                  /* Retry-After waits for one request before the walk stops */

static const struct wi_pg_stmt stmts[] = {
    {"wi_rc_lock", "SELECT pg_try_advisory_lock(" WI_RC_LOCK_CLASS ", hashtext($1::text))"},
    {"wi_rc_unlock", "SELECT pg_advisory_unlock(" WI_RC_LOCK_CLASS ", hashtext($1::text))"},
    {"wi_rc_begin", "BEGIN"},
    {"wi_rc_commit", "COMMIT"},
    {"wi_rc_rollback", "ROLLBACK"},
};

/* After the schema check (v10: the tables exist). */
static const struct wi_pg_stmt cursor_stmts[] = {
    {"wi_rc_load", "SELECT source_scope, extract(epoch FROM walk_since), extract(epoch FROM walk_until), walk_after,"
                   " extract(epoch FROM done_until) FROM webhook_inbox_reconcile_cursors WHERE endpoint = $1"},
    {"wi_rc_start", "INSERT INTO webhook_inbox_reconcile_cursors (endpoint, source_scope, walk_since, walk_until)"
                    " VALUES ($1, $2, to_timestamp($3::double precision), to_timestamp($4::double precision))"
                    " ON CONFLICT (endpoint) DO UPDATE SET source_scope = EXCLUDED.source_scope,"
                    " walk_since = EXCLUDED.walk_since, walk_until = EXCLUDED.walk_until, walk_after = NULL,"
                    " done_until = CASE WHEN webhook_inbox_reconcile_cursors.source_scope = EXCLUDED.source_scope"
                    "   THEN webhook_inbox_reconcile_cursors.done_until END,"
                    " last_error = NULL, updated_at = now()"},
    /* $2 NULL: the walk ended; SET reads the old walk_until */
    {"wi_rc_advance", "UPDATE webhook_inbox_reconcile_cursors SET walk_after = $2::text, recovered = recovered + $3::bigint,"
                      " done_until = CASE WHEN $2::text IS NULL THEN walk_until ELSE done_until END,"
                      " walk_since = CASE WHEN $2::text IS NULL THEN NULL ELSE walk_since END,"
                      " walk_until = CASE WHEN $2::text IS NULL THEN NULL ELSE walk_until END,"
                      " last_error = NULL, updated_at = now() WHERE endpoint = $1"},
    {"wi_rc_fail", "UPDATE webhook_inbox_reconcile_cursors SET last_error = $2, updated_at = now() WHERE endpoint = $1"},
    {"wi_rc_intent", "INSERT INTO webhook_inbox_redeliveries (source_scope, delivery_guid, requested_id)"
                     " VALUES ($1, $2, $3::bigint) ON CONFLICT (source_scope, delivery_guid)"
                     " DO UPDATE SET requested_id = EXCLUDED.requested_id, requested_at = now(), settled_at = NULL"},
    {"wi_rc_redelivered", "UPDATE webhook_inbox_redeliveries SET delivery_id = greatest(delivery_id, $3::bigint)"
                          " WHERE source_scope = $1 AND delivery_guid = $2"},
    {"wi_rc_mark", "SELECT webhook_inbox_reconcile_mark($1::text)"}, /* db/012 */
};

/* One walk's state. Invariant: key and hdr hold the credential (an App endpoint's JWT,
 * from signer); both wiped, and signer freed, when the walk ends. */
struct walk {
    const struct wi_rc_endpoint *ep;
    struct wi_rc_endpoint own;  /* ep after check() (the key's mode) */
    struct wi_pg *pg;
    struct wi_pg_stmt page;
    char key[512];
    struct wi_jwt_signer *signer; /* an App endpoint (api->jwt_iss): mints key; else NULL */
    char hdr[6][512];
    int nhdr;
    char base[256];
    double next_at;             /* the rate limit: no request before this (wi_clock_s) */
    atomic_int *stopping;
    struct wi_rc_counts *c;
};

static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

static int stopped(const struct walk *w)
{
    return w->stopping && atomic_load(w->stopping);
}

/* Sleeps s seconds in short slices; returns -1 early when stopping. */
static int nap(const struct walk *w, double s)
{
    double until = wi_clock_s() + s;
    while (wi_clock_s() < until) {
        double left = until - wi_clock_s();
        struct timespec ts = {0, (long)((left < 0.1 ? left : 0.1) * 1e9)};
        if (stopped(w))
            return -1;
        nanosleep(&ts, NULL);
    }
    return stopped(w) ? -1 : 0;
}

/* WEBHOOK_INBOX_<NAME><suffix> into env (128 bytes). */
static void env_name(const struct wi_rc_endpoint *ep, const char *suffix, char *env)
{
    size_t i, n = (size_t)snprintf(env, 128, "WEBHOOK_INBOX_");
    for (i = 0; ep->name[i] && n + 1 < 128; i++)
        env[n++] = (char)toupper((unsigned char)ep->name[i]);
    snprintf(env + n, 128 - n, "%s", suffix);
}

/* An App endpoint: a fresh JWT in key and hdr when the one there is near its exp (at the
 * walk's start and before each request: a walk can outlast one). 0 or -1 with *err. */
static int renew(struct walk *w, struct wi_err *err)
{
    int minted;
    const char *t;

    if (!w->signer)
        return 0;
    if (!(t = wi_jwt_signer_token(w->signer, (long long)time(NULL), &minted, err)))
        return -1;
    if (!minted)
        return 0;
    if (strlen(t) >= sizeof w->key)
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: the App's JWT is too long for a header (GitHub issues "
                          "2048-bit App keys)", w->ep->name);
    memcpy(w->key, t, strlen(t) + 1);
    if ((w->nhdr = w->ep->api->headers(&w->own, w->key, w->hdr, 6)) < 0)
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: the App's JWT is too long for a header", w->ep->name);
    log_debug("reconcile_app_jwt", "endpoint=%s valid_s=%d", w->ep->name, WI_JWT_LIFE_S);
    return 0;
}

/* An App endpoint's signer from WEBHOOK_INBOX_<NAME>_APP_PRIVATE_KEY (never quoted). */
static int app_signer(struct walk *w, const char *iss, struct wi_err *err)
{
    char env[128];
    const char *v;
    struct wi_err why;

    env_name(w->ep, "_APP_PRIVATE_KEY", env);
    if (!(v = getenv(env)) || !*v)
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: no App private key: set %s (PEM)", w->ep->name, env);
    if (!(w->signer = wi_jwt_signer_new(v, strlen(v), iss, &why)))
        return wi_err_set(err, why.code, "endpoint %s: %s: %s", w->ep->name, env, why.msg);
    return 0;
}

/* WEBHOOK_INBOX_<NAME>_API_KEY (or an App's JWT), and the base URL (the test override:
 * loopback only). */
static int credentials(struct walk *w, struct wi_err *err)
{
    char env[128];
    const char *v, *test, *iss = w->ep->api->jwt_iss ? w->ep->api->jwt_iss(w->ep) : NULL;
    size_t i;

    w->own = *w->ep;
    if (iss) {
        if (w->ep->api->check(&w->own, "", err) < 0 || app_signer(w, iss, err) < 0)
            return -1;
    } else {
        env_name(w->ep, "_API_KEY", env);
        v = getenv(env);
        if (!v || !*v)
            return wi_err_set(err, WI_ERR_ARG, "endpoint %s: no API key: set %s", w->ep->name, env);
        for (i = 0; v[i]; i++)
            if ((unsigned char)v[i] <= ' ' || v[i] == 0x7f || i >= sizeof w->key - 1)
                return wi_err_set(err, WI_ERR_ARG,
                                  "endpoint %s: %s holds spaces or control characters, or is too long", w->ep->name,
                                  env);
        memcpy(w->key, v, i + 1);
        if (w->ep->api->check(&w->own, w->key, err) < 0)
            return -1;
    }
    snprintf(w->base, sizeof w->base, "%s",
             w->own.live == 0 && w->ep->api->sandbox_base ? w->ep->api->sandbox_base : w->ep->api->base);
    if ((test = getenv(w->ep->api->test_base_env)) && *test) {
        if ((strncmp(test, "http://127.0.0.1:", 17) && strncmp(test, "http://localhost:", 17) &&
             strncmp(test, "http://[::1]:", 13)) || strlen(test) >= sizeof w->base || strchr(test, '?'))
            return wi_err_set(err, WI_ERR_ARG, "%s must be a loopback http:// URL: it points reconcile at a fake API "
                              "in tests, never elsewhere", w->ep->api->test_base_env);
        snprintf(w->base, sizeof w->base, "%s", test);
        log_warnx("reconcile_test_api", "endpoint=%s env=%s note=\"a test API, not the provider's\"", w->ep->name,
                  w->ep->api->test_base_env);
    }
    if (w->signer)
        return renew(w, err);
    if ((w->nhdr = w->ep->api->headers(&w->own, w->key, w->hdr, 6)) < 0)
        return wi_err_set(err, WI_ERR_ARG, "endpoint %s: the API key is too long", w->ep->name);
    return 0;
}

/* One request (body: a POST's JSON, or NULL) with the rate limit, Retry-After waits and
 * retries of 5xx or no answer.
 * Returns 0 with *res holding an answer that is neither (the caller checks its status),
 * or -1 with *err (res freed). */
static int call(struct walk *w, const char *method, const char *url, const char *body, struct wi_rc_res *res,
                struct wi_err *err)
{
    const char *h[6];
    struct wi_rc_req req = {.method = method, .url = url, .headers = h, .nheaders = w->nhdr,
                            .timeout_ms = REQ_TIMEOUT_MS, .stopping = w->stopping, .body = body};
    int tries = 0, waits = 0;

    for (int i = 0; i < 6; i++) /* the rows: renew() may rewrite them */
        h[i] = w->hdr[i];
    for (;;) {
        double wait = w->next_at - wi_clock_s();
        if (wait > 0 && nap(w, wait) < 0)
            return wi_err_set(err, WI_ERR_IO, "stopping");
        w->next_at = wi_clock_s() + 1.0 / w->own.rate;
        if (renew(w, err) < 0)
            return -1;
        req.nheaders = w->nhdr;
        if (wi_rc_http(&req, res, err) < 0)
            return -1;
        if (res->status == 429 || (res->status == 403 && res->retry_after_ms >= 0)) {
            double s = res->retry_after_ms >= 0 ? res->retry_after_ms / 1000.0 : pow(2, waits);
            wi_rc_res_free(res);
            if (s > WI_RC_MAX_WAIT_S || ++waits > MAX_WAITS)
                return wi_err_set(err, WI_ERR_IO, "rate limited (HTTP 429, Retry-After %.0fs): the next walk resumes "
                                  "at this page", s);
            log_info("reconcile_rate_limited", "endpoint=%s wait_s=%.3g", w->ep->name, s);
            w->c->waits++;
            if (nap(w, s) < 0)
                return wi_err_set(err, WI_ERR_IO, "stopping");
            continue;
        }
        if (res->status == 0 || res->status >= 500) {
            char why[160];
            snprintf(why, sizeof why, "%s", res->status ? "" : res->error);
            long st = res->status;
            wi_rc_res_free(res);
            if (stopped(w))
                return wi_err_set(err, WI_ERR_IO, "stopping");
            if (++tries >= WI_RC_TRIES)
                return wi_err_set(err, WI_ERR_IO, "the provider's API failed %d times (%s%ld%s)", tries,
                                  st ? "HTTP " : "", st, st ? "" : why);
            log_info("reconcile_retry", "endpoint=%s status=%ld error=%s", w->ep->name, st, WI_LOG_Q(why));
            if (nap(w, pow(2, tries - 1)) < 0)
                return wi_err_set(err, WI_ERR_IO, "stopping");
            continue;
        }
        if (res->status == 401 || res->status == 403) {
            long st = res->status;
            wi_rc_res_free(res);
            return wi_err_set(err, WI_ERR_ARG, "the provider refused the %s of endpoint %s (HTTP %ld)",
                              w->signer ? "App JWT (app=, its private key)" : "API key", w->ep->name, st);
        }
        return 0;
    }
}

static PGresult *exec(struct walk *w, const char *name, int n, const char *const *p, ExecStatusType st,
                      struct wi_err *err)
{
    return wi_pg_exec(w->pg, name, n, p, st, err);
}

/* Asks for the redeliveries the page statement listed ("id guid" lines); *n counts those
 * the provider accepted. */
static int redeliver(struct walk *w, const char *todo, long *n, struct wi_err *err)
{
    const char *p = todo;
    while (p && *p) {
        char id[32], guid[128], url[1024];
        size_t line = strcspn(p, "\n"), sp = strcspn(p, " ");
        struct wi_rc_res res;
        const char *params[3] = {w->own.scope, guid, id};

        if (sp >= line || sp >= sizeof id || line - sp - 1 >= sizeof guid || line - sp - 1 == 0)
            return wi_err_set(err, WI_ERR_ARG, "a delivery id or guid the page statement gave is malformed");
        memcpy(id, p, sp);
        id[sp] = '\0';
        memcpy(guid, p + sp + 1, line - sp - 1);
        guid[line - sp - 1] = '\0';
        p += line + (p[line] == '\n');
        if (w->ep->api->redeliver_url(&w->own, w->base, id, url, sizeof url) < 0)
            return wi_err_set(err, WI_ERR_ARG, "delivery id %.30s cannot be put in a URL", id);
        if (wi_pg_cmd(w->pg, "wi_rc_intent", 3, params, err) < 0) /* before: marks a redelivery that comes at once */
            return -1;
        if (call(w, "POST", url, NULL, &res, err) < 0)
            return -1;
        if (res.status >= 200 && res.status < 300) {
            if (wi_pg_cmd(w->pg, "wi_rc_redelivered", 3, params, err) < 0) {
                wi_rc_res_free(&res);
                return -1;
            }
            (*n)++;
            log_info("reconcile_redelivery", "endpoint=%s delivery_id=%s guid=%s", w->ep->name, id, WI_LOG_Q(guid));
        } else {
            w->c->skipped++;
            log_warnx("reconcile_redelivery_refused", "endpoint=%s delivery_id=%s status=%ld", w->ep->name, id,
                      res.status);
        }
        wi_rc_res_free(&res);
    }
    return 0;
}

/* The page statement's result, checked to be a list page's row (ncols columns), or NULL
 * with *err. */
static PGresult *run_statement(struct walk *w, int n, const char *const *params, int ncols, struct wi_err *err)
{
    PGresult *r = exec(w, w->page.name, n, params, PGRES_TUPLES_OK, err);

    if (r && (PQntuples(r) != 1 || PQnfields(r) < ncols || strcmp(PQgetvalue(r, 0, 0), "t"))) {
        PQclear(r);
        wi_err_set(err, WI_ERR_IO, "the provider's API answered 200 with something that is not a list page");
        return NULL;
    }
    return r;
}

/* Runs the page statement (params: room for page_nparams + 2). An insert page that lists ids
 * too long to store as they are runs again with their stored keys (reconcile.h); the rows
 * the first run inserted are added to *first (the second finds them there). Returns the
 * last run's result or NULL with *err. */
static PGresult *run_page(struct walk *w, const char **params, long *first, struct wi_err *err)
{
    int n = w->ep->api->page_nparams, insert = w->ep->api->mode == WI_RC_INSERT;
    struct wi_pgarray hex = {0}, stored = {0};
    PGresult *r;

    *first = 0;
    params[n] = params[n + 1] = NULL;
    if (!(r = run_statement(w, n + 2 * insert, params, 6 + insert, err)) || !insert || PQgetisnull(r, 0, 6))
        return r;
    if (wi_rc_stored_ids(PQgetvalue(r, 0, 6), &hex, &stored, err) < 0) {
        PQclear(r);
        r = NULL;
    } else if (!(params[n] = wi_pgarray_end(&hex)) || !(params[n + 1] = wi_pgarray_end(&stored))) {
        PQclear(r);
        r = NULL;
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    } else {
        *first = atol(PQgetvalue(r, 0, 2));
        PQclear(r);
        r = run_statement(w, n + 2, params, 7, err);
    }
    wi_pgarray_free(&hex);
    wi_pgarray_free(&stored);
    return r;
}

/* Reads one page and commits what it recovered with the cursor. Sets *next (malloc'd, NULL
 * when the walk ended). Returns 0 or -1 with *err. */
static int page(struct walk *w, double since, double until, const char *cursor, char **next, struct wi_err *err)
{
    char url[2048], body[2048], s_since[32], s_until[32], link[512], contains[256] = "{}", account[128] = "",
        rec[32];
    const char *params[9];
    struct wi_rc_res res;
    struct wi_err ignore;
    PGresult *r = NULL;
    int insert = w->ep->api->mode == WI_RC_INSERT, rc = -1;
    long recovered, first;

    *next = NULL;
    if (w->ep->api->page_url(&w->own, w->base, since, until, cursor, url, sizeof url) < 0)
        return wi_err_set(err, WI_ERR_ARG, "the cursor of endpoint %s cannot be put in a URL", w->ep->name);
    if (w->ep->api->page_body && w->ep->api->page_body(&w->own, since, until, cursor, body, sizeof body) < 0)
        return wi_err_set(err, WI_ERR_ARG, "the cursor of endpoint %s cannot be put in a request", w->ep->name);
    if (call(w, w->ep->api->page_body ? "POST" : "GET", url, w->ep->api->page_body ? body : NULL, &res, err) < 0)
        return -1;
    if (res.status != 200) {
        wi_err_set(err, WI_ERR_IO, "the provider's API answered HTTP %ld", res.status);
        wi_rc_res_free(&res);
        return -1;
    }
    link[0] = '\0';
    if (res.link_next[0] && wi_rc_query_param(res.link_next, "cursor", link, sizeof link) < 0)
        link[0] = '\0';
    snprintf(s_since, sizeof s_since, "%.0f", since);
    snprintf(s_until, sizeof s_until, "%.0f", until);
    if (w->ep->api->filters)
        w->ep->api->filters(&w->own, contains, sizeof contains, account, sizeof account);
    params[0] = res.body;
    params[1] = w->own.scope;
    params[2] = link[0] ? link : NULL;
    params[3] = s_since;
    params[4] = s_until;
    params[5] = contains;
    params[6] = account[0] ? account : NULL;
    if (insert && wi_pg_cmd(w->pg, "wi_rc_begin", 0, NULL, err) < 0)
        goto out;
    if (!(r = run_page(w, params, &first, err)))
        goto out;
    w->c->listed += atol(PQgetvalue(r, 0, 1));
    recovered = first + atol(PQgetvalue(r, 0, 2));
    w->c->skipped += atol(PQgetvalue(r, 0, 3));
    if (!PQgetisnull(r, 0, 4) && !(*next = strdup(PQgetvalue(r, 0, 4)))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (!insert && !PQgetisnull(r, 0, 5) && redeliver(w, PQgetvalue(r, 0, 5), &recovered, err) < 0)
        goto out;
    snprintf(rec, sizeof rec, "%ld", recovered);
    {
        const char *adv[3] = {w->ep->name, *next, rec};
        if (wi_pg_cmd(w->pg, "wi_rc_advance", 3, adv, err) < 0)
            goto out;
    }
    if (insert && wi_pg_cmd(w->pg, "wi_rc_commit", 0, NULL, err) < 0)
        goto out;
    w->c->recovered += recovered;
    w->c->pages++;
    log_debug("reconcile_page", "endpoint=%s listed=%s recovered=%ld more=%d", w->ep->name, PQgetvalue(r, 0, 1),
              recovered, *next != NULL);
    rc = 0;
out:
    if (rc < 0) {
        if (insert && wi_pg_ok(w->pg))
            (void)wi_pg_cmd(w->pg, "wi_rc_rollback", 0, NULL, &ignore);
        free(*next);
        *next = NULL;
    }
    PQclear(r);
    wi_rc_res_free(&res);
    return rc;
}

/* WI_RC_REDELIVER: marks the scope's rows that are redeliveries asked for (by this walk or
 * an earlier one) recovered; adds them to c->marked. Returns 0 or -1 with *err. */
static int mark(struct walk *w, struct wi_err *err)
{
    const char *p1[1] = {w->own.scope};
    PGresult *r;

    if (w->ep->api->mode != WI_RC_REDELIVER)
        return 0;
    if (!(r = exec(w, "wi_rc_mark", 1, p1, PGRES_TUPLES_OK, err)))
        return -1;
    if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        w->c->marked += atol(PQgetvalue(r, 0, 0));
    PQclear(r);
    return 0;
}

/* The walk's bounds, checked after each page: cursor (the next page's) must be none of the
 * last WI_RC_SEEN the walk asked with (seen, a ring it adds cursor to; the strings are its
 * own), the page count and the clock within ep's caps. Returns 0, or -1 with *err (the
 * cursor is saved: a cap's walk resumes next time). */
static int bounded(struct walk *w, char **seen, const char *cursor, double deadline, struct wi_err *err)
{
    for (int i = 0; i < WI_RC_SEEN; i++)
        if (seen[i] && !strcmp(seen[i], cursor)) {
            log_warnx("reconcile_loop", "endpoint=%s pages=%ld note=\"the API gave a cursor this walk already asked with: "
                      "a page that repeats; the walk stops\"", w->ep->name, w->c->pages);
            return wi_err_set(err, WI_RC_ERR_LOOP, "the provider's API repeated a page (a cursor it had given "
                              "before, after %ld pages): the walk stopped rather than ask again", w->c->pages);
        }
    free(seen[w->c->pages % WI_RC_SEEN]);
    seen[w->c->pages % WI_RC_SEEN] = strdup(cursor); /* NULL: out of memory; a loop is then seen later, or capped */
    if (w->c->pages >= w->ep->max_pages) {
        log_warnx("reconcile_capped", "endpoint=%s pages=%ld note=\"max_pages reached; the next walk resumes\"",
                  w->ep->name, w->c->pages);
        return wi_err_set(err, WI_ERR_IO, "stopped after max_pages=%ld pages: the next walk resumes", w->ep->max_pages);
    }
    if (wi_clock_s() >= deadline) {
        log_warnx("reconcile_deadline", "endpoint=%s pages=%ld deadline_s=%.0f note=\"the next walk resumes\"",
                  w->ep->name, w->c->pages, w->ep->deadline_s);
        return wi_err_set(err, WI_ERR_IO, "stopped at its deadline (deadline=%.0fs, %ld pages): the next walk resumes",
                          w->ep->deadline_s, w->c->pages);
    }
    return 0;
}

/* Where this walk starts: the one in progress, or a new one. Returns 0 or -1. */
static int begin_walk(struct walk *w, double since_s, double *since, double *until, char **cursor, struct wi_err *err)
{
    const char *p1[1] = {w->ep->name};
    char s[32], u[32];
    double now = (double)time(NULL), done = -1;
    PGresult *r = exec(w, "wi_rc_load", 1, p1, PGRES_TUPLES_OK, err);

    *cursor = NULL;
    if (!r)
        return -1;
    if (PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), w->own.scope)) {
        double ws = PQgetisnull(r, 0, 1) ? -1 : atof(PQgetvalue(r, 0, 1));
        done = PQgetisnull(r, 0, 4) ? -1 : atof(PQgetvalue(r, 0, 4));
        if (ws >= 0 && (since_s < 0 || ws <= now - since_s + 1)) { /* it covers what is asked: resume it */
            *since = ws;
            *until = atof(PQgetvalue(r, 0, 2));
            if (!PQgetisnull(r, 0, 3) && !(*cursor = strdup(PQgetvalue(r, 0, 3)))) {
                PQclear(r);
                return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
            }
            w->c->resumed = 1;
            PQclear(r);
            return 0;
        }
    }
    PQclear(r);
    *until = floor(now - WI_RC_GRACE_S);
    if (since_s > 0)
        *since = floor(now - since_s);
    else
        *since = done >= 0 ? done - OVERLAP_S : floor(now - (since_s < 0 ? -since_s : DEFAULT_REACH_S));
    if (w->ep->api->max_age_s > 0 && *since < ceil(now - w->ep->api->max_age_s) + OVERLAP_S)
        *since = ceil(now - w->ep->api->max_age_s) + OVERLAP_S; /* older is not listed (or refused) */
    snprintf(s, sizeof s, "%.0f", *since);
    snprintf(u, sizeof u, "%.0f", *until);
    {
        const char *p4[4] = {w->ep->name, w->own.scope, s, u};
        return wi_pg_cmd(w->pg, "wi_rc_start", 4, p4, err);
    }
}

int wi_reconcile(const char *conninfo, const struct wi_rc_endpoint *ep, double since_s, atomic_int *stopping,
                 struct wi_rc_counts *c, struct wi_err *err)
{
    struct walk w;
    const char *p1[1] = {ep->name};
    struct wi_err ignore;
    PGresult *r;
    char page_name[64], *cursor = NULL, *next = NULL, *seen[WI_RC_SEEN] = {0};
    double since = 0, until = 0, deadline = wi_clock_s() + ep->deadline_s;
    int rc = -1, locked = 0;

    memset(c, 0, sizeof *c);
    memset(&w, 0, sizeof w);
    w.ep = ep;
    w.c = c;
    w.stopping = stopping;
    snprintf(page_name, sizeof page_name, "wi_rc_page_%s", ep->api->name);
    w.page.name = page_name;
    w.page.sql = ep->api->page_sql;
    if (credentials(&w, err) < 0)
        goto out;
    if (!(w.pg = wi_pg_connect(conninfo, stmts, (int)(sizeof stmts / sizeof *stmts), err)))
        goto out;
    if (wi_pg_prepare(w.pg, wi_schema_stmts, wi_schema_stmts_count, err) < 0 || wi_schema_require(w.pg, err) < 0 ||
        wi_pg_prepare(w.pg, cursor_stmts, (int)(sizeof cursor_stmts / sizeof *cursor_stmts), err) < 0 ||
        wi_pg_prepare(w.pg, &w.page, 1, err) < 0)
        goto out;
    if (!(r = exec(&w, "wi_rc_lock", 1, p1, PGRES_TUPLES_OK, err)))
        goto out;
    locked = PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    if (!locked) {
        rc = 0;
        goto out;
    }
    if (mark(&w, err) < 0 || begin_walk(&w, since_s, &since, &until, &cursor, err) < 0)
        goto out;
    if (cursor && !(seen[0] = strdup(cursor))) { /* a resumed walk: its cursor was asked with */
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        goto out;
    }
    while (since < until) {
        if (stopped(&w)) {
            wi_err_set(err, WI_ERR_IO, "stopping");
            goto out;
        }
        if (page(&w, since, until, cursor, &next, err) < 0)
            goto out;
        free(cursor);
        cursor = next;
        next = NULL;
        if (!cursor)
            break;
        if (bounded(&w, seen, cursor, deadline, err) < 0)
            goto out;
    }
    if (since >= until) { /* an empty window: nothing to list, the walk is over */
        const char *adv[3] = {ep->name, NULL, "0"};
        if (wi_pg_cmd(w.pg, "wi_rc_advance", 3, adv, err) < 0)
            goto out;
    }
    if (mark(&w, err) < 0) /* what arrived while the walk asked (GitHub redelivers within seconds) */
        goto out;
    c->complete = 1;
    rc = 1;
out:
    if (rc < 0 && w.pg && wi_pg_ok(w.pg) && locked) {
        const char *pf[2] = {ep->name, err->msg};
        (void)wi_pg_cmd(w.pg, "wi_rc_fail", 2, pf, &ignore);
    }
    if (locked && w.pg && wi_pg_ok(w.pg))
        PQclear(exec(&w, "wi_rc_unlock", 1, p1, PGRES_TUPLES_OK, &ignore));
    free(cursor);
    for (int i = 0; i < WI_RC_SEEN; i++)
        free(seen[i]);
    wi_pg_free(w.pg);
    wi_jwt_signer_free(w.signer);
    wipe(w.key, sizeof w.key);
    wipe(w.hdr, sizeof w.hdr);
    return rc;
}
