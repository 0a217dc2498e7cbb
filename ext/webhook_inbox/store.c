/* store.c - the inbox insert over libpq: connect, prepare, send the ON CONFLICT insert (one
 * row, or many in one statement: as arrays, or as VALUES rows), wait on the socket with a
 * deadline, reconnect once on a lost connection. No ruby.h. */
#include "store.h"
#include "ordering.h"
#include "redact.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define STMT_NAME "wi_inbox_insert"
#define READ_STMT_NAME "wi_inbox_insert_read"
#define BATCH_STMT_NAME "wi_inbox_insert_batch"
#define BATCH_READ_STMT_NAME "wi_inbox_insert_batch_read"
#define UNKEYED_STMT_NAME "wi_inbox_insert_unkeyed"
#define BATCH_UNKEYED_STMT_NAME "wi_inbox_insert_batch_unkeyed"
#define VALUES_STMT_NAME "wi_inbox_values_%zu" /* the VALUES batch of that many rows */
#define RECEIVE_STMT_NAME "wi_inbox_citus_receive" /* wi_store_set_shard_receive */
#define SLICE_MS 50 /* poll slice: how often a wait looks at the interrupt flag */
#define CHECK_CLOSED_MS "1000" /* client_connection_check_interval: see session_setup */

/* $8 is request_headers (schema v5); $9 to $12 the ordering (schema v14): the key and event
 * time are read in C from the payload when ordering.c can match the SQL functions byte for
 * byte ($11 the key, $12 the time in seconds as float8 text, $9 and $10 NULL); otherwise
 * PostgreSQL derives them from the stored jsonb with webhook_inbox_ordering_key/_time from
 * the spec $9 and time path $10 (STRICT: no call when $9 is NULL). A keyed row's
 * next_attempt_at starts at its event time when that is earlier. Against an older schema the
 * session prepares the *_NO_ORDER or *_NO_HEADERS forms instead (session_setup): a gem
 * upgraded before its migration ran keeps storing receipts, without what the schema lacks. */
#define INSERT_SQL_HEAD                                                                        \
    "INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, raw_body,"       \
    " status, last_error, processed_at"
#define INSERT_SQL_TAIL                                                                        \
    " CASE WHEN $6 = 'quarantined' THEN now() END"
#define ORDER_COLS_LIST ", request_headers, ordering_key, ordering_at, next_attempt_at"
#define ORDER_COLS ORDER_COLS_LIST ")"
/* $13 (schema v30): the receipt span's W3C traceparent, kept only when it is a version-00 one
 * of 55 characters with non-zero ids (webhook_inbox_trace_context's test, inline: no call);
 * anything else is stored as NULL, never refused. NULL when tracing is off: no cost. The
 * length anchors the pattern's end: no '$' in it, which values_sql would take for a parameter. */
#define TRACE_COLS ORDER_COLS_LIST ", trace_context)"
#define TRACE_SQL(p)                                                                           \
    "CASE WHEN octet_length(" p ") = 55 AND " p                                               \
    " ~ '^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}' THEN " p " END"
#define ON_CONFLICT " ON CONFLICT (source_scope, event_id) DO NOTHING"
#define RETURNING_KEYS " RETURNING source_scope, event_id"
#define ORDER_VALUES ", o.key, o.at, least(now(), o.at)"
/* The key: the one read in C (dk), else PostgreSQL's from payload p for spec k; the time of a
 * keyed row: read in C (seconds da), else PostgreSQL's at path t, else the receipt's. */
#define ORDER_KEY(p, k, dk) "coalesce(" dk ", webhook_inbox_ordering_key(" p ", " k "))"
#define ORDER_TIME(p, t, da)                                                                   \
    "coalesce(to_timestamp(" da "::float8), webhook_inbox_ordering_time(" p ", " t "), now())"
#define ORDER_FROM(p, k, t, dk, da)                                                            \
    "(SELECT k.key, CASE WHEN k.key IS NOT NULL THEN " ORDER_TIME(p, t, da) " END AS at"        \
    " FROM (SELECT " ORDER_KEY(p, k, dk) " AS key) k) o"
/* The one-row form is INSERT ... VALUES, not INSERT ... SELECT: Citus routes a VALUES row to
 * its shard directly (0.7 ms a row through the coordinator, measured) but runs an INSERT ...
 * SELECT through the coordinator's INSERT ... SELECT machinery (3.4 ms). The key is named
 * again for ordering_at and next_attempt_at; no call at all when C read it or the row is
 * unordered ($9 NULL: the functions are STRICT). A row left to SQL pays for each call:
 * PostgreSQL 15 plans a SQL function's body at every call site (~60 us each, measured), which
 * is why a batch derives them once (BATCH_SQL's LATERAL), never per VALUES row. */
#define ORDER_AT(p, k, t, dk, da)                                                              \
    "CASE WHEN " ORDER_KEY(p, k, dk) " IS NOT NULL THEN " ORDER_TIME(p, t, da) " END"
/* One row's VALUES tuple, numbered from $1 (the one-row statement's). */
#define ROW_SQL_FIELDS                                                                         \
    "$1, $2, $3, $4, $5, $6, $7," INSERT_SQL_TAIL ", $8, " ORDER_KEY("$4", "$9", "$11") ", "    \
    ORDER_AT("$4", "$9", "$10", "$11", "$12") ", least(now(), "                                  \
    ORDER_AT("$4", "$9", "$10", "$11", "$12") ")"
#define ROW_SQL "(" ROW_SQL_FIELDS ")"
#define ROW_SQL_TRACED "(" ROW_SQL_FIELDS ", " TRACE_SQL("$13") ")"
#define ROW_SQL_NO_ORDER "($1, $2, $3, $4, $5, $6, $7," INSERT_SQL_TAIL ", $8)"
#define ROW_SQL_NO_HEADERS "($1, $2, $3, $4, $5, $6, $7," INSERT_SQL_TAIL ")"
/* The one row whose ordering C decided whole (unordered, raw, or key and time read: $9 and
 * $10 NULL; what ROW_SQL stores then, without naming the ordering functions). Citus folds a
 * statement's expressions on the coordinator at every execution and, with them, inlines the
 * SQL function webhook_inbox_ordering_time again each time (a parse and analysis of its body:
 * about a quarter of the coordinator's CPU per receipt, perf). $9 and $10 stay declared. */
#define READ_AT(dk, da) "CASE WHEN " dk " IS NOT NULL THEN coalesce(to_timestamp(" da "::float8), now()) END"
#define ROW_SQL_READ_FIELDS(dk, da)                                                            \
    "$1, $2, $3, $4, $5, $6, $7," INSERT_SQL_TAIL ", $8, " dk ", " READ_AT(dk, da) ", least(now(), " \
    READ_AT(dk, da) ")"
static const char INSERT_SQL_READ_TRACED[] =
    INSERT_SQL_HEAD TRACE_COLS " VALUES (" ROW_SQL_READ_FIELDS("$11", "$12") ", " TRACE_SQL("$13") ")" ON_CONFLICT
    " RETURNING 1";
static const char INSERT_SQL_READ[] =
    INSERT_SQL_HEAD ORDER_COLS " VALUES (" ROW_SQL_READ_FIELDS("$11", "$12") ")" ON_CONFLICT " RETURNING 1";
static const char INSERT_SQL_TRACED[] = INSERT_SQL_HEAD TRACE_COLS " VALUES " ROW_SQL_TRACED ON_CONFLICT " RETURNING 1";
static const char INSERT_SQL[] = INSERT_SQL_HEAD ORDER_COLS " VALUES " ROW_SQL ON_CONFLICT " RETURNING 1";
static const char INSERT_SQL_NO_ORDER[] =
    INSERT_SQL_HEAD ", request_headers) VALUES " ROW_SQL_NO_ORDER ON_CONFLICT " RETURNING 1";
static const char INSERT_SQL_NO_HEADERS[] = INSERT_SQL_HEAD ") VALUES " ROW_SQL_NO_HEADERS ON_CONFLICT " RETURNING 1";

#define NPARAMS 13        /* with request_headers, the ordering (spec, path, key, time), the trace */
#define NPARAMS_NO_TRACE 12
#define TRACE_COL 12      /* the trace's parameter (and batch_field column) */
#define NPARAMS_NO_ORDER 8
#define NPARAMS_NO_HEADERS 7

/* Oids of the statement's parameters: text, text, text, jsonb, bytea, text, text, jsonb, then
 * text for the ordering's four and the trace. */
static const Oid PARAM_TYPES[NPARAMS] = {25, 25, 25, 3802, 17, 25, 25, 3802, 25, 25, 25, 25, 25};

/* Many rows in one statement and one commit: one array per column, unnested in order.
 * ON CONFLICT DO NOTHING also skips the second of two rows with the same key in the batch
 * (only DO UPDATE refuses that), so RETURNING names each key inserted exactly once. */
static const char BATCH_SQL_TRACED[] =
    INSERT_SQL_HEAD TRACE_COLS
    " SELECT s, e, t, p, r, st, le, CASE WHEN st = 'quarantined' THEN now() END, h" ORDER_VALUES ", " TRACE_SQL("tc")
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::text[],"
    " $7::text[], $8::jsonb[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[])"
    " AS u(s, e, t, p, r, st, le, h, ok, ot, dk, da, tc),"
    " LATERAL " ORDER_FROM("u.p", "u.ok", "u.ot", "u.dk", "u.da") ON_CONFLICT RETURNING_KEYS;
static const char BATCH_SQL[] =
    INSERT_SQL_HEAD ORDER_COLS
    " SELECT s, e, t, p, r, st, le, CASE WHEN st = 'quarantined' THEN now() END, h" ORDER_VALUES
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::text[],"
    " $7::text[], $8::jsonb[], $9::text[], $10::text[], $11::text[], $12::text[])"
    " AS u(s, e, t, p, r, st, le, h, ok, ot, dk, da),"
    " LATERAL " ORDER_FROM("u.p", "u.ok", "u.ot", "u.dk", "u.da") ON_CONFLICT RETURNING_KEYS;
/* The batch whose rows' ordering C decided whole (BATCH_READ_STMT_NAME): what BATCH_SQL stores
 * for them, without the LATERAL and its calls (backend CPU per receipt in batches of 20:
 * ~3% less, measured); the spec and path arrays ($9, $10) stay declared, NULL. */
#define BATCH_READ_COLS                                                                        \
    " SELECT s, e, t, p, r, st, le, CASE WHEN st = 'quarantined' THEN now() END, h, dk, "      \
    READ_AT("dk", "da") ", least(now(), " READ_AT("dk", "da") ")"
static const char BATCH_SQL_READ_TRACED[] =
    INSERT_SQL_HEAD TRACE_COLS BATCH_READ_COLS ", " TRACE_SQL("tc")
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::text[],"
    " $7::text[], $8::jsonb[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[])"
    " AS u(s, e, t, p, r, st, le, h, ok, ot, dk, da, tc)" ON_CONFLICT RETURNING_KEYS;
static const char BATCH_SQL_READ[] =
    INSERT_SQL_HEAD ORDER_COLS BATCH_READ_COLS
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::text[],"
    " $7::text[], $8::jsonb[], $9::text[], $10::text[], $11::text[], $12::text[])"
    " AS u(s, e, t, p, r, st, le, h, ok, ot, dk, da)" ON_CONFLICT RETURNING_KEYS;
static const char BATCH_SQL_NO_ORDER[] =
    INSERT_SQL_HEAD ", request_headers)"
    " SELECT s, e, t, p, r, st, le, CASE WHEN st = 'quarantined' THEN now() END, h"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::text[],"
    " $7::text[], $8::jsonb[]) AS u(s, e, t, p, r, st, le, h)" ON_CONFLICT RETURNING_KEYS;
static const char BATCH_SQL_NO_HEADERS[] =
    INSERT_SQL_HEAD ")"
    " SELECT s, e, t, p, r, st, le, CASE WHEN st = 'quarantined' THEN now() END"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::text[],"
    " $7::text[]) AS u(s, e, t, p, r, st, le)" ON_CONFLICT RETURNING_KEYS;

/* The VALUES batch (wi_store_set_values_batches), per schema form (the session's nparams):
 * the columns, and the tuple of each row, which takes row_nparams parameters numbered on from
 * the previous row's (values_sql); VALUES_COLS gives each one's batch_field column. Rows whose
 * ordering C decided whole only (the key $9 and time $10 as read, NULL when none): what
 * ROW_SQL stores for them, with no ordering function (see INSERT_SQL_READ). */
struct values_form {
    int nparams;
    const char *cols;
    const char *row;
    int row_nparams;
};
static const int VALUES_COLS[] = {0, 1, 2, 3, 4, 5, 6, 7, 10, 11, TRACE_COL};
#define VALUES_ROW_MAX_PARAMS ((int)(sizeof VALUES_COLS / sizeof VALUES_COLS[0]))
static const struct values_form VALUES_FORMS[] = {
    {NPARAMS, INSERT_SQL_HEAD TRACE_COLS, "(" ROW_SQL_READ_FIELDS("$9", "$10") ", " TRACE_SQL("$11") ")",
     VALUES_ROW_MAX_PARAMS},
    {NPARAMS_NO_TRACE, INSERT_SQL_HEAD ORDER_COLS, "(" ROW_SQL_READ_FIELDS("$9", "$10") ")", VALUES_ROW_MAX_PARAMS - 1},
    {NPARAMS_NO_ORDER, INSERT_SQL_HEAD ", request_headers)", ROW_SQL_NO_ORDER, NPARAMS_NO_ORDER},
    {NPARAMS_NO_HEADERS, INSERT_SQL_HEAD ")", ROW_SQL_NO_HEADERS, NPARAMS_NO_HEADERS},
};
/* Rows a VALUES batch takes at most; a larger batch goes as arrays. On Citus (one scope, measured
 * unprepared) VALUES is 3.4x the arrays' rate at 4 rows, 2.5x at 16, 0.87x at 64: its text is
 * planned on the worker at every statement, while the arrays' ~3 ms through the coordinator is
 * paid once a statement. Prepared (the coordinator plans it once), 63 instead of 32 changed
 * nothing measurable: 64 threads on one scope make batches of about 14. */
#define VALUES_MAX_ROWS 32
/* A VALUES batch's parameters are its rows' in turn; the protocol numbers at most 65535. */
_Static_assert(VALUES_MAX_ROWS * VALUES_ROW_MAX_PARAMS <= 65535, "a batch's parameters fit a Bind message");
_Static_assert(VALUES_MAX_ROWS < 64, "wi_store.values_prepared has a bit for each size");

/* A batch on a Citus node through db/citus/006's function, which writes the shard's table when
 * the node holds it (wi_store_set_shard_receive): BATCH_SQL's arrays, the keys inserted. */
static const char RECEIVE_SQL[] =
    "SELECT * FROM webhook_inbox_citus_receive($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

/* Element oids of BATCH_SQL's arrays, and the arrays' own oids. */
static const Oid BATCH_ELEM_TYPES[NPARAMS] = {25, 25, 25, 3802, 17, 25, 25, 3802, 25, 25, 25, 25, 25};
static const Oid BATCH_PARAM_TYPES[NPARAMS] = {1009, 1009, 1009, 3807, 1001, 1009, 1009, 3807, 1009, 1009, 1009, 1009, 1009};

/* The insert being made. Invariant: active only while conn is open (drop_conn clears it). */
struct attempt {
    int active;         /* sent, result not read yet: an interrupted wait resumes it */
    long long deadline; /* of the wait for that result (now_ms clock) */
    int raw;            /* payload goes to raw_body (asked, or refused as jsonb) */
    int quarantined;
    int own_reason;     /* last_error is WI_STORE_INVALID_JSON_REASON, not the row's */
    int no_headers;     /* jsonb refused the row: its headers are left out too, in case
                         * they were the cause (the event is what must not be lost) */
    int reconnected;    /* the one reconnect (lost connection, read-only server) is used */
    int reprepared;     /* the one re-setup after the server lost STMT_NAME is used */
};

/* The wi_store_insert_batch in progress. Invariant: rows [0, next) are committed (their
 * results filled) when per_row; a batch statement in flight is resumed only while conn is
 * open. wi_store_close and wi_store_insert clear it. */
struct batch {
    int active;  /* interrupted: the next call with the same rows resumes */
    int per_row; /* the batch statement was refused (a payload jsonb rejects): row by row */
    size_t next; /* per_row: the row to insert (or in flight) now */
};

/* Invariant: conn != NULL only in process pid, and then it is CONNECTION_OK with
 * STMT_NAME prepared and statement_timeout set (a broken one is closed at once). */
struct wi_store {
    PGconn *conn;
    char *conninfo;                 /* owned copy; wiped on free */
    char *password;                 /* from conninfo, to scrub messages; wiped on free */
    int connect_timeout_ms;
    int statement_timeout_ms;
    pid_t pid;                      /* process that opened conn */
    volatile sig_atomic_t interrupted; /* set by wi_store_interrupt, consumed by a call */
    struct attempt attempt;         /* the insert in flight, if attempt.active */
    struct batch batch;             /* the batch in progress, if batch.active */
    unsigned long reconnects;       /* connections reopened after a loss */
    int nparams;                    /* of the prepared statements: a STMT_FORMS entry's (what
                                     * the schema has) */
    char sqlstate[6];               /* of the last WI_STORE_EQUERY error */
    int values_batches;             /* wi_store_set_values_batches */
    int custom_plans;               /* wi_store_set_custom_plans */
    int shard_receive;              /* wi_store_set_shard_receive */
    int receive_ready;              /* RECEIVE_STMT_NAME is prepared on conn */
    uint64_t values_prepared;       /* bit n: VALUES_STMT_NAME of n rows is prepared on conn */
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

/* Overwrites every part of the password in msg with '*': libpq's password, and the URL's
 * password as written and decoded (see redact.h). */
static void scrub(const struct wi_store *s, char *msg)
{
    if (s)
        wi_redact_scrub(msg, s->conninfo, s->password);
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
        PQfinish(s->conn); /* non-blocking connection: the Terminate is never waited on */
    s->conn = NULL;
    s->values_prepared = 0;
    s->receive_ready = 0;
    s->attempt.active = 0;
    s->batch.active = 0;
}

/* Returns 1 and fills *err (WI_STORE_EINTR) when wi_store_interrupt was called since the
 * last call that reported it; the flag is consumed. */
static int consume_interrupt(struct wi_store *s, struct wi_err *err)
{
    if (!s->interrupted)
        return 0;
    s->interrupted = 0;
    set_err(s, err, WI_STORE_EINTR, "interrupted while waiting for PostgreSQL");
    return 1;
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

        if (consume_interrupt(s, err))
            return -1;
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

static int is_error(const PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);
    return st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE;
}

/* Flushes the output and collects every result of the command just sent: the first, or
 * the first error if any came (see below). On TRIP_OK *res is the caller's to PQclear. */
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
        /* Every result is read, and an error decides: the statement's rows can be followed
         * by the error of the commit that ends its implicit transaction (a deferred
         * constraint, a serialization failure, a distributed commit), and then nothing was
         * committed. Of two results the error is kept, else the first. */
        if (!first || (is_error(r) && !is_error(first))) {
            PQclear(first);
            first = r;
        } else {
            PQclear(r);
        }
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

/* Sends one setup command and waits for its result. want_ok: 1 fails on an error result,
 * 0 accepts it (a best-effort setting). */
static int setup_cmd(struct wi_store *s, const char *sql, int want_ok, long long deadline,
                     struct wi_err *err)
{
    PGresult *r;
    int ok;

    if (!PQsendQuery(s->conn, sql)) {
        set_err(s, err, WI_STORE_ECONNECT, "could not send a setup command: %s", PQerrorMessage(s->conn));
        return -1;
    }
    if (finish_trip(s, deadline, &r, err) != TRIP_OK)
        return -1;
    ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok && want_ok)
        result_err(s, r, err);
    PQclear(r);
    return ok || !want_ok ? 0 : -1;
}

/* PREPAREs name as sql with the first s->nparams of types and waits for it. Returns 0, or
 * -1 and fills *err. */
static int prepare(struct wi_store *s, const char *name, const char *sql, int nparams, const Oid *types,
                   long long deadline, struct wi_err *err)
{
    if (!PQsendPrepare(s->conn, name, sql, nparams, types)) {
        set_err(s, err, WI_STORE_ECONNECT, "could not send PREPARE: %s", PQerrorMessage(s->conn));
        return -1;
    }
    return setup_step(s, PGRES_COMMAND_OK, deadline, err);
}

/* The statements of each schema form, newest first: the one row's, the batch's, and the one
 * row's and the batch's when C read their ordering (READ_STMT_NAME, BATCH_READ_STMT_NAME;
 * NULL: the form has no ordering). A form with ordering also prepares the *_NO_ORDER pair
 * (UNKEYED_STMT_NAME, BATCH_UNKEYED_STMT_NAME, NPARAMS_NO_ORDER parameters: the first ones of
 * every form, in the same order) for rows that C found no key for and that carry no trace:
 * they store what the read statements store for such a row (ordering_key and ordering_at NULL,
 * next_attempt_at now(), trace_context NULL) without the four ordering arrays and the
 * expressions over them (backend CPU per statement of unkeyed rows: ~4% less, docs/capacity.md). */
struct stmt_form {
    int nparams;
    const char *insert;
    const char *batch;
    const char *read;
    const char *batch_read;
};
static const struct stmt_form STMT_FORMS[] = {
    {NPARAMS, INSERT_SQL_TRACED, BATCH_SQL_TRACED, INSERT_SQL_READ_TRACED, BATCH_SQL_READ_TRACED},
    {NPARAMS_NO_TRACE, INSERT_SQL, BATCH_SQL, INSERT_SQL_READ, BATCH_SQL_READ},
    {NPARAMS_NO_ORDER, INSERT_SQL_NO_ORDER, BATCH_SQL_NO_ORDER, NULL, NULL},
    {NPARAMS_NO_HEADERS, INSERT_SQL_NO_HEADERS, BATCH_SQL_NO_HEADERS, NULL, NULL},
};

/* Whether the session's role may take the shard's metadata lock (Citus: the table's owner).
 * Another role's batch would go through the function's INSERT ... SELECT on the distributed
 * table, which Citus runs through its INSERT ... SELECT machinery: dearer than the statements
 * it would replace. */
#define RECEIVE_OWNER_SQL                                                                      \
    "SELECT pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = 'webhook_inbox'::regclass), 'USAGE')"

/* wi_store_set_shard_receive: prepares RECEIVE_STMT_NAME with the newest schema form when the
 * session's role owns the inbox. A database without the function (42883: a layout older than
 * db/citus/006, or no Citus) leaves the session on its other statements. Returns 0, or -1 and
 * fills *err. */
static int receive_setup(struct wi_store *s, long long deadline, struct wi_err *err)
{
    PGresult *r;
    int owner;

    if (!s->shard_receive || s->nparams != NPARAMS)
        return 0;
    if (!PQsendQuery(s->conn, RECEIVE_OWNER_SQL)) {
        set_err(s, err, WI_STORE_ECONNECT, "could not send a setup command: %s", PQerrorMessage(s->conn));
        return -1;
    }
    if (finish_trip(s, deadline, &r, err) != TRIP_OK)
        return -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        result_err(s, r, err);
        PQclear(r);
        return -1;
    }
    owner = PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    if (!owner)
        return 0;
    if (prepare(s, RECEIVE_STMT_NAME, RECEIVE_SQL, s->nparams, BATCH_PARAM_TYPES, deadline, err) == 0) {
        s->receive_ready = 1;
        return 0;
    }
    if (strcmp(s->sqlstate, "42883"))
        return -1;
    s->sqlstate[0] = '\0';
    wi_err_clear(err);
    return 0;
}

/* Prepares the session: statement_timeout, the abandoned-statement check, STMT_NAME,
 * BATCH_STMT_NAME and READ_STMT_NAME (with request_headers when the table has it). Returns 0,
 * or -1 and fills *err. Also run again when the server lost STMT_NAME. */
static int session_setup(struct wi_store *s, long long deadline, struct wi_err *err)
{
    const struct stmt_form *f;
    char sql[64];

    s->values_prepared = 0; /* a new session, or one that lost its statements (26000) */
    s->receive_ready = 0;
    snprintf(sql, sizeof sql, "SET statement_timeout = %d", s->statement_timeout_ms);
    if (setup_cmd(s, sql, 1, deadline, err) < 0)
        return -1;
    if (s->custom_plans && setup_cmd(s, "SET plan_cache_mode = force_custom_plan", 1, deadline, err) < 0)
        return -1;
    /* We never send a cancel request (PQcancel blocks on a frozen server): when we give up
     * on a statement we close the connection, and this makes the server notice that and
     * abort the statement within CHECK_CLOSED_MS instead of finishing it for nobody.
     * PostgreSQL 14+ on Linux; elsewhere the SET fails and is ignored. */
    if (PQserverVersion(s->conn) >= 140000 &&
        setup_cmd(s, "SET client_connection_check_interval = " CHECK_CLOSED_MS, 0, deadline, err) < 0)
        return -1;
    /* 42703: a column the schema lacks (trace_context: v30 or older; ordering_key: v13 or
     * older; request_headers: v4); 42883: the ordering functions are missing. Each refusal
     * tries the next older form. */
    for (f = STMT_FORMS;; f++) {
        s->nparams = f->nparams;
        if (prepare(s, STMT_NAME, f->insert, s->nparams, PARAM_TYPES, deadline, err) == 0)
            break;
        if ((strcmp(s->sqlstate, "42703") && strcmp(s->sqlstate, "42883")) || f->nparams == NPARAMS_NO_HEADERS)
            return -1;
        s->sqlstate[0] = '\0';
    }
    if (f->read && (prepare(s, READ_STMT_NAME, f->read, s->nparams, PARAM_TYPES, deadline, err) < 0 ||
                    prepare(s, UNKEYED_STMT_NAME, INSERT_SQL_NO_ORDER, NPARAMS_NO_ORDER, PARAM_TYPES, deadline, err) < 0))
        return -1;
    if (f->batch_read && (prepare(s, BATCH_READ_STMT_NAME, f->batch_read, s->nparams, BATCH_PARAM_TYPES, deadline, err) < 0 ||
                          prepare(s, BATCH_UNKEYED_STMT_NAME, BATCH_SQL_NO_ORDER, NPARAMS_NO_ORDER, BATCH_PARAM_TYPES,
                                  deadline, err) < 0))
        return -1;
    if (prepare(s, BATCH_STMT_NAME, f->batch, s->nparams, BATCH_PARAM_TYPES, deadline, err) < 0)
        return -1;
    return receive_setup(s, deadline, err);
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
    if (wi_redact_url_split(conninfo)) {
        set_err(NULL, err, WI_ERR_ARG, "%s", WI_REDACT_SPLIT_MSG);
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
    /* target_session_attrs before dbname: the URL may override it. Every insert writes, so by
     * default a host of a multi-host URL that is read-only (a standby) is skipped. */
    static const char *const keys[] = {"target_session_attrs", "dbname", "fallback_application_name",
                                       "client_encoding", NULL};
    const char *vals[] = {"read-write", s->conninfo, "webhook_inbox", "UTF8", NULL};
    long long deadline;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;

    if (s->conn && (s->pid != getpid() || s->attempt.active))
        drop_conn(s); /* forked child: never touch the parent's session; or abandon an insert */
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
    if (session_setup(s, deadline, err) < 0)
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

/* Starts the attempt's deadline, before a send. */
static void start_attempt(struct wi_store *s, struct attempt *a)
{
    a->deadline = now_ms() + s->statement_timeout_ms + s->connect_timeout_ms;
}

/* Ends a send (ok: what PQsendQuery* returned): TRIP_OK (a->active), TRIP_LOST (the
 * connection broke) or TRIP_FAIL (err says why). */
static enum trip sent(struct wi_store *s, struct attempt *a, int ok, struct wi_err *err)
{
    if (!ok) {
        set_err(s, err, WI_STORE_ELOST, "could not send the insert: %s", PQerrorMessage(s->conn));
        return PQstatus(s->conn) == CONNECTION_BAD ? TRIP_LOST : TRIP_FAIL;
    }
    a->active = 1;
    return TRIP_OK;
}

/* Sends prepared statement stmt (s->nparams binary parameters) and starts the attempt's deadline. */
static enum trip send_prepared(struct wi_store *s, struct attempt *a, const char *stmt, int nparams,
                               const char *const *values, const int *lengths, const int *formats, struct wi_err *err)
{
    start_attempt(s, a);
    return sent(s, a, PQsendQueryPrepared(s->conn, stmt, nparams, values, lengths, formats, 0), err);
}

/* Reads row's ordering key and time from its payload into *o (ordering.c); nothing to read
 * for an unordered row or a raw one (no jsonb: the SQL functions give NULL too). */
static void derive_ordering(const struct wi_store_row *row, int raw, struct wi_ordering *o)
{
    if (!row->order_key || raw) {
        o->key = o->time = WI_ORDERING_NONE;
        return;
    }
    wi_ordering_derive(row->payload, row->payload_len, row->order_key, row->order_key_len,
                       row->order_time, row->order_time_len, o);
}

/* Whether row r, whose ordering reads as o, may go by the unkeyed statements (stmt_form): the
 * session's form has ordering, C found no key, and the form stores no trace or r has none. */
static int unkeyed(const struct wi_store *s, const struct wi_store_row *r, const struct wi_ordering *o)
{
    return s->nparams >= NPARAMS_NO_TRACE && o->key == WI_ORDERING_NONE && (s->nparams < NPARAMS || !r->trace);
}

/* Ordering parameter col (8: spec, 9: time path, 10: key, 11: time) of row r, whose reading
 * is o: the spec and path only for what C left to SQL, the key and time only for what it
 * read (NULL: SQL NULL). */
static const char *ordering_field(const struct wi_store_row *r, const struct wi_ordering *o, int col, size_t *len)
{
    int key_sql = o->key == WI_ORDERING_SQL, key_c = o->key == WI_ORDERING_VALUE;

    *len = 0;
    switch (col) {
    case 8:
        *len = r->order_key_len;
        return key_sql ? r->order_key : NULL;
    case 9:
        *len = r->order_time_len;
        return key_sql || (key_c && o->time == WI_ORDERING_SQL) ? r->order_time : NULL;
    case 10:
        *len = o->key_len;
        return key_c ? o->key_text : NULL;
    default:
        *len = o->time_len;
        return key_c && o->time == WI_ORDERING_VALUE ? o->time_text : NULL;
    }
}

/* Sends the insert for attempt a on the open connection (nothing waits here: libpq copies
 * the parameters into its output buffer, finish_trip flushes it). Starts a's deadline. */
static enum trip insert_send(struct wi_store *s, const struct wi_store_row *row,
                             struct attempt *a, struct wi_err *err)
{
    const char *values[NPARAMS];
    int lengths[NPARAMS];
    static const int formats[NPARAMS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}; /* binary: lengths, no NUL needed */
    char *jsonb = NULL, *headers = NULL;
    const char *status = a->quarantined ? "quarantined" : "pending";
    struct wi_ordering order;
    size_t len;
    int col, read;
    enum trip t;

    values[0] = row->source_scope; lengths[0] = (int)row->source_scope_len;
    values[1] = row->event_id;     lengths[1] = (int)row->event_id_len;
    values[2] = row->event_type;   lengths[2] = (int)row->event_type_len;
    if (a->raw) {
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
    if (a->own_reason) {
        values[6] = WI_STORE_INVALID_JSON_REASON;
        lengths[6] = (int)sizeof WI_STORE_INVALID_JSON_REASON - 1;
    } else {
        values[6] = row->last_error; lengths[6] = (int)row->last_error_len;
    }
    values[7] = NULL;              lengths[7] = 0;
    if (row->headers && !a->no_headers) {
        if (!(headers = malloc(row->headers_len + 1))) {
            free(jsonb);
            set_err(s, err, WI_ERR_NOMEM, "out of memory");
            return TRIP_FAIL;
        }
        headers[0] = 1;
        memcpy(headers + 1, row->headers, row->headers_len);
        values[7] = headers;       lengths[7] = (int)row->headers_len + 1;
    }
    derive_ordering(row, a->raw, &order);
    for (col = 8; col < TRACE_COL; col++) {
        values[col] = ordering_field(row, &order, col, &len);
        lengths[col] = (int)len;
    }
    values[TRACE_COL] = row->trace; lengths[TRACE_COL] = (int)row->trace_len;

    /* Nothing left to the ordering functions ($9, $10 NULL): the statement without them; no
     * key at all: the one without the ordering's parameters either. */
    read = s->nparams >= NPARAMS_NO_TRACE && order.key != WI_ORDERING_SQL && order.time != WI_ORDERING_SQL;
    if (unkeyed(s, row, &order))
        t = send_prepared(s, a, UNKEYED_STMT_NAME, NPARAMS_NO_ORDER, values, lengths, formats, err);
    else
        t = send_prepared(s, a, read ? READ_STMT_NAME : STMT_NAME, s->nparams, values, lengths, formats, err);
    free(jsonb);
    free(headers);
    return t;
}

/* Waits for the result of the insert in flight. Result classes: TRIP_OK (out filled),
 * TRIP_LOST (connection broke: retry may help), TRIP_FAIL (err says why; on
 * WI_STORE_EINTR the insert is still in flight). */
static enum trip insert_wait(struct wi_store *s, struct attempt *a, struct wi_store_result *out,
                             struct wi_err *err)
{
    PGresult *r = NULL;
    enum trip t = finish_trip(s, a->deadline, &r, err);

    if (t != TRIP_OK)
        return t;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        result_err(s, r, err);
        PQclear(r);
        return TRIP_FAIL;
    }
    out->inserted = PQntuples(r) == 1;
    out->stored_raw = a->raw;
    out->quarantined = a->quarantined;
    PQclear(r);
    return TRIP_OK;
}

/* Appends a big-endian int32. */
static char *put32(char *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
    return p + 4;
}

/* Column col of row r for a batch (PARAM_TYPES' order), as the bytes of its array element or
 * VALUES parameter (NULL: SQL NULL); o is r's ordering as read (derive_ordering). jsonb ones
 * (IS_JSONB) are their text; arrays_send and values_send add the version byte. */
#define IS_JSONB(col) ((col) == 3 || (col) == 7)
static const char *batch_field(const struct wi_store_row *r, const struct wi_ordering *o, int col, size_t *len)
{
    switch (col) {
    case 0: *len = r->source_scope_len; return r->source_scope;
    case 1: *len = r->event_id_len; return r->event_id;
    case 2: *len = r->event_type_len; return r->event_type;
    case 3: *len = r->payload_len; return r->raw ? NULL : r->payload;
    case 4: *len = r->payload_len; return r->raw ? r->payload : NULL;
    case 5:
        *len = r->quarantined ? sizeof "quarantined" - 1 : sizeof "pending" - 1;
        return r->quarantined ? "quarantined" : "pending";
    case 6: *len = r->last_error_len; return r->last_error;
    case 7: *len = r->headers_len; return r->headers;
    case TRACE_COL: *len = r->trace_len; return r->trace;
    default: return ordering_field(r, o, col, len);
    }
}

/* Sends BATCH_SQL (BATCH_SQL_READ when C decided every row's ordering, whole; RECEIVE_STMT_NAME
 * instead on a session that prepared it; BATCH_SQL_NO_ORDER with the first NPARAMS_NO_ORDER
 * arrays when every row is unkeyed() on a session without it) for rows[0..n), whose orderings
 * read as orders, on the open connection: each column as a one-dimensional array in binary
 * format (ndim, has-null flag, element oid, length, lower bound, then each element as int32
 * length or -1 for NULL, and its bytes). Starts a's deadline. */
static enum trip arrays_send(struct wi_store *s, const struct wi_store_row *rows, const struct wi_ordering *orders,
                             int whole, size_t n, struct attempt *a, struct wi_err *err)
{
    const char *values[NPARAMS];
    int lengths[NPARAMS];
    static const int formats[NPARAMS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    size_t sizes[NPARAMS], total = 0, i, len;
    char *buf, *p;
    int col, read = s->nparams >= NPARAMS_NO_TRACE && whole;
    /* every row may go by BATCH_UNKEYED_STMT_NAME (not where the shard's function is prepared) */
    int all_unkeyed = !s->receive_ready, ncols;
    enum trip t;

    for (i = 0; all_unkeyed && i < n; i++)
        all_unkeyed = unkeyed(s, &rows[i], &orders[i]);
    ncols = all_unkeyed ? NPARAMS_NO_ORDER : s->nparams;
    for (col = 0; col < ncols; col++) {
        sizes[col] = 20;
        for (i = 0; i < n; i++) {
            const char *v = batch_field(&rows[i], &orders[i], col, &len);
            sizes[col] += 4 + (v ? len + IS_JSONB(col) : 0);
        }
        if (sizes[col] > 0x3fffffff) {
            set_err(s, err, WI_ERR_ARG, "batch too large");
            return TRIP_FAIL;
        }
        total += sizes[col];
    }
    if (!(buf = malloc(total))) {
        set_err(s, err, WI_ERR_NOMEM, "out of memory");
        return TRIP_FAIL;
    }
    p = buf;
    for (col = 0; col < ncols; col++) {
        char *start = p, *flags;
        int has_null = 0;

        p = put32(p, 1);
        flags = p;
        p = put32(p, 0);
        p = put32(p, BATCH_ELEM_TYPES[col]);
        p = put32(p, (uint32_t)n);
        p = put32(p, 1);
        for (i = 0; i < n; i++) {
            const char *v = batch_field(&rows[i], &orders[i], col, &len);
            if (!v) {
                p = put32(p, 0xffffffffu);
                has_null = 1;
                continue;
            }
            p = put32(p, (uint32_t)(len + IS_JSONB(col)));
            if (IS_JSONB(col))
                *p++ = 1; /* jsonb binary format: version 1, then the JSON text */
            memcpy(p, v, len);
            p += len;
        }
        put32(flags, (uint32_t)has_null);
        values[col] = start;
        lengths[col] = (int)(p - start);
    }

    if (all_unkeyed)
        t = send_prepared(s, a, BATCH_UNKEYED_STMT_NAME, ncols, values, lengths, formats, err);
    else
        t = send_prepared(s, a, !read ? BATCH_STMT_NAME : s->receive_ready ? RECEIVE_STMT_NAME : BATCH_READ_STMT_NAME,
                          ncols, values, lengths, formats, err);
    free(buf);
    return t;
}

/* Appends row, a VALUES tuple numbered from $1, with each parameter number moved on by
 * base. Returns the end. */
static char *put_row(char *p, const char *row, int base)
{
    while (*row) {
        char *end;
        long k;

        if (*row != '$') {
            *p++ = *row++;
            continue;
        }
        k = strtol(row + 1, &end, 10);
        p += sprintf(p, "$%ld", k + base);
        row = end;
    }
    return p;
}

/* The VALUES batch statement of n rows in form f: "INSERT ... VALUES (row 1), ..., (row n)
 * ON CONFLICT DO NOTHING RETURNING the keys". Malloc'd (the caller frees), or NULL when out
 * of memory. */
static char *values_sql(const struct values_form *f, size_t n)
{
    static const char tail[] = ON_CONFLICT RETURNING_KEYS;
    size_t i, dollars = 0;
    const char *c;
    char *sql, *p;

    for (c = f->row; *c; c++)
        dollars += *c == '$';
    /* each parameter number grows to at most 4 digits more (the _Static_assert above) */
    if (!(sql = malloc(strlen(f->cols) + sizeof " VALUES " + n * (strlen(f->row) + dollars * 4 + 2) + sizeof tail)))
        return NULL;
    p = sql + sprintf(sql, "%s VALUES ", f->cols);
    for (i = 0; i < n; i++) {
        if (i) {
            memcpy(p, ", ", 2);
            p += 2;
        }
        p = put_row(p, f->row, (int)i * f->row_nparams);
    }
    memcpy(p, tail, sizeof tail);
    return sql;
}

/* The batch_field column of a VALUES batch's parameter k in form f (VALUES_COLS). */
static int values_col(const struct values_form *f, size_t k)
{
    return VALUES_COLS[k % (size_t)f->row_nparams];
}

/* Prepares the VALUES batch of n rows in form f (the session's) under name, once per session
 * (s->values_prepared): its own round trip, on a's deadline. Returns TRIP_OK, or as
 * finish_trip (an error result: TRIP_FAIL, err and sqlstate filled, the connection clean). */
static enum trip values_prepare(struct wi_store *s, const struct values_form *f, size_t n, const char *name,
                                const Oid *types, struct attempt *a, struct wi_err *err)
{
    PGresult *r = NULL;
    char *sql;
    enum trip t;

    if (s->values_prepared & (UINT64_C(1) << n))
        return TRIP_OK;
    if (!(sql = values_sql(f, n))) {
        set_err(s, err, WI_ERR_NOMEM, "out of memory");
        return TRIP_FAIL;
    }
    start_attempt(s, a);
    if (!PQsendPrepare(s->conn, name, sql, (int)(n * (size_t)f->row_nparams), types))
        t = sent(s, a, 0, err);
    else
        t = finish_trip(s, a->deadline, &r, err);
    free(sql);
    if (t == TRIP_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
        result_err(s, r, err);
        t = TRIP_FAIL;
    }
    PQclear(r);
    if (t == TRIP_OK)
        s->values_prepared |= UINT64_C(1) << n;
    return t;
}

/* Sends the VALUES batch statement for rows[0..n), whose orderings C read whole (orders[i],
 * derive_ordering), on the open connection: each row's fields as its tuple's parameters,
 * binary, jsonb with its version byte. Prepared once
 * per session and row count (values_prepare: at most VALUES_MAX_ROWS - 1 statements): the
 * coordinator of a Citus cluster then parses and plans it once, not at every batch. Starts
 * a's deadline. */
static enum trip values_send(struct wi_store *s, const struct values_form *f, const struct wi_store_row *rows,
                             const struct wi_ordering *orders, size_t n, struct attempt *a, struct wi_err *err)
{
    const size_t total = n * (size_t)f->row_nparams;
    const char **values = calloc(total, sizeof *values);
    int *lengths = calloc(total, sizeof *lengths), *formats = calloc(total, sizeof *formats);
    Oid *types = calloc(total, sizeof *types);
    char name[sizeof VALUES_STMT_NAME + 20], *jsonb = NULL, *p;
    size_t jsonb_bytes = 0, bytes = 0, k, len;
    enum trip t = TRIP_FAIL;

    snprintf(name, sizeof name, VALUES_STMT_NAME, n);
    if (!values || !lengths || !formats || !types) {
        set_err(s, err, WI_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (k = 0; k < total; k++) {
        int col = values_col(f, k);
        size_t i = k / (size_t)f->row_nparams;
        const char *v = batch_field(&rows[i], &orders[i], col, &len);
        jsonb_bytes += v && IS_JSONB(col) ? len + 1 : 0;
        bytes += 4 + (v ? len + IS_JSONB(col) : 0);
    }
    if (bytes > 0x3fffffff) { /* the server's limit on a Bind message */
        set_err(s, err, WI_ERR_ARG, "batch too large");
        goto done;
    }
    if (jsonb_bytes && !(jsonb = malloc(jsonb_bytes))) {
        set_err(s, err, WI_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (k = 0, p = jsonb; k < total; k++) {
        int col = values_col(f, k);
        size_t i = k / (size_t)f->row_nparams;
        const char *v = batch_field(&rows[i], &orders[i], col, &len);

        if (v && IS_JSONB(col)) {
            *p = 1; /* jsonb binary format: version 1, then the JSON text */
            memcpy(p + 1, v, len);
            v = p;
            p += ++len;
        }
        types[k] = PARAM_TYPES[col];
        formats[k] = 1;
        values[k] = v;
        lengths[k] = v ? (int)len : 0;
    }
    if ((t = values_prepare(s, f, n, name, types, a, err)) != TRIP_OK)
        goto done;
    start_attempt(s, a);
    t = sent(s, a, PQsendQueryPrepared(s->conn, name, (int)total, values, lengths, formats, 0), err);
done:
    free(values);
    free(lengths);
    free(formats);
    free(types);
    free(jsonb);
    return t;
}

/* Sends the batch statement for rows[0..n), each row's ordering read here once: RECEIVE_STMT_NAME
 * when the session prepared it and C read every row's ordering whole (the function writes the
 * shard with the ordering as read), else the VALUES form when the session asked for it, n <=
 * VALUES_MAX_ROWS and C read every row's ordering whole (a row left to the ordering functions
 * would cost a planning of them per VALUES row: see ORDER_AT), else BATCH_SQL. Starts a's
 * deadline. */
static enum trip batch_send(struct wi_store *s, const struct wi_store_row *rows, size_t n,
                            struct attempt *a, struct wi_err *err)
{
    static const struct wi_ordering none = {.key = WI_ORDERING_NONE, .time = WI_ORDERING_NONE};
    struct wi_ordering *orders = malloc(n * sizeof *orders);
    const struct values_form *f = NULL;
    int whole = 1; /* no row's ordering left to SQL */
    size_t i;
    enum trip t;

    if (!orders) {
        set_err(s, err, WI_ERR_NOMEM, "out of memory");
        return TRIP_FAIL;
    }
    for (i = 0; i < n; i++) {
        if (s->nparams < NPARAMS_NO_TRACE) {
            orders[i] = none; /* the schema stores no ordering */
            continue;
        }
        derive_ordering(&rows[i], rows[i].raw, &orders[i]);
        whole = whole && orders[i].key != WI_ORDERING_SQL && orders[i].time != WI_ORDERING_SQL;
    }
    for (i = 0; whole && !s->receive_ready && s->values_batches && n <= VALUES_MAX_ROWS &&
                i < sizeof VALUES_FORMS / sizeof VALUES_FORMS[0]; i++)
        if (VALUES_FORMS[i].nparams == s->nparams)
            f = &VALUES_FORMS[i];
    t = f ? values_send(s, f, rows, orders, n, a, err) : arrays_send(s, rows, orders, whole, n, a, err);
    free(orders);
    return t;
}

/* 1 when row r has the key of result row k (source_scope, event_id as text). */
static int same_key(const PGresult *res, int k, const struct wi_store_row *r)
{
    return (size_t)PQgetlength(res, k, 0) == r->source_scope_len &&
           (size_t)PQgetlength(res, k, 1) == r->event_id_len &&
           !memcmp(PQgetvalue(res, k, 0), r->source_scope, r->source_scope_len) &&
           !memcmp(PQgetvalue(res, k, 1), r->event_id, r->event_id_len);
}

/* Marks as inserted the rows whose keys RETURNING names: each key marks the first row
 * that carries it (a later row with the same key was skipped by ON CONFLICT). RETURNING
 * follows the input order in practice, so one walk does; otherwise a search. Returns 0,
 * or -1 when a returned key is not in the batch (never expected). */
static int batch_match(const PGresult *res, const struct wi_store_row *rows, size_t n,
                       struct wi_store_result *outs)
{
    int k = 0, nret = PQntuples(res);
    size_t i;

    for (i = 0; i < n && k < nret; i++)
        if (same_key(res, k, &rows[i])) {
            outs[i].inserted = 1;
            k++;
        }
    if (k == nret)
        return 0;
    for (i = 0; i < n; i++)
        outs[i].inserted = 0;
    for (k = 0; k < nret; k++) {
        for (i = 0; i < n && !same_key(res, k, &rows[i]); i++)
            ;
        if (i == n)
            return -1;
        outs[i].inserted = 1;
    }
    return 0;
}

/* Waits for the result of the batch in flight; fills outs[0..n) on TRIP_OK. Result classes
 * as insert_wait. */
static enum trip batch_wait(struct wi_store *s, struct attempt *a, const struct wi_store_row *rows,
                            size_t n, struct wi_store_result *outs, struct wi_err *err)
{
    PGresult *r = NULL;
    enum trip t = finish_trip(s, a->deadline, &r, err);
    size_t i;

    if (t != TRIP_OK)
        return t;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        result_err(s, r, err);
        PQclear(r);
        return TRIP_FAIL;
    }
    for (i = 0; i < n; i++) {
        outs[i].inserted = 0;
        outs[i].stored_raw = rows[i].raw;
        outs[i].quarantined = rows[i].quarantined;
    }
    if (batch_match(r, rows, n, outs) < 0) {
        PQclear(r);
        set_err(s, err, WI_STORE_EQUERY, "PostgreSQL returned a key that is not in the batch");
        return TRIP_FAIL;
    }
    PQclear(r);
    return TRIP_OK;
}

/* Returned by run for a batch the server refused for an error one row can cause
 * (wi_store_row_error): nothing was committed, the caller inserts the rows one by one. */
#define RUN_PER_ROW 1

int wi_store_row_error(const char *sqlstate)
{
    /* SQLSTATE classes that no single row causes: 08 connection, 26 statement name, 28
     * authorization, 3D/3F database and schema, 42 syntax or privileges (a missing table
     * or column), 53 resources (disk full, too many connections), 55 object state (a
     * lock_timeout behind a migration's lock: row by row would wait once per row), 57
     * operator intervention (cancel, statement_timeout, shutdown), 58 system error, F0
     * configuration. 25006 (read-only) is retried before this is asked. */
    static const char every_row[][3] = {"08", "25", "26", "28", "3D", "3F", "42", "53", "55", "57", "58", "F0"};
    size_t i;

    if (!sqlstate || strlen(sqlstate) != 5)
        return 0;
    for (i = 0; i < sizeof every_row / sizeof every_row[0]; i++)
        if (!strncmp(sqlstate, every_row[i], 2))
            return 0;
    return 1;
}

/* Runs one statement - the single-row insert (batch == 0, n == 1) or BATCH_SQL - with the
 * retry policy: reconnect once on a lost connection or a read-only server, set the session
 * up again once when the server lost our prepared statements, quarantine a single row that
 * jsonb refuses. Resumes the statement in flight after WI_STORE_EINTR. Returns 0 (outs
 * filled), RUN_PER_ROW, or -1 and fills *err. */
static int run(struct wi_store *s, const struct wi_store_row *rows, size_t n, int batch,
               struct wi_store_result *outs, struct wi_err *err)
{
    struct attempt *a = &s->attempt;
    int send = !(a->active && s->conn && s->pid == getpid());

    if (send) {
        memset(a, 0, sizeof *a);
        a->raw = rows[0].raw;
        a->quarantined = rows[0].quarantined;
    }
    for (;;) {
        enum trip t = TRIP_OK;

        if (send) {
            if (wi_store_connect(s, err) < 0)
                return -1;
            t = batch ? batch_send(s, rows, n, a, err) : insert_send(s, rows, a, err);
        }
        if (t == TRIP_OK)
            t = batch ? batch_wait(s, a, rows, n, outs, err) : insert_wait(s, a, outs, err);
        send = 1;
        if (t == TRIP_OK) {
            a->active = 0;
            return 0;
        }
        if (t == TRIP_FAIL && err->code == WI_STORE_EINTR && a->active)
            return -1; /* still in flight: the next call with these rows resumes the wait */
        a->active = 0;
        if (t == TRIP_LOST) {
            drop_conn(s);
            if (a->reconnected++ == 0)
                continue; /* reconnect once and retry: ON CONFLICT makes it idempotent */
            err->code = WI_STORE_ELOST;
            return -1;
        }
        /* The server is read-only (a standby, or default_transaction_read_only turned on
         * since we connected, as for a switchover): this connection will never take the
         * insert. Reconnect once - libpq walks the multi-host list again and skips read-only
         * hosts - and retry; the failed insert changed nothing. Else the next call does. */
        if (err->code == WI_STORE_EQUERY && !strcmp(s->sqlstate, "25006")) {
            drop_conn(s);
            if (a->reconnected++ == 0)
                continue;
            return -1;
        }
        /* One row's fault (a payload jsonb refuses, a constraint, an index limit, a
         * commit-time refusal): in a batch we do not know which row it was, and nothing was
         * committed: the caller goes row by row, so the others still go in. */
        if (batch && err->code == WI_STORE_EQUERY && wi_store_row_error(s->sqlstate))
            return RUN_PER_ROW;
        /* A payload jsonb refuses (bad JSON, \u0000, bad UTF-8, numeric range: class 22):
         * keep it raw and quarantined instead of losing a verified event. */
        if (err->code == WI_STORE_EQUERY && !strncmp(s->sqlstate, "22", 2)) {
            if (!a->raw) {
                a->raw = 1;
                a->quarantined = 1;
                a->own_reason = !rows[0].last_error;
                a->no_headers = 1;
                continue;
            }
        }
        /* The server dropped our prepared statement (DISCARD ALL, a pooler handing us
         * another session): set the session up again on this connection and retry once;
         * the failed EXECUTE changed nothing. */
        if (err->code == WI_STORE_EQUERY && !strcmp(s->sqlstate, "26000") && !a->reprepared) {
            a->reprepared = 1;
            s->sqlstate[0] = '\0';
            if (session_setup(s, now_ms() + s->connect_timeout_ms + s->statement_timeout_ms, err) < 0) {
                drop_conn(s);
                return -1;
            }
            continue;
        }
        /* Gave up (deadline) or the connection's state is unknown: drop it. No cancel
         * request: PQcancel() blocks on a server that stopped answering. The server aborts
         * an abandoned statement itself (client_connection_check_interval, session_setup);
         * one that completes anyway is a duplicate for the sender's retry (ON CONFLICT). */
        if (err->code != WI_STORE_EQUERY)
            drop_conn(s);
        return -1;
    }
}

/* Checks the sizes the protocol can carry (int32 lengths, a version byte for jsonb). */
static int row_fits(struct wi_store *s, const struct wi_store_row *row, struct wi_err *err)
{
    if (row->source_scope_len > 0x3fffffff || row->event_id_len > 0x3fffffff ||
        row->event_type_len > 0x3fffffff || row->payload_len > 0x3ffffffe ||
        row->last_error_len > 0x3fffffff || row->headers_len > 0x3ffffffe || row->order_key_len > 0x3fffffff ||
        row->order_time_len > 0x3fffffff) {
        set_err(s, err, WI_ERR_ARG, "field too large");
        return 0;
    }
    return 1;
}

int wi_store_insert(struct wi_store *s, const struct wi_store_row *row,
                    struct wi_store_result *out, struct wi_err *err)
{
    s->sqlstate[0] = '\0';
    s->batch.active = 0; /* a single insert ends any batch left unfinished */
    memset(out, 0, sizeof *out);
    if (!row_fits(s, row, err))
        return -1;
    if (consume_interrupt(s, err))
        return -1; /* nothing sent (an attempt in flight stays so) */
    return run(s, row, 1, 0, out, err);
}

int wi_store_insert_batch(struct wi_store *s, const struct wi_store_row *rows, size_t n,
                          struct wi_store_result *outs, struct wi_err *err)
{
    struct batch *b = &s->batch;
    size_t i;
    int rc;

    s->sqlstate[0] = '\0';
    if (n == 0)
        return 0;
    if (n > WI_STORE_BATCH_MAX) {
        set_err(s, err, WI_ERR_ARG, "more than %d rows in one batch", WI_STORE_BATCH_MAX);
        return -1;
    }
    for (i = 0; i < n; i++)
        if (!row_fits(s, &rows[i], err))
            return -1;
    if (consume_interrupt(s, err))
        return -1; /* nothing sent (a batch in progress stays so) */
    /* Resume: row by row, rows before next are committed whatever became of the
     * connection; the batch statement only while its connection is open. */
    if (!(b->active && s->pid == getpid() && (b->per_row || s->conn))) {
        if (s->attempt.active)
            drop_conn(s); /* never resume another call's statement as this batch's */
        memset(b, 0, sizeof *b);
        memset(outs, 0, n * sizeof *outs);
        b->per_row = n == 1; /* one row: the single statement, cheaper to plan (and than RECEIVE_SQL) */
    }
    b->active = 0;
    if (!b->per_row) {
        rc = run(s, rows, n, 1, outs, err);
        if (rc == 0)
            return 0;
        if (rc < 0) {
            b->active = err->code == WI_STORE_EINTR && s->attempt.active;
            return -1;
        }
        b->per_row = 1; /* RUN_PER_ROW: refused as a whole, nothing committed */
        b->next = 0;
    }
    for (; b->next < n; b->next++) {
        struct wi_store_result *out = &outs[b->next];

        s->sqlstate[0] = '\0';
        memset(out, 0, sizeof *out);
        if (consume_interrupt(s, err) || run(s, &rows[b->next], 1, 0, out, err) < 0) {
            /* This row alone is refused: it fails, the next ones go on. */
            if (err->code == WI_STORE_EQUERY && wi_store_row_error(s->sqlstate) && !s->attempt.active) {
                memset(out, 0, sizeof *out);
                out->failed = *err;
                wi_err_clear(err);
                continue;
            }
            /* Interrupted: rows before next are committed, next may be in flight; resume.
             * Any other error ends the batch (rows before next stay committed). */
            b->active = err->code == WI_STORE_EINTR;
            return -1;
        }
    }
    return 0;
}

void wi_store_set_values_batches(struct wi_store *s, int on)
{
    if (s)
        s->values_batches = on ? 1 : 0;
}

void wi_store_set_custom_plans(struct wi_store *s, int on)
{
    if (s)
        s->custom_plans = on ? 1 : 0;
}

void wi_store_set_shard_receive(struct wi_store *s, int on)
{
    if (s)
        s->shard_receive = on ? 1 : 0;
}

void wi_store_interrupt(struct wi_store *s)
{
    if (s)
        s->interrupted = 1;
}

void wi_store_close(struct wi_store *s)
{
    if (s) {
        drop_conn(s);
        s->batch.active = 0;
    }
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
