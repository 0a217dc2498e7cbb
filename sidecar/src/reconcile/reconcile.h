/* reconcile.h - recovery from providers' APIs: endpoints (`--endpoint NAME=PROVIDER:SCOPE
 * [key=value ...]`), one provider API shape per file (reconcile_<provider>.c), and the walk
 * over a provider's pages that inserts what the inbox lacks (or asks for a redelivery),
 * resumable through webhook_inbox_reconcile_cursors (db/010_reconcile.sql). */
#ifndef WI_RECONCILE_H
#define WI_RECONCILE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include "core/config.h"
#include "event_id.h"
#include "wi_err.h"

#define WI_RC_SCHEMA 12              /* db/010: cursors, recovered_at; db/012: webhook_inbox_reconcile_mark */
#define WI_RC_GRACE_S 300            /* events younger than this are left to their delivery */
#define WI_RC_MAX_WAIT_S 60          /* a longer Retry-After stops the walk (resumed next run) */
#define WI_RC_TRIES 4                /* answers 5xx / none, per page, before the walk stops */
#define WI_RC_LOCK_CLASS "73105820"  /* pg_try_advisory_lock(class, hashtext(endpoint)) */
#define WI_RC_MAX_PAGES 10000        /* pages one walk reads at most (max_pages=N); the next resumes */
#define WI_RC_DEADLINE_S 3600        /* seconds one walk runs at most (deadline=S); the next resumes */
#define WI_RC_SEEN 16                /* the last cursors a walk remembers: one given again is a loop */
#define WI_RC_ERR_LOOP 40            /* wi_err code: the API gave a cursor the walk had asked with */

struct wi_rc_endpoint;
struct wi_rc_res;

/* What a walk does with a page. */
enum { WI_RC_INSERT = 0,   /* the page holds the events: insert what the inbox lacks */
       WI_RC_REDELIVER = 1 /* the page lists deliveries: ask the provider to redeliver the failed */ };

/* One provider's API shape. The page statement takes $1 the page (jsonb), $2 the scope,
 * $3 the Link header's next cursor (or NULL), $4/$5 the walk's since/until (unix seconds)
 * and, with page_nparams 7, $6 a jsonb every event must contain and $7 text[] keys it must
 * not have; it returns one row: shape_ok boolean, listed, recovered, skipped (bigint), the
 * next page's cursor (NULL: the walk ends), and for WI_RC_REDELIVER "id guid" lines to
 * redeliver. A WI_RC_INSERT statement stores each event under the key the receiver gives
 * its id (event_id.h): it takes two more parameters, text[] the hex of the UTF-8 bytes of
 * ids longer than WI_EVENT_ID_MAX and text[] their stored keys (NULL, NULL at first), and
 * returns a seventh column: the hex of each such id it was not given, comma-separated
 * (NULL: none; those are skipped, the others inserted) - the walk then runs it again with
 * their keys (wi_rc_stored_ids), in the page's transaction. */
struct wi_rc_api {
    const char *name;              /* the PROVIDER of --endpoint */
    const char *base;              /* https://... (no trailing '/') */
    const char *sandbox_base;      /* the base for mode=sandbox (live 0); NULL: one base, mode=test */
    double max_age_s;              /* the oldest the provider lists (a walk starts no earlier); 0: any */
    const char *test_base_env;     /* env var naming a loopback base URL instead: specs only */
    const char *const *options;    /* the key=value options it takes, NULL-terminated */
    int mode;                      /* WI_RC_INSERT or WI_RC_REDELIVER */
    const char *page_sql;
    int page_nparams;
    /* Checks the options and the key (never quoting it). Returns 0 or -1 with *err. */
    int (*check)(struct wi_rc_endpoint *ep, const char *key, struct wi_err *err);
    /* The page's URL from base, the walk and the cursor (NULL: the first page). 0 or -1. */
    int (*page_url)(const struct wi_rc_endpoint *ep, const char *base, double since, double until, const char *cursor,
                    char *url, size_t n);
    /* NULL: pages are GETs. Else pages are POSTs of this JSON body (the walk and the cursor
     * in it, never the key). 0, or -1 when the cursor cannot be put in it or it does not fit. */
    int (*page_body)(const struct wi_rc_endpoint *ep, double since, double until, const char *cursor, char *body,
                     size_t n);
    /* A redelivery call's URL for delivery id (WI_RC_REDELIVER only). 0 or -1. */
    int (*redeliver_url)(const struct wi_rc_endpoint *ep, const char *base, const char *id, char *url, size_t n);
    /* Fills headers[0..) (Authorization from key) and returns how many, at most 6; -1 when
     * a line does not fit. Each line is n bytes. */
    int (*headers)(const struct wi_rc_endpoint *ep, const char *key, char (*lines)[512], int n);
    /* $6 and $7 of the page statement (page_nparams 7), as text. */
    void (*filters)(const struct wi_rc_endpoint *ep, char *contains, size_t cn, char *absent, size_t an);
    /* NULL, or NULL for ep: the key is WEBHOOK_INBOX_<NAME>_API_KEY. Else ep authenticates
     * with an RS256 JWT of this issuer (jwt_sign.h) from the PEM private key in
     * WEBHOOK_INBOX_<NAME>_APP_PRIVATE_KEY, minted anew before it expires; headers() gets it as
     * key, check() an empty key. */
    const char *(*jwt_iss)(const struct wi_rc_endpoint *ep);
};

extern const struct wi_rc_api wi_rc_stripe, wi_rc_github, wi_rc_paddle, wi_rc_square;

/* "Authorization: Bearer KEY" into lines[0], then each of extra (NULL-terminated) as is.
 * Returns the number of lines, or -1 when more than n or one does not fit in 512 bytes. */
int wi_rc_bearer(const char *key, const char *const *extra, char (*lines)[512], int n);

/* SQL for a WI_RC_INSERT page statement over items (an event e and its key sid): sid, the
 * key event e's id (JSON string field F) is stored under - as it is, or, longer than
 * WI_EVENT_ID_MAX bytes, the key the walk gave for its hex in the text[] parameters HEX and
 * KEYS ("$8", "$9"; NULL until given); and the seventh column, the hex of each such id not
 * given one. */
#define WI_RC_SID_SQL(f, hex, keys)                                                                        \
    "CASE WHEN octet_length(e->>'" f "') > " WI_EVENT_ID_MAX_TEXT " THEN (" keys "::text[])[array_position(" \
    hex "::text[], encode(convert_to(e->>'" f "', 'UTF8'), 'hex'))] ELSE e->>'" f "' END"
#define WI_RC_UNKEYED_SQL(f)                                                                               \
    "(SELECT string_agg(encode(convert_to(e->>'" f "', 'UTF8'), 'hex'), ',') FROM items"                   \
    " WHERE jsonb_typeof(e->'" f "') = 'string' AND octet_length(e->>'" f "') > " WI_EVENT_ID_MAX_TEXT    \
    " AND sid IS NULL)"

struct wi_pgarray;
/* For the page statement's second run: each id of hexlist ("hex,hex", the hex of an id's
 * UTF-8 bytes) into hex as it is, and its stored key (event_id.h) into stored, in order.
 * Returns how many, or -1 with *err (not hex, out of memory). */
int wi_rc_stored_ids(const char *hexlist, struct wi_pgarray *hex, struct wi_pgarray *stored, struct wi_err *err);

/* 1 when s is 1..max bytes of [A-Za-z0-9_] (a provider's id, safe in a URL or JSON). */
int wi_rc_id_ok(const char *s, size_t max);

/* Invariant after wi_rc_endpoint_parse(): name matches [a-z][a-z0-9_]{0,62}, api is set,
 * scope is 1..255 bytes; strings heap-owned. live: -1 until check() sets it from the key. */
struct wi_rc_endpoint {
    char name[64];
    const struct wi_rc_api *api;
    char *scope;
    char *account;      /* stripe: a Connect account (acct_...), sent as Stripe-Account; square: merchant= */
    int live;           /* mode=live (1), test or sandbox (0); a key that tells its mode must agree */
    int failed_only;    /* stripe: failed_only=true lists delivery_success=false only */
    char *hook;         /* github: repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID */
    char *app;          /* github: app=APP_ID instead: the App's own webhook (app/hook), a JWT as key */
    double rate;        /* requests per second at most (rate=N, default 5) */
    long max_pages;     /* pages per walk at most (max_pages=N, default WI_RC_MAX_PAGES) */
    double deadline_s;  /* seconds per walk at most (deadline=S, default WI_RC_DEADLINE_S) */
};

/* Parses "NAME=PROVIDER:SCOPE [key=value ...]" into *ep. Returns 0, or -1 with *err (ep is
 * then cleared). Borrows spec. */
int wi_rc_endpoint_parse(const char *spec, struct wi_rc_endpoint *ep, struct wi_err *err);

/* Frees ep's strings; accepts NULL. */
void wi_rc_endpoint_clear(struct wi_rc_endpoint *ep);

/* Finds endpoint name among cfg's --endpoint definitions and parses it into *ep. Returns 0,
 * or -1 with *err (none by that name, or a bad definition). */
int wi_rc_endpoint_find(const struct wi_config *cfg, const char *name, struct wi_rc_endpoint *ep, struct wi_err *err);

/* What one walk did. */
struct wi_rc_counts {
    long pages;       /* pages read (and committed) */
    long listed;      /* events or deliveries the provider listed */
    long recovered;   /* inserted (WI_RC_INSERT) or redeliveries asked for (WI_RC_REDELIVER) */
    long skipped;     /* listed but outside the scope, the window, or malformed */
    long waits;       /* Retry-After waits honoured */
    long marked;      /* WI_RC_REDELIVER: stored redeliveries marked recovered_at (db/012) */
    int resumed;      /* the walk continued one stopped before */
    int complete;     /* the walk reached its end */
};

/* One walk for ep: resumes the endpoint's walk in progress when it covers since_s (seconds
 * back from now; <= 0: from where the last complete walk ended, else up to 72h back), else
 * starts one; under pg_try_advisory_lock so one sidecar walks an endpoint at a time.
 * Returns 1 (the walk ended, or stopped with the cursor saved: see c->complete), 0 when
 * another session holds the endpoint's lock, -1 with *err (a failed query, refused
 * credentials, a Retry-After beyond WI_RC_MAX_WAIT_S, answers that kept failing, ep's page
 * cap or deadline reached: the cursor is kept, and the next walk resumes there; or, with
 * err->code WI_RC_ERR_LOOP, the API gave a cursor the walk had already asked with - a page
 * that repeats - so the walk stops rather than ask for it again, lock released).
 * stopping: set to stop after the page in flight. */
int wi_reconcile(const char *conninfo, const struct wi_rc_endpoint *ep, double since_s, atomic_int *stopping,
                 struct wi_rc_counts *c, struct wi_err *err);

/* `reconcile --endpoint NAME [--since 72h]`: one walk for each endpoint named (a bare
 * --endpoint NAME), one line each on out, problems on errout. Returns the exit code: 0 every
 * walk ended, 1 one stopped (run it again: it resumes) or another sidecar holds its lock,
 * 2 a usage or configuration error, 3 the provider's API repeated a page (WI_RC_ERR_LOOP:
 * running again does not help). */
int wi_rc_command(const struct wi_config *cfg, FILE *out, FILE *errout);

/* `run --reconcile NAME=INTERVAL ...`: a thread walking each named endpoint every interval
 * (first after 5s). Returns NULL with *err for a bad entry or when no thread could start. */
struct wi_rc_sched;
struct wi_rc_sched *wi_rc_sched_start(const struct wi_config *cfg, struct wi_err *err);
/* Stops after the page in flight and frees; accepts NULL. */
void wi_rc_sched_stop(struct wi_rc_sched *s);

#endif
