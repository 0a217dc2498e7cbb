/* pgw.c - libpq wrapper: connection, named prepared statements, errors as "SQLSTATE: first line". */
#define _POSIX_C_SOURCE 200809L
#include "pg/pgw.h"
#include "core/log.h"
#include "redact.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Invariant: conn != NULL for the whole life of the struct. */
struct wi_pg {
    PGconn *conn;       /* owned */
    char sqlstate[6];   /* of the last failure, "" after a success */
};

/* Makes the connection CONNECTION_BAD without waiting (the caller then reconnects). */
static void give_up(PGconn *c)
{
    if (PQsocket(c) >= 0)
        (void)shutdown(PQsocket(c), SHUT_RDWR);
    (void)PQconsumeInput(c); /* reads EOF: libpq marks the connection bad */
}

static int fill_err(struct wi_pg *pg, const PGresult *res, struct wi_err *err)
{
    const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    char line[WI_ERR_MSG_MAX];
    size_t n;

    if (!msg)
        msg = PQerrorMessage(pg->conn);
    if (!msg || !*msg)
        msg = res ? PQresStatus(PQresultStatus(res)) : "no result";
    snprintf(line, sizeof line, "%s", msg);
    n = strcspn(line, "\n");
    line[n] = '\0';
    snprintf(pg->sqlstate, sizeof pg->sqlstate, "%s", state ? state : (PQstatus(pg->conn) == CONNECTION_BAD ? "08006" : ""));
    /* A read-only server (a standby, or default_transaction_read_only turned on for a
     * switchover) will never take our writes: the connection is given up like a lost one,
     * so the caller reconnects and libpq picks a read-write host of the list again. */
    if (state && !strcmp(state, "25006"))
        give_up(pg->conn);
    return wi_err_set(err, WI_ERR_PG, "%s%s%s", state ? state : "", state ? ": " : "", line);
}

static void (*notice_hook)(const char *sqlstate);

void wi_pg_set_notice_hook(void (*hook)(const char *sqlstate))
{
    notice_hook = hook;
}

/* Every notice goes to the hook. Server WARNINGs (a RAISE WARNING in a function the sidecar
 * calls: db/019's batch handler that failed) are log lines, once a minute per message;
 * libpq's default printed them unformatted on stderr. The message is logged only for the
 * gem's own SQLSTATEs (WI...), whose texts name functions and SQLSTATEs: another warning's
 * text may hold a handler's data, so only its SQLSTATE is. NOTICEs and below are not logged. */
static void on_notice(void *arg, const PGresult *res)
{
    const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    int ours = state && !strncmp(state, "WI", 2);
    char key[96];
    (void)arg;
    if (notice_hook)
        notice_hook(state ? state : "");
    if (!severity || strcmp(severity, "WARNING"))
        return;
    snprintf(key, sizeof key, "server_warning:%s:%.64s", state ? state : "", ours && msg ? msg : "");
    if (!wi_log_every(key, 60))
        return;
    if (ours && msg)
        log_warnx("server_warning", "sqlstate=%s message=%s", state, WI_LOG_Q(msg));
    else
        log_warnx("server_warning", "sqlstate=%s", state ? state : "-");
}

struct wi_pg *wi_pg_connect(const char *conninfo, const struct wi_pg_stmt *stmts, int n, struct wi_err *err)
{
    /* Defaults first: the expanded conninfo (dbname) overrides them. Keepalives make an idle
     * worker notice a silently dead server/network within about a minute, and a connect
     * attempt to an unreachable host cannot hold up a shutdown for long. Every job writes:
     * read-only hosts of a multi-host URL are skipped (target_session_attrs). */
    const char *keys[] = {"connect_timeout", "keepalives_idle", "keepalives_interval", "keepalives_count",
                          "target_session_attrs", "dbname", "fallback_application_name", NULL};
    const char *vals[] = {"10", "30", "10", "3", "read-write", conninfo, "webhook-inbox-sidecar", NULL};
    struct wi_pg *pg;

    /* libpq would connect to (and quote) a host or port named by part of the password. */
    if (wi_redact_url_split(conninfo)) {
        wi_err_set(err, WI_ERR_ARG, "%s", WI_REDACT_SPLIT_MSG);
        return NULL;
    }
    if (!(pg = calloc(1, sizeof *pg))) {
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    /* expand_dbname: conninfo may be a URI or key=value string; "" means PG* defaults. */
    pg->conn = PQconnectdbParams(keys, vals, 1);
    if (!pg->conn) {
        free(pg);
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (PQstatus(pg->conn) != CONNECTION_OK) {
        fill_err(pg, NULL, err);
        if (err)
            wi_redact_scrub(err->msg, conninfo, PQpass(pg->conn)); /* no part of a password */
        goto fail;
    }
    (void)PQsetNoticeReceiver(pg->conn, on_notice, NULL);
    if (wi_pg_prepare(pg, stmts, n, err) < 0)
        goto fail;
    return pg;
fail:
    wi_pg_free(pg);
    return NULL;
}

int wi_pg_prepare(struct wi_pg *pg, const struct wi_pg_stmt *stmts, int n, struct wi_err *err)
{
    int i;
    for (i = 0; i < n; i++) {
        PGresult *res = PQprepare(pg->conn, stmts[i].name, stmts[i].sql, 0, NULL);
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        /* 42P05: already prepared on this connection; names always carry the same SQL. */
        if (PQresultStatus(res) != PGRES_COMMAND_OK && !(state && !strcmp(state, "42P05"))) {
            fill_err(pg, res, err);
            PQclear(res);
            return -1;
        }
        PQclear(res);
    }
    return 0;
}

void wi_pg_free(struct wi_pg *pg)
{
    if (!pg)
        return;
    PQfinish(pg->conn);
    free(pg);
}

PGresult *wi_pg_exec(struct wi_pg *pg, const char *name, int nparams, const char *const *params, ExecStatusType expect,
                     struct wi_err *err)
{
    PGresult *res = PQexecPrepared(pg->conn, name, nparams, params, NULL, NULL, 0);
    if (PQresultStatus(res) != expect) {
        fill_err(pg, res, err);
        PQclear(res);
        return NULL;
    }
    pg->sqlstate[0] = '\0';
    return res;
}

int wi_pg_exec_tx(struct wi_pg *pg, const char *begin, const char *name, int nparams, const char *const *params,
                  const char *commit, const char *rollback, PGresult **out, struct wi_err *err)
{
    PGconn *c = pg->conn;
    PGresult *res, *keep = NULL;
    int idx = 0, nulls = 0, failed = 0;

    *out = NULL;
    if (!PQenterPipelineMode(c))
        return fill_err(pg, NULL, err);
    if (!PQsendQueryPrepared(c, begin, 0, NULL, NULL, NULL, 0) ||
        !PQsendQueryPrepared(c, name, nparams, params, NULL, NULL, 0) ||
        !PQsendQueryPrepared(c, commit, 0, NULL, NULL, NULL, 0) || !PQpipelineSync(c)) {
        fill_err(pg, NULL, err);
        failed = 1;
        /* The server answers a pipeline only at a sync point: without one the loop below
         * would wait forever, and the connection would stay in pipeline mode. End what was
         * queued with a sync (then roll back as for any failure), or give the connection up. */
        if (!PQpipelineSync(c))
            give_up(c);
    }
    /* Each query's results end with a NULL; the pipeline ends with PGRES_PIPELINE_SYNC. After
     * a failure the remaining queries report PGRES_PIPELINE_ABORTED. */
    while (!failed || PQstatus(c) == CONNECTION_OK) {
        ExecStatusType st;
        if (!(res = PQgetResult(c))) {
            if (PQstatus(c) != CONNECTION_OK || ++nulls > 2) {
                if (!failed)
                    fill_err(pg, NULL, err);
                failed = 1;
                break;
            }
            continue;
        }
        nulls = 0;
        st = PQresultStatus(res);
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            break;
        }
        if (st != (idx == 1 ? PGRES_TUPLES_OK : PGRES_COMMAND_OK)) {
            if (!failed)
                fill_err(pg, res, err);
            failed = 1;
            PQclear(res);
        } else if (idx == 1) {
            keep = res;
        } else {
            PQclear(res);
        }
        idx++;
    }
    if (PQstatus(c) == CONNECTION_OK)
        (void)PQexitPipelineMode(c);
    if (failed) {
        struct wi_err ignore;
        PQclear(keep);
        if (PQstatus(c) == CONNECTION_OK && PQpipelineStatus(c) == PQ_PIPELINE_OFF)
            (void)wi_pg_cmd(pg, rollback, 0, NULL, &ignore);
        return -1;
    }
    pg->sqlstate[0] = '\0';
    *out = keep;
    return 0;
}

/* Takes ownership of res: 0 if it is a command or query success, else -1 with *err. */
static int finish_command(struct wi_pg *pg, PGresult *res, struct wi_err *err)
{
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        fill_err(pg, res, err);
        PQclear(res);
        return -1;
    }
    PQclear(res);
    pg->sqlstate[0] = '\0';
    return 0;
}

int wi_pg_cmd(struct wi_pg *pg, const char *name, int nparams, const char *const *params, struct wi_err *err)
{
    return finish_command(pg, PQexecPrepared(pg->conn, name, nparams, params, NULL, NULL, 0), err);
}

int wi_pg_script(struct wi_pg *pg, const char *sql, struct wi_err *err)
{
    return finish_command(pg, PQexec(pg->conn, sql), err);
}

int wi_pg_ok(const struct wi_pg *pg)
{
    return pg && PQstatus(pg->conn) == CONNECTION_OK;
}

int wi_pg_socket(const struct wi_pg *pg)
{
    return pg ? PQsocket(pg->conn) : -1;
}

int wi_pg_drain_notifies(struct wi_pg *pg)
{
    PGnotify *nt;
    int n = 0;
    if (!PQconsumeInput(pg->conn) || PQstatus(pg->conn) != CONNECTION_OK)
        return -1;
    while ((nt = PQnotifies(pg->conn)) != NULL) {
        n++;
        PQfreemem(nt);
    }
    return n;
}

const char *wi_pg_last_sqlstate(const struct wi_pg *pg)
{
    return pg->sqlstate;
}
