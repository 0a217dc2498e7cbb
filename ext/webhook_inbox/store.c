/* store.c - the inbox insert over libpq: connect, prepare, send the ON CONFLICT insert,
 * wait on the socket with a deadline, reconnect once on a lost connection. No ruby.h. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define STMT_NAME "wi_inbox_insert"
#define SLICE_MS 50 /* poll slice: how often a wait looks at the interrupt flag */

static const char INSERT_SQL[] =
    "INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, raw_body,"
    " status, last_error, processed_at)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7,"
    " CASE WHEN $6 = 'quarantined' THEN now() END)"
    " ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING 1";

/* Oids of the statement's parameters: text, text, text, jsonb, bytea, text, text. */
static const Oid PARAM_TYPES[7] = {25, 25, 25, 3802, 17, 25, 25};

/* Invariant: conn != NULL only in process pid, and then it is CONNECTION_OK with
 * STMT_NAME prepared and statement_timeout set (a broken one is closed at once). */
struct wi_store {
    PGconn *conn;
    char *conninfo;                 /* owned copy; wiped on free */
    char *password;                 /* from conninfo, to scrub messages; wiped on free */
    int connect_timeout_ms;
    int statement_timeout_ms;
    pid_t pid;                      /* process that opened conn */
    volatile sig_atomic_t interrupted; /* set by wi_store_interrupt */
    unsigned long reconnects;       /* connections reopened after a loss */
    char sqlstate[6];               /* of the last WI_STORE_EQUERY error */
    int ever_connected;
};

/* Outcome of one round trip, before the retry policy. */
enum trip { TRIP_OK, TRIP_LOST, TRIP_FAIL };

static void wipe_free(char *p)
{
    if (p) {
        explicit_bzero(p, strlen(p));
        free(p);
    }
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Overwrites every occurrence of the password in msg with '*'. */
static void scrub(const struct wi_store *s, char *msg)
{
    size_t plen;
    char *hit;

    if (!s || !s->password || !(plen = strlen(s->password)))
        return;
    while ((hit = strstr(msg, s->password)))
        memset(hit, '*', plen);
}

static void set_err(const struct wi_store *s, struct wi_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_err(const struct wi_store *s, struct wi_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    char *nl;

    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    /* libpq messages end in a newline and may span lines: keep one line. */
    while ((nl = strchr(err->msg, '\n')))
        *nl = (nl[1] ? ' ' : '\0');
    scrub(s, err->msg);
}

/* Forgets a connection inherited from the parent process: points its socket at
 * /dev/null first, so PQfinish's Terminate goes nowhere and only our copy of the
 * socket is closed. The parent's session is untouched. */
static void drop_inherited(PGconn *conn)
{
    int sock = PQsocket(conn);
    if (sock >= 0) {
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull >= 0) {
            dup2(devnull, sock);
            close(devnull);
        }
    }
    PQfinish(conn);
}

static void drop_conn(struct wi_store *s)
{
    if (!s->conn)
        return;
    if (s->pid != getpid())
        drop_inherited(s->conn);
    else
        PQfinish(s->conn);
    s->conn = NULL;
}

/* Asks the server to cancel the statement in flight (a separate short connection;
 * best effort). Called before dropping a connection we stopped waiting on. */
static void cancel_inflight(struct wi_store *s)
{
    PGcancel *cancel;
    char buf[256];

    if (!s->conn || s->pid != getpid() || !(cancel = PQgetCancel(s->conn)))
        return;
    PQcancel(cancel, buf, sizeof buf);
    PQfreeCancel(cancel);
}

/* Waits until sock is ready for events or the deadline passes.
 * Returns 1 ready, 0 deadline, -1 interrupted or poll error (err filled). */
static int wait_sock(struct wi_store *s, int sock, short events, long long deadline,
                     struct wi_err *err)
{
    for (;;) {
        struct pollfd pfd = {.fd = sock, .events = events};
        long long left = deadline - now_ms();
        int rc;

        if (s->interrupted) {
            set_err(s, err, WI_STORE_EINTR, "interrupted while waiting for PostgreSQL");
            return -1;
        }
        if (left <= 0)
            return 0;
        rc = poll(&pfd, 1, (int)(left < SLICE_MS ? left : SLICE_MS));
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR) {
            set_err(s, err, WI_STORE_ELOST, "poll failed: %s", strerror(errno));
            return -1;
        }
    }
}

/* Flushes the output and collects the single result of the command just sent.
 * On TRIP_OK *res is the caller's to PQclear. */
static enum trip finish_trip(struct wi_store *s, long long deadline, PGresult **res,
                             struct wi_err *err)
{
    PGconn *c = s->conn;
    int sock = PQsocket(c);
    int flushed;
    PGresult *r, *first = NULL;

    *res = NULL;
    while ((flushed = PQflush(c)) == 1) {
        int w = wait_sock(s, sock, POLLOUT | POLLIN, deadline, err);
        if (w < 0)
            return TRIP_FAIL;
        if (w == 0)
            goto timeout;
        if (!PQconsumeInput(c))
            goto lost;
    }
    if (flushed < 0)
        goto lost;

    for (;;) {
        while (PQisBusy(c)) {
            int w = wait_sock(s, sock, POLLIN, deadline, err);
            if (w < 0)
                return TRIP_FAIL;
            if (w == 0)
                goto timeout;
            if (!PQconsumeInput(c))
                goto lost;
        }
        r = PQgetResult(c);
        if (!r)
            break;
        if (!first)
            first = r; /* ours; later ones (none expected) are cleared */
        else
            PQclear(r);
    }
    if (PQstatus(c) == CONNECTION_BAD) {
        PQclear(first);
        goto lost;
    }
    if (!first) {
        set_err(s, err, WI_STORE_EQUERY, "PostgreSQL returned no result");
        return TRIP_FAIL;
    }
    *res = first;
    return TRIP_OK;

lost:
    PQclear(first);
    set_err(s, err, WI_STORE_ELOST, "lost the connection to PostgreSQL: %s", PQerrorMessage(c));
    return TRIP_LOST;
timeout:
    PQclear(first);
    set_err(s, err, WI_STORE_ETIMEOUT, "PostgreSQL did not answer within %d ms",
            s->statement_timeout_ms + s->connect_timeout_ms);
    return TRIP_FAIL;
}

/* Fills *err from an error result: primary message and SQLSTATE only. */
static void result_err(struct wi_store *s, const PGresult *r, struct wi_err *err)
{
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);

    set_err(s, err, WI_STORE_EQUERY, "PostgreSQL error %s: %s", state ? state : "?????",
            primary ? primary : PQresStatus(PQresultStatus(r)));
    snprintf(s->sqlstate, sizeof s->sqlstate, "%s", state ? state : "");
}

/* Runs a setup command (SET, PREPARE) already sent; expects status want. */
static int setup_step(struct wi_store *s, ExecStatusType want, long long deadline,
                      struct wi_err *err)
{
    PGresult *r;
    int ok;

    if (finish_trip(s, deadline, &r, err) != TRIP_OK)
        return -1;
    ok = PQresultStatus(r) == want;
    if (!ok)
        result_err(s, r, err);
    PQclear(r);
    return ok ? 0 : -1;
}

struct wi_store *wi_store_new(const char *conninfo, int connect_timeout_ms,
                              int statement_timeout_ms, struct wi_err *err)
{
    struct wi_store *s = NULL;
    PQconninfoOption *opts = NULL, *o;
    char *perr = NULL;

    if (!conninfo || connect_timeout_ms <= 0 || statement_timeout_ms <= 0) {
        set_err(NULL, err, WI_ERR_ARG, "database_url, connect_timeout and statement_timeout are required (> 0)");
        return NULL;
    }
    opts = PQconninfoParse(conninfo, &perr);
    if (!opts) {
        /* libpq's message may quote the string: never pass it on. */
        set_err(NULL, err, WI_ERR_ARG, "database_url is not a valid PostgreSQL connection string or URL");
        PQfreemem(perr);
        return NULL;
    }
    if (!(s = calloc(1, sizeof *s)) || !(s->conninfo = strdup(conninfo)))
        goto nomem;
    for (o = opts; o->keyword; o++) {
        if (!strcmp(o->keyword, "password") && o->val && *o->val && !(s->password = strdup(o->val)))
            goto nomem;
        if (o->val)
            explicit_bzero(o->val, strlen(o->val));
    }
    PQconninfoFree(opts);
    s->connect_timeout_ms = connect_timeout_ms;
    s->statement_timeout_ms = statement_timeout_ms;
    s->pid = getpid();
    return s;

nomem:
    PQconninfoFree(opts);
    wi_store_free(s);
    set_err(NULL, err, WI_ERR_NOMEM, "out of memory");
    return NULL;
}

int wi_store_connect(struct wi_store *s, struct wi_err *err)
{
    static const char *const keys[] = {"dbname", "fallback_application_name", "client_encoding", NULL};
    const char *vals[] = {s->conninfo, "webhook_inbox", "UTF8", NULL};
    long long deadline;
    char sql[64];
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;

    if (s->conn && s->pid != getpid())
        drop_conn(s); /* forked child: never touch the parent's session */
    if (s->conn)
        return 0;

    s->pid = getpid();
    deadline = now_ms() + s->connect_timeout_ms;
    s->conn = PQconnectStartParams(keys, vals, 1);
    if (!s->conn) {
        set_err(s, err, WI_ERR_NOMEM, "out of memory");
        return -1;
    }
    while (st != PGRES_POLLING_OK) {
        int w;
        if (st == PGRES_POLLING_FAILED || PQstatus(s->conn) == CONNECTION_BAD) {
            set_err(s, err, WI_STORE_ECONNECT, "could not connect to PostgreSQL: %s",
                    PQerrorMessage(s->conn));
            goto fail;
        }
        w = wait_sock(s, PQsocket(s->conn), st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                      deadline, err);
        if (w < 0)
            goto fail;
        if (w == 0) {
            set_err(s, err, WI_STORE_ECONNECT, "could not connect to PostgreSQL within %d ms",
                    s->connect_timeout_ms);
            goto fail;
        }
        st = PQconnectPoll(s->conn);
    }
    if (PQsetnonblocking(s->conn, 1) != 0) {
        set_err(s, err, WI_STORE_ECONNECT, "could not make the connection non-blocking");
        goto fail;
    }

    deadline = now_ms() + s->connect_timeout_ms + s->statement_timeout_ms;
    snprintf(sql, sizeof sql, "SET statement_timeout = %d", s->statement_timeout_ms);
    if (!PQsendQuery(s->conn, sql)) {
        set_err(s, err, WI_STORE_ECONNECT, "could not send SET: %s", PQerrorMessage(s->conn));
        goto fail;
    }
    if (setup_step(s, PGRES_COMMAND_OK, deadline, err) < 0)
        goto fail;
    if (!PQsendPrepare(s->conn, STMT_NAME, INSERT_SQL, 7, PARAM_TYPES)) {
        set_err(s, err, WI_STORE_ECONNECT, "could not send PREPARE: %s", PQerrorMessage(s->conn));
        goto fail;
    }
    if (setup_step(s, PGRES_COMMAND_OK, deadline, err) < 0)
        goto fail;
    if (s->ever_connected)
        s->reconnects++;
    s->ever_connected = 1;
    return 0;

fail:
    if (err->code != WI_STORE_EINTR && err->code != WI_STORE_EQUERY)
        err->code = WI_STORE_ECONNECT;
    drop_conn(s);
    return -1;
}

/* One attempt of the insert on the open connection. Result classes:
 * TRIP_OK (out filled), TRIP_LOST (connection broke: retry may help), TRIP_FAIL. */
static enum trip insert_once(struct wi_store *s, const struct wi_store_row *row, int raw,
                             int quarantined, const char *last_error, size_t last_error_len,
                             struct wi_store_result *out, struct wi_err *err)
{
    const char *values[7];
    int lengths[7];
    static const int formats[7] = {1, 1, 1, 1, 1, 1, 1}; /* binary: lengths, no NUL needed */
    char *jsonb = NULL;
    PGresult *r = NULL;
    enum trip t;
    long long deadline = now_ms() + s->statement_timeout_ms + s->connect_timeout_ms;
    const char *status = quarantined ? "quarantined" : "pending";

    values[0] = row->source_scope; lengths[0] = (int)row->source_scope_len;
    values[1] = row->event_id;     lengths[1] = (int)row->event_id_len;
    values[2] = row->event_type;   lengths[2] = (int)row->event_type_len;
    if (raw) {
        values[3] = NULL;          lengths[3] = 0;
        values[4] = row->payload;  lengths[4] = (int)row->payload_len;
    } else {
        /* jsonb binary format: version byte 1, then the JSON text. */
        if (!(jsonb = malloc(row->payload_len + 1))) {
            set_err(s, err, WI_ERR_NOMEM, "out of memory");
            return TRIP_FAIL;
        }
        jsonb[0] = 1;
        memcpy(jsonb + 1, row->payload, row->payload_len);
        values[3] = jsonb;         lengths[3] = (int)row->payload_len + 1;
        values[4] = NULL;          lengths[4] = 0;
    }
    values[5] = status;            lengths[5] = (int)strlen(status);
    values[6] = last_error;        lengths[6] = (int)last_error_len;

    if (!PQsendQueryPrepared(s->conn, STMT_NAME, 7, values, lengths, formats, 0)) {
        free(jsonb);
        set_err(s, err, WI_STORE_ELOST, "could not send the insert: %s", PQerrorMessage(s->conn));
        return PQstatus(s->conn) == CONNECTION_BAD ? TRIP_LOST : TRIP_FAIL;
    }
    t = finish_trip(s, deadline, &r, err);
    free(jsonb);
    if (t != TRIP_OK)
        return t;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        result_err(s, r, err);
        PQclear(r);
        return TRIP_FAIL;
    }
    out->inserted = PQntuples(r) == 1;
    out->stored_raw = raw;
    out->quarantined = quarantined;
    PQclear(r);
    return TRIP_OK;
}

int wi_store_insert(struct wi_store *s, const struct wi_store_row *row,
                    struct wi_store_result *out, struct wi_err *err)
{
    int raw = row->raw, quarantined = row->quarantined;
    const char *last_error = row->last_error;
    size_t last_error_len = row->last_error_len;
    int tries;

    s->interrupted = 0;
    s->sqlstate[0] = '\0';
    memset(out, 0, sizeof *out);
    if (row->source_scope_len > 0x3fffffff || row->event_id_len > 0x3fffffff ||
        row->event_type_len > 0x3fffffff || row->payload_len > 0x3ffffffe ||
        last_error_len > 0x3fffffff) {
        set_err(s, err, WI_ERR_ARG, "field too large");
        return -1;
    }
    for (tries = 0; tries < 2; tries++) {
        enum trip t;
        if (wi_store_connect(s, err) < 0)
            return -1;
        t = insert_once(s, row, raw, quarantined, last_error, last_error_len, out, err);
        if (t == TRIP_OK)
            return 0;
        if (t == TRIP_LOST) {
            drop_conn(s); /* reconnect once and retry: ON CONFLICT makes it idempotent */
            continue;
        }
        /* A payload jsonb refuses (bad JSON, \u0000, bad UTF-8, numeric range: class 22):
         * keep it raw and quarantined instead of losing a verified event. */
        if (err->code == WI_STORE_EQUERY && !raw && !strncmp(s->sqlstate, "22", 2)) {
            raw = 1;
            quarantined = 1;
            if (!last_error) {
                last_error = WI_STORE_INVALID_JSON_REASON;
                last_error_len = sizeof WI_STORE_INVALID_JSON_REASON - 1;
            }
            tries--; /* not a connection retry */
            continue;
        }
        if (err->code == WI_STORE_EINTR || err->code == WI_STORE_ETIMEOUT)
            cancel_inflight(s); /* so an abandoned insert does not commit later */
        if (err->code != WI_STORE_EQUERY)
            drop_conn(s); /* the connection's state is unknown */
        return -1;
    }
    err->code = WI_STORE_ELOST;
    return -1;
}

void wi_store_interrupt(struct wi_store *s)
{
    if (s)
        s->interrupted = 1;
}

void wi_store_close(struct wi_store *s)
{
    if (s)
        drop_conn(s);
}

const char *wi_store_sqlstate(const struct wi_store *s)
{
    return s ? s->sqlstate : "";
}

int wi_store_backend_pid(const struct wi_store *s)
{
    return s && s->conn && s->pid == getpid() ? PQbackendPID(s->conn) : 0;
}

unsigned long wi_store_reconnects(const struct wi_store *s)
{
    return s ? s->reconnects : 0;
}

void wi_store_free(struct wi_store *s)
{
    if (!s)
        return;
    drop_conn(s);
    wipe_free(s->conninfo);
    wipe_free(s->password);
    free(s);
}
