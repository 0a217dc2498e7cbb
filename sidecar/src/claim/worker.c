/* worker.c - one worker connection: the schema check on every (re)connect, the
 * claim/dispatch/commit loop, wake-ups handed over by the process's listener (wake.h) with a
 * polling fallback, reconnection with backoff (a lost connection never ends the
 * loop), and careful mode: one event per transaction after a connection died under a batch. */
#define _POSIX_C_SOURCE 200809L
#include "claim/worker.h"
#include "core/clock.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "citus/citus.h"
#include "claim/claim.h"
#include "claim/dispatch.h"
#include "claim/handle_spans.h"
#include "claim/retry.h"
#include "core/log.h"
#include "observability/metrics.h"
#include "observability/otlp.h"
#include "pg/pgw.h"
#include "pg/schema.h"

/* Statements that name no inbox object: prepared at connect, before the schema check. */
static const struct wi_pg_stmt tx_stmts[] = {
    {"wi_begin", "BEGIN"},
    {"wi_commit", "COMMIT"},
    {"wi_rollback", "ROLLBACK"},
    {"wi_savepoint", "SAVEPOINT wi_event"},
    {"wi_release", "RELEASE SAVEPOINT wi_event"},
    {"wi_rollback_to", "ROLLBACK TO SAVEPOINT wi_event"},
    {"wi_lock_timeout", "SELECT set_config('lock_timeout', $1, false)"},
};

/* A refused schema is looked at again this often (a deploy's migration unblocks the worker
 * without a restart); its error line is logged at most once per SCHEMA_LOG_EVERY_S. */
#define SCHEMA_RETRY_S 3.0
#define SCHEMA_LOG_EVERY_S 60.0

/* After a batch refused because a route's handler is missing on the node that ran it (WIH01,
 * from function bodies the first v29 gem applied), the worker looks again this long after;
 * nothing is charged. */
#define HANDLER_MISSING_RETRY_S 1.0

/* The warning about one unrouted event type is logged at most this often. */
#define UNROUTED_LOG_EVERY_S 60.0

/* The detail of a 'waiting' event whose route's handler is missing on the node that ran it
 * (webhook_inbox_run_event, v29), followed by "<function> (<node>)"; its error line is logged at
 * most once per HANDLER_MISSING_LOG_EVERY_S per function and node. */
#define HANDLER_MISSING_DETAIL "handler missing on this node: "
#define HANDLER_MISSING_LOG_EVERY_S 60.0

/* The reconnect delay (wi_retry_backoff) grows per consecutive failure (lost connection or
 * failed connect) and is reset to the floor only by a transaction that went through - never
 * by a mere connect, so a handler that kills its backend cannot make the worker hammer the
 * server. */

/* Reason recorded for an event whose handler was running when the connection died. */
#define LOST_REASON "08006: connection lost while the handler ran (backend crash or termination)"

/* The per-batch view of the reloadable settings. */
struct snap {
    int batch_size, log_events;
    double poll_interval, batch_linger;
    struct wi_policy policy; /* what the dispatch statements do with failed and unrouted events */
};

static long long ms(double seconds)
{
    return (long long)llround(seconds * 1000);
}

static void take_snap(struct wi_runtime *rt, struct snap *s)
{
    pthread_mutex_lock(&rt->lock);
    s->batch_size = rt->cfg.batch_size;
    s->log_events = rt->cfg.log_events;
    s->poll_interval = rt->cfg.poll_interval;
    s->batch_linger = rt->cfg.batch_linger;
    s->policy.unrouted = wi_config_unrouted_name(rt->cfg.unrouted);
    s->policy.max_attempts = rt->cfg.max_attempts;
    s->policy.backoff_base_ms = ms(rt->cfg.backoff_base);
    s->policy.backoff_cap_ms = ms(rt->cfg.backoff_cap);
    s->policy.unrouted_delay_ms = ms(rt->cfg.unrouted_delay);
    pthread_mutex_unlock(&rt->lock);
}

/* 1 if detail is "SQLSTATE: server message" (a transient error). Such messages can quote
 * payload values ("invalid input syntax for type integer: ..."), so only the code is logged;
 * the whole text stays in webhook_inbox.last_error. Handler outcomes and quarantine reasons
 * are the handler author's own words and are logged as they are. */
static int is_server_error(const char *detail)
{
    int i;
    for (i = 0; i < 5; i++)
        if (!detail || !((detail[i] >= '0' && detail[i] <= '9') || (detail[i] >= 'A' && detail[i] <= 'Z')))
            return 0;
    return detail[5] == ':';
}

static void log_event(const struct wi_worker *w, const struct wi_event *e, const char *outcome, int attempts,
                      const char *extra)
{
    char id[160], scope[160], type[160], detail[240], code[6];
    const char *shown = e->detail;

    if (is_server_error(e->detail)) {
        memcpy(code, e->detail, 5);
        code[5] = '\0';
        shown = code;
    }
    log_info("event", "worker=%d event_id=%s scope=%s type=%s outcome=%s attempts=%d latency_ms=%.1f detail=%s%s",
             w->id, wi_log_quote(id, sizeof id, e->event_id, 120), wi_log_quote(scope, sizeof scope, e->scope, 120),
             wi_log_quote(type, sizeof type, e->event_type, 120), outcome, attempts, e->latency_ms,
             wi_log_quote(detail, sizeof detail, shown, 160), extra ? extra : "");
}

/* A rate-limited warning per unrouted event type (its name, never the payload). */
static void warn_unrouted(const struct wi_worker *w, const struct wi_event *e)
{
    char key[160], type[160];

    snprintf(key, sizeof key, "unrouted\037%s", e->event_type);
    if (!wi_log_every(key, UNROUTED_LOG_EVERY_S))
        return;
    log_warnx("unrouted_event", "worker=%d type=%s retry_in_s=%.0f note=\"no route for this event type: its events stay "
              "pending, uncharged; add a route, or route the type to webhook_inbox_ignore to ignore it\"",
              w->id, wi_log_quote(type, sizeof type, e->event_type, 120), (double)e->retry_in_ms / 1000);
}

/* A rate-limited error per routed handler missing on the node that ran it (the function's,
 * the node's and the type's names, never the payload). */
static void warn_missing(const struct wi_worker *w, const struct wi_event *e, const char *handler)
{
    char key[200], fn[160], type[160];

    snprintf(key, sizeof key, "handler_missing\037%s", handler);
    if (!wi_log_every(key, HANDLER_MISSING_LOG_EVERY_S))
        return;
    log_errorx("handler_missing", "worker=%d handler=%s type=%s retry_in_s=%.0f note=\"the route's handler does not "
               "exist on that node: its events wait, uncharged, the others run; create the function there\"",
               w->id, wi_log_quote(fn, sizeof fn, handler, 120), wi_log_quote(type, sizeof type, e->event_type, 120),
               (double)e->retry_in_ms / 1000);
}

/* Counts and logs one event whose result is durable (its transaction committed); batch_s is
 * the worker's time for that transaction (0 when unknown: an event charged on its own). */
static void report_event(const struct wi_worker *w, const struct wi_event *e, const struct snap *s, double batch_s)
{
    char extra[64];

    wi_metrics_event(e->event_type, e->result, e->latency_ms / 1000 + batch_s);

    if (!strcmp(e->result, "done")) {
        wi_metrics_add(WI_M_DONE, 1);
        if (s->log_events)
            log_event(w, e, "done", e->attempts, NULL);
    } else if (!strcmp(e->result, "quarantined")) {
        wi_metrics_add(WI_M_QUARANTINED, 1);
        if (s->log_events)
            log_event(w, e, "quarantined", e->attempts + e->charged, e->charged ? " reason=max_attempts" : NULL);
    } else if (!strcmp(e->result, "retry")) {
        wi_metrics_add(WI_M_RETRY, 1);
        snprintf(extra, sizeof extra, " retry_in_ms=%lld", e->retry_in_ms);
        if (s->log_events)
            log_event(w, e, "retry", e->attempts + e->charged, extra);
    } else if (!strcmp(e->result, "paused") || !strcmp(e->result, "throttled")) { /* db/015: pending, uncharged */
        int paused = e->result[0] == 'p';
        wi_metrics_add(paused ? WI_M_PAUSED : WI_M_THROTTLED, 1);
        snprintf(extra, sizeof extra, " retry_in_ms=%lld", e->retry_in_ms);
        if (s->log_events)
            log_event(w, e, e->result, e->attempts, paused ? NULL : extra);
    } else if (!strcmp(e->result, "waiting")) {
        wi_metrics_add(WI_M_WAITING, 1);
        snprintf(extra, sizeof extra, " retry_in_ms=%lld", e->retry_in_ms);
        if (s->log_events)
            log_event(w, e, "waiting", e->attempts, extra);
        if (e->detail && !strncmp(e->detail, HANDLER_MISSING_DETAIL, strlen(HANDLER_MISSING_DETAIL)))
            warn_missing(w, e, e->detail + strlen(HANDLER_MISSING_DETAIL));
        else
            warn_unrouted(w, e);
    }
}

/* After COMMIT: business work and every event's new state are durable together. t0 is when
 * the transaction began (wi_clock_s()). With --otlp-endpoint, the events' handle spans (one
 * query on pg, outside the transaction). */
static void report(struct wi_worker *w, struct wi_pg *pg, const struct wi_batch *b, const struct snap *s, double t0)
{
    double took = wi_clock_s() - t0;
    int i;

    wi_metrics_add(WI_M_BATCHES, 1);
    wi_metrics_batch(b->n, took);
    for (i = 0; i < b->n; i++)
        report_event(w, &b->ev[i], s, took);
    if (wi_otlp_on()) {
        long long end_ns = wi_otlp_now_ns();
        wi_handle_spans(pg, b, end_ns - (long long)(took * 1e9), end_ns);
    }
}

/* Charges e one transient failure in a transaction of its own, when the transaction that ran
 * its handler could not record it (the connection died under it, or its COMMIT failed), and
 * logs it. Another worker may have run (and charged) the event meanwhile: the charge then
 * applies to nothing. */
static void charge_alone(const struct wi_worker *w, struct wi_pg *pg, struct wi_event *e, const char *error,
                         const struct snap *s)
{
    struct wi_err err;

    if (wi_retry_charge(pg, e, error, &s->policy, &err) < 0) {
        log_warnx("charge_failed", "worker=%d error=%s", w->id, WI_LOG_Q(err.msg));
        return;
    }
    report_event(w, e, s, 0);
}

/* Fast path: one statement claims and dispatches the whole batch, sent with BEGIN and COMMIT
 * in one pipeline (a lost COMMIT reply is a lost connection: the row is then either done,
 * or pending again and re-claimed, never both). Returns events
 * handled, 0 when nothing was due, -1 when the connection is lost, -2 when the statement
 * failed (rolled back; the caller redoes the batch one statement per event), -5 when it
 * refused because a route's handler is missing on its node (rolled back, nothing charged). */
static int run_batch_fused(struct wi_worker *w, struct wi_pg *pg, const struct snap *s, struct wi_batch *b)
{
    struct wi_err err;
    double t0 = wi_clock_s();
    int n;

    /* BEGIN, claim+dispatch, COMMIT: one round trip (pipelined); on Citus one statement, its
     * own transaction on the node of the shard it names (citus.h). */
    if ((n = w->shards.n > 0 ? wi_citus_dispatch(pg, &w->shards, w->id, s->batch_size, &s->policy, b, &err)
                             : wi_dispatch_batch_tx(pg, s->batch_size, &s->policy, b, &err)) >= 0) {
        if (n > 0)
            report(w, pg, b, s, t0);
        return n;
    }
    if (!wi_pg_ok(pg)) {
        log_warnx("connection_lost", "worker=%d in=transaction error=%s", w->id, WI_LOG_Q(err.msg));
        return -1;
    }
    if (wi_dispatch_handler_missing(&err)) { /* no event's fault: no redo, nothing charged */
        if (w->shards.n == 0) /* citus.c logged its shards' refusals */
            wi_dispatch_log_missing(w->id, &err);
        return -5;
    }
    log_warnx("batch_failed", "worker=%d error=%s note=\"redoing the batch one event per statement\"", w->id, WI_LOG_Q(err.msg));
    wi_batch_free(b);
    return -2;
}

/* Frees e's strings and zeroes it; accepts an empty event. */
static void event_clear(struct wi_event *e)
{
    free(e->scope);
    free(e->event_id);
    free(e->event_type);
    free(e->detail);
    memset(e, 0, sizeof *e);
}

/* Moves the event whose handler (or whose one-event COMMIT) was running when the connection
 * died into *lost, with the reason to record once reconnected. Not when the server said
 * 57P02 (another backend crashed: this handler is not the culprit, the event stays pending
 * uncharged). Takes ownership of e's strings; e is left empty. */
static void keep_lost(const struct wi_worker *w, struct wi_pg *pg, struct wi_event *e, const struct wi_err *err,
                      struct wi_event *lost)
{
    char id[160], scope[160], why[WI_ERR_MSG_MAX + sizeof LOST_REASON + 4];

    /* libpq keeps the SQLSTATE of a FATAL only on some paths; the message is the fallback. */
    if (!strcmp(wi_pg_last_sqlstate(pg), "57P02") || strstr(err->msg, "57P02") ||
        strstr(err->msg, "crash of another server process")) {
        log_warnx("connection_lost_event", "worker=%d event_id=%s scope=%s charge=no note=\"another backend crashed\"",
                  w->id, wi_log_quote(id, sizeof id, e->event_id, 120), wi_log_quote(scope, sizeof scope, e->scope, 120));
        return;
    }
    event_clear(lost);
    *lost = *e;
    memset(e, 0, sizeof *e);
    snprintf(why, sizeof why, "%s: %s", LOST_REASON, err->msg);
    lost->detail = strdup(why);
    log_warnx("connection_lost_event", "worker=%d event_id=%s scope=%s charge=yes", w->id,
              wi_log_quote(id, sizeof id, lost->event_id, 120), wi_log_quote(scope, sizeof scope, lost->scope, 120));
}

/* Dispatches e inside the open transaction, within a savepoint of its own: when the dispatch
 * statement itself fails (statement_timeout: query_canceled is not caught by the handler's
 * savepoint in SQL), the savepoint is rolled back and e is charged one attempt in this same
 * transaction, which still holds its row lock: no other worker can run it before the charge
 * is committed. Returns 0, or -1 with *err (the transaction must be rolled back). */
static int dispatch_one(const struct wi_worker *w, struct wi_pg *pg, struct wi_event *e, const struct snap *s,
                        struct wi_err *err)
{
    struct wi_err derr;

    if (wi_pg_cmd(pg, "wi_savepoint", 0, NULL, err) < 0)
        return -1;
    if (wi_dispatch(pg, e, &s->policy, &derr) == 0)
        return wi_pg_cmd(pg, "wi_release", 0, NULL, err);
    if (!wi_pg_ok(pg) || wi_dispatch_handler_missing(&derr)) { /* the latter: no event's fault, nothing to charge */
        *err = derr;
        return -1;
    }
    log_warnx("dispatch_failed", "worker=%d error=%s", w->id, WI_LOG_Q(derr.msg));
    if (wi_pg_cmd(pg, "wi_rollback_to", 0, NULL, err) < 0)
        return -1;
    return wi_retry_charge(pg, e, derr.msg, &s->policy, err);
}

/* One transaction: claim up to limit events, dispatch each with its own statement (a
 * savepoint each: see dispatch_one), commit. Returns events handled, 0 when nothing was
 * due, -1 on failure (the transaction is rolled back), -3 when COMMIT itself failed for a
 * transaction of several events (e.g. a deferred constraint violated by one handler's work:
 * the culprit is unknown, the caller redoes one event). The claim names each event before
 * its handler runs: when the connection dies during one event's dispatch (or the COMMIT of
 * a one-event transaction), that event goes to *lost (see keep_lost) for the caller to
 * charge after reconnecting. */
static int run_batch_stepwise(struct wi_worker *w, struct wi_pg *pg, const struct snap *s, int limit,
                              struct wi_batch *b, struct wi_event *lost)
{
    struct wi_err err;
    double t0 = wi_clock_s();
    int i, n = 0, running = -1, committing = 0;

    if (wi_pg_cmd(pg, "wi_begin", 0, NULL, &err) < 0)
        goto abort;
    if ((n = wi_claim(pg, limit, b, &err)) < 0)
        goto abort;
    if (n == 0) {
        if (wi_pg_cmd(pg, "wi_commit", 0, NULL, &err) < 0)
            goto abort;
        return 0;
    }
    for (i = 0; i < n; i++) {
        running = i;
        if (dispatch_one(w, pg, &b->ev[i], s, &err) < 0)
            goto abort;
    }
    running = -1;
    committing = 1;
    if (wi_pg_cmd(pg, "wi_commit", 0, NULL, &err) < 0)
        goto abort;
    report(w, pg, b, s, t0);
    return n;

abort:
    if (!wi_pg_ok(pg)) {
        log_warnx("connection_lost", "worker=%d in=transaction error=%s", w->id, WI_LOG_Q(err.msg));
        if (running >= 0)
            keep_lost(w, pg, &b->ev[running], &err, lost);
        else if (committing && n == 1)
            keep_lost(w, pg, &b->ev[0], &err, lost);
        return -1;
    }
    if (!committing) { /* a failed COMMIT has already ended the transaction */
        struct wi_err rerr;
        (void)wi_pg_cmd(pg, "wi_rollback", 0, NULL, &rerr);
    }
    if (wi_dispatch_handler_missing(&err)) { /* rolled back above: nothing ran, nothing charged */
        wi_dispatch_log_missing(w->id, &err);
        return -5;
    }
    if (committing && n > 1) {
        log_warnx("commit_failed", "worker=%d events=%d error=%s note=\"redoing one event per transaction\"", w->id, n,
                  WI_LOG_Q(err.msg));
        return -3;
    }
    if (committing) {
        /* The COMMIT of this one event failed: it is the culprit. Its transaction is gone,
         * so it is charged in a transaction of its own. */
        log_warnx("commit_failed", "worker=%d events=1 error=%s", w->id, WI_LOG_Q(err.msg));
        charge_alone(w, pg, &b->ev[0], err.msg, s);
        return 1;
    }
    log_warnx("batch_failed", "worker=%d error=%s", w->id, WI_LOG_Q(err.msg));
    return -1;
}

/* After the batch statement failed on a live connection: 1 if the schema still passes the
 * check. A schema dropped or replaced under a running worker (a database restored, a
 * schema:load) makes it reconnect, which checks it and waits, instead of failing (and
 * redoing stepwise) every batch. */
static int schema_still_ok(const struct wi_worker *w, struct wi_pg *pg)
{
    struct wi_schema found;
    struct wi_err err;

    if (wi_schema_check(pg, &found, &err) == WI_SCHEMA_OK)
        return 1;
    log_warnx("schema_changed", "worker=%d note=\"reconnecting to check the inbox schema\"", w->id);
    return 0;
}

/* The fused statement first (3 statements in one round trip per transaction: BEGIN,
 * claim+dispatch, COMMIT, whatever the batch size); the stepwise path only to isolate an
 * event whose dispatch statement failed outright. In careful mode, one stepwise event per
 * transaction: the worker knows the event before its handler runs. Returns what the path
 * taken returns, or -4 when the batch statement failed because the schema no longer passes
 * the check (the caller reconnects). *took_all = 1: the batch claimed every unlocked due
 * row there was (the fused statement returned fewer than --batch-size); rows that came
 * after send a NOTIFY. */
static int run_batch(struct wi_worker *w, struct wi_pg *pg, const struct snap *s, int careful, struct wi_batch *b,
                     struct wi_event *lost, int *took_all)
{
    int n;
    *took_all = 0;
    if (careful)
        return run_batch_stepwise(w, pg, s, 1, b, lost);
    if ((n = run_batch_fused(w, pg, s, b)) != -2) { /* -5 too: the redo would be refused the same way */
        /* On Citus a short batch took one shard's due events: the others may have more. */
        *took_all = n >= 0 && n < s->batch_size && w->shards.n == 0;
        return n;
    }
    if (!schema_still_ok(w, pg))
        return -4;
    if ((n = run_batch_stepwise(w, pg, s, s->batch_size, b, lost)) != -3)
        return n;
    /* COMMIT failed with several events in the transaction: the oldest due event alone.
     * Each such round commits or charges one event, so a poison event cannot hold the
     * others back forever. */
    wi_batch_free(b);
    return run_batch_stepwise(w, pg, s, 1, b, lost);
}

/* After reconnecting: charges the event whose handler was running when the connection died
 * one attempt (the usual backoff; quarantined at --max-attempts), so a handler that kills
 * its backend ends in quarantine instead of stalling the queue forever. A row that moved
 * meanwhile (done, or charged by someone else) is left alone by webhook_inbox_charge_failure.
 * Returns 0 (lost is then emptied) or -1 when the connection failed again (lost is kept). */
static int charge_lost(struct wi_worker *w, struct wi_pg *pg, struct wi_event *lost, const struct snap *s)
{
    char *why = lost->detail;

    lost->detail = NULL;
    charge_alone(w, pg, lost, why, s);
    if (!wi_pg_ok(pg)) {
        free(lost->detail);
        lost->detail = why;
        return -1;
    }
    free(why);
    event_clear(lost);
    return 0;
}

/* Connects, checks the inbox schema (webhook_inbox_schema_version()), then prepares the
 * statements that use it. Returns NULL with *err on failure; *refused is then the
 * WI_SCHEMA_* outcome when the schema was the reason (0 otherwise), with *found. */
static struct wi_pg *connect_worker(struct wi_worker *w, const char *url, int *refused, struct wi_schema *found,
                                    struct wi_err *err)
{
    struct wi_pg_stmt inbox_stmts[] = {wi_claim_stmt, wi_next_due_stmt, wi_dispatch_stmt, wi_dispatch_batch_stmt,
                                       wi_retry_stmt, wi_claim_before_now_stmt, wi_handle_spans_stmt};
    struct wi_pg_stmt stmts[sizeof tx_stmts / sizeof tx_stmts[0] + 4];
    struct wi_pg *pg;
    char lock_timeout[32];
    const char *params[1] = {lock_timeout};
    int n = 0, rc, citus;
    size_t i;

    *refused = 0;
    for (i = 0; i < sizeof tx_stmts / sizeof tx_stmts[0]; i++)
        stmts[n++] = tx_stmts[i];
    for (i = 0; i < (size_t)wi_schema_stmts_count && n < (int)(sizeof stmts / sizeof stmts[0]); i++)
        stmts[n++] = wi_schema_stmts[i];
    if (!(pg = wi_pg_connect(url, stmts, n, err)))
        return NULL;
    if ((rc = wi_schema_check(pg, found, err)) != WI_SCHEMA_OK) {
        if (rc > 0) {
            *refused = rc;
            wi_err_set(err, WI_ERR_ARG, "%s", wi_schema_problem(rc));
        }
        wi_pg_free(pg);
        return NULL;
    }
    if ((citus = wi_citus_layout(pg, err)) < 0) {
        wi_pg_free(pg);
        return NULL;
    }
    if (citus) { /* one source_scope, so one shard, per transaction (citus.h); no claim cursor */
        wi_citus_stmts(inbox_stmts, (int)(sizeof inbox_stmts / sizeof inbox_stmts[0]));
        for (i = 0; i < sizeof inbox_stmts / sizeof inbox_stmts[0]; i++)
            if (!strcmp(inbox_stmts[i].name, wi_next_due_stmt.name))
                inbox_stmts[i] = wi_next_due_from_head_stmt;
    }
    wi_citus_shards_free(&w->shards);
    if (citus && w->rt->cfg.citus_direct)
        wi_citus_shards_direct(&w->shards, url, w->rt->cfg.citus_nodes.v, w->rt->cfg.citus_nodes.n);
    snprintf(lock_timeout, sizeof lock_timeout, "%ldms", (long)(w->rt->cfg.lock_timeout * 1000));
    if (wi_pg_prepare(pg, inbox_stmts, (int)(sizeof inbox_stmts / sizeof inbox_stmts[0]), err) < 0 ||
        wi_pg_cmd(pg, "wi_lock_timeout", 1, params, err) < 0 ||
        /* the shards to cycle through, workers starting apart (a prime stride) */
        (citus && wi_citus_shards_load(pg, &w->shards, w->id * 13, lock_timeout, err) < 0)) {
        wi_pg_free(pg);
        return NULL;
    }
    return pg;
}

/* One error line naming the fix, at most once per SCHEMA_LOG_EVERY_S for all workers. */
static void log_schema_refused(int refused, const struct wi_schema *found, int once)
{
    char fix[300], v[16] = "none", m[16] = "none";

    if (!wi_log_every("schema_refused", SCHEMA_LOG_EVERY_S))
        return;
    if (found->version >= 0)
        snprintf(v, sizeof v, "%d", found->version);
    if (found->min_worker >= 0)
        snprintf(m, sizeof m, "%d", found->min_worker);
    log_errorx("schema_refused", "schema=%s schema_min_sidecar=%s sidecar_schema=%d %s error=%s", v, m,
               WI_SCHEMA_VERSION, once ? "exiting=1" : "note=\"not processing; checking again every few seconds\"",
               wi_log_quote(fix, sizeof fix, wi_schema_problem(refused), 280));
}

/* Careful mode (see README "A handler that kills its backend"): entered when the connection
 * is lost with a transaction in flight; lasts until as many single-event transactions as the
 * batch size then in force (the events the lost batch may have held) went through without
 * losing the connection again, or until CAREFUL_MAX_S have passed since the last loss (the
 * count falls only when something is claimed: with nothing due, or nothing the one-event
 * claim can take, it would last forever); a loss during careful mode starts both over. */
#define CAREFUL_MAX_S 30.0

static void enter_careful(const struct wi_worker *w, int *careful, double *careful_until, int events)
{
    if (!*careful)
        log_warnx("careful_mode", "worker=%d events=%d max_s=%.0f note=\"one event per transaction until these went through\"",
                  w->id, events, CAREFUL_MAX_S);
    *careful = events > 0 ? events : 1;
    *careful_until = wi_clock_s() + CAREFUL_MAX_S;
}

/* Leaves careful mode once its deadline passed (logged reason=deadline). */
static void careful_deadline(const struct wi_worker *w, int *careful, double careful_until)
{
    if (*careful && wi_clock_s() >= careful_until) {
        log_info("careful_mode_end", "worker=%d reason=deadline events_left=%d", w->id, *careful);
        *careful = 0;
    }
}

/* A worker woken for a notification while another is active leaves it to that worker's next
 * claim for at most --batch-linger plus this, then claims itself (wake.h). */
#define DEFER_EXTRA_S 0.005

/* Nothing (more) was due: goes idle and waits for a notification no claim has covered (the
 * listener hands it to one idle worker, wake.h), a backlog, the next due retry, the poll
 * interval or a stop. worked: the batch just ended claimed events. *active is the worker's
 * flag in rt->claims. Returns 0 (claim now) or -1 (connection lost). */
static int wait_for_work(struct wi_worker *w, struct wi_pg *pg, const struct snap *s, int worked, int *active)
{
    struct wi_runtime *rt = w->rt;
    double due, timeout = s->poll_interval, defer = s->batch_linger + DEFER_EXTRA_S;

    if (wi_wake_wait(&rt->claims, active, 0, defer)) /* one came during the batch: claim at once */
        return 0;
    if ((due = wi_claim_next_due(pg)) < 0 && !wi_pg_ok(pg))
        return -1;
    /* Due now after a batch that did work: most often the next event of a key whose earlier
     * event that batch just finished (the claim passed it, db/014), which sends no NOTIFY.
     * Claim again at once: a hot key drains at one transaction per event, not one per 0.1 s.
     * Only after a non-empty batch, so a row locked elsewhere costs at most one empty claim. */
    if (worked && due == 0)
        return 0;
    /* A row already due that the batch did not claim is locked by another transaction
     * (SKIP LOCKED passed it) whose end sends no NOTIFY: look again shortly, without
     * spinning on it every few milliseconds. */
    if (due >= 0 && due < timeout)
        timeout = due <= 0 ? (timeout < 0.1 ? timeout : 0.1) : due < 0.005 ? 0.005 : due;
    wi_metrics_add(WI_M_IDLE_WAITS, 1);
    (void)wi_wake_wait(&rt->claims, active, wi_clock_s() + timeout, defer);
    return 0;
}

void *wi_worker_main(void *arg)
{
    struct wi_worker *w = arg;
    struct wi_runtime *rt = w->rt;
    struct wi_pg *pg = NULL;
    struct wi_batch batch = {NULL, 0};
    struct wi_event lost = {0};  /* its handler ran when the connection died: charged once reconnected */
    uint64_t rng = (uint64_t)time(NULL) ^ ((uint64_t)(w->id + 1) * 0x9E3779B97F4A7C15ull) ^ (uint64_t)getpid();
    double reconnect_delay = WI_RECONNECT_MIN_S;
    int ever_connected = 0;
    int was_refused = 0;         /* the last connect found a schema it could not work with */
    int careful = 0;             /* single-event transactions left in careful mode; 0 = batched */
    double careful_until = 0;    /* wi_clock_s() at which careful mode ends regardless */
    int active = 0;              /* this worker's flag in rt->claims: running a batch or lingering */
    int once_checked = 0;        /* --once: the last empty claim was told to read before its cursor */
    const char *url = rt->cfg.database_url; /* not reloadable: stable for our lifetime */

    while (!atomic_load(&rt->stopping)) {
        struct snap s;
        struct wi_err err;
        int n, charge_failed, took_all = 0;

        if (!pg) {
            struct wi_schema found;
            int refused;
            pg = connect_worker(w, url, &refused, &found, &err);
            if (!pg && refused) {
                log_schema_refused(refused, &found, rt->cfg.once);
                was_refused = 1;
                if (rt->cfg.once) {
                    atomic_store(&rt->failed, 1);
                    break;
                }
                wi_runtime_nap(rt, SCHEMA_RETRY_S);
                continue;
            }
            if (!pg) {
                log_warnx("connect_failed", "worker=%d retry_in_s=%.1f error=%s", w->id, reconnect_delay, WI_LOG_Q(err.msg));
                if (rt->cfg.once && !ever_connected) {
                    atomic_store(&rt->failed, 1);
                    break;
                }
                wi_runtime_nap(rt, wi_retry_backoff(&reconnect_delay, &rng));
                continue;
            }
            if (ever_connected)
                wi_metrics_add(WI_M_RECONNECTS, 1);
            log_info(was_refused ? "schema_accepted" : "connected", "worker=%d schema=%d schema_min_sidecar=%d",
                     w->id, found.version, found.min_worker);
            was_refused = 0;
            ever_connected = 1;
        }

        take_snap(rt, &s);
        careful_deadline(w, &careful, careful_until);
        charge_failed = lost.scope && charge_lost(w, pg, &lost, &s) < 0;
        wi_wake_claiming(&rt->claims, &active, wi_clock_s());
        n = charge_failed ? -1 : run_batch(w, pg, &s, careful, &batch, &lost, &took_all);
        wi_batch_free(&batch);
        if (n >= 0)
            reconnect_delay = WI_RECONNECT_MIN_S;
        if (n > 0) {
            if (careful && (careful -= n) <= 0) {
                careful = 0;
                log_info("careful_mode_end", "worker=%d reason=done", w->id);
            }
            once_checked = 0;
            if (!took_all || rt->cfg.once) {
                if (n >= s.batch_size)
                    wi_wake_more(&rt->claims); /* a backlog: one more worker joins */
                continue;                      /* more may be due: claim again at once */
            }
            /* A partial batch took everything due: what arrives during the linger shares the
             * next commit; without one, only a NOTIFY (or a retry falling due) brings a claim,
             * never an empty claim just to find that nothing came. */
            if (s.batch_linger > 0)
                wi_runtime_nap(rt, s.batch_linger); /* still active: it looks at what came before idling */
        } else if (n == 0) {
            wi_metrics_add(WI_M_EMPTY_CLAIMS, 1);
        }
        if (n < 0) {
            wi_wake_idle(&rt->claims, &active);
            if (!wi_pg_ok(pg)) {
                /* Lost with a transaction in flight: the server may have killed the backend
                 * because of a handler. The fused batch does not say which event ran. */
                enter_careful(w, &careful, &careful_until, s.batch_size);
                wi_pg_free(pg);
                pg = NULL;
                /* With an event to charge, one reconnect at once: the sooner it is charged,
                 * the fewer other workers claim it meanwhile and lose their backend too. A
                 * failed connect (crash recovery, restart) then naps with the usual backoff. */
                double nap = wi_retry_backoff(&reconnect_delay, &rng);
                if (!lost.scope || charge_failed)
                    wi_runtime_nap(rt, nap);
            } else if (n == -4) {
                wi_pg_free(pg); /* the reconnect checks the schema again, and waits while it is refused */
                pg = NULL;
            } else if (n == -5) {
                wi_runtime_nap(rt, HANDLER_MISSING_RETRY_S); /* logged; its events wait, uncharged */
            } else {
                wi_runtime_nap(rt, 0.2);
            }
            continue;
        }
        if (rt->cfg.once) {
            /* Nothing more: a last claim that reads the rows before the claim cursor, which a
             * claim may have put off (claim_dispatch.sql), so --once leaves nothing due. */
            if (!once_checked && wi_pg_cmd(pg, wi_claim_before_now_stmt.name, 0, NULL, &err) == 0) {
                once_checked = 1;
                continue;
            }
            break;
        }
        if (wait_for_work(w, pg, &s, n > 0, &active) < 0) {
            log_warnx("connection_lost", "worker=%d in=idle", w->id);
            wi_pg_free(pg);
            pg = NULL;
        }
    }
    if (lost.scope)
        log_warnx("connection_lost_event_uncharged", "worker=%d note=\"stopping before reconnecting\"", w->id);
    event_clear(&lost);
    wi_batch_free(&batch);
    wi_pg_free(pg);
    wi_citus_shards_free(&w->shards);
    log_info("worker_exit", "worker=%d", w->id);
    atomic_fetch_sub(&rt->alive, 1);
    (void)!write(rt->wake_fd, "w", 1);
    return NULL;
}
