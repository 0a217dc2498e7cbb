/* inbox_binding.c - WebhookInbox::Inbox::Connection: one wi_store per Ruby object.
 * Converts values, releases the GVL around network waits, raises StoreError.
 * The pool, kwargs and receipts live in lib/webhook_inbox/inbox.rb. */
#include <ruby.h>
#include <ruby/thread.h>
#include <stdio.h>
#include <string.h>

#include "bindings.h"
#include "event_id.h"
#include "json.h"
#include "store.h"

static VALUE mWebhookInbox;

/* One connection; busy is set while a call runs without the GVL (no sharing). */
struct conn {
    struct wi_store *store; /* NULL after #close! */
    int busy;               /* a call is in flight on some thread */
};

static void conn_free(void *p)
{
    struct conn *c = p;
    wi_store_free(c->store); /* in a forked child this drops, never terminates, the parent's session */
    ruby_xfree(c);
}

static size_t conn_size(const void *p)
{
    (void)p;
    return sizeof(struct conn);
}

static const rb_data_type_t conn_type = {
    "WebhookInbox::Inbox::Connection",
    {NULL, conn_free, conn_size, NULL, {NULL}},
    NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE conn_alloc(VALUE klass)
{
    struct conn *c;
    return TypedData_Make_Struct(klass, struct conn, &conn_type, c);
}

/* The one validating getter: an initialized, open, idle connection. */
static struct conn *get_conn(VALUE self)
{
    struct conn *c;
    TypedData_Get_Struct(self, struct conn, &conn_type, c);
    if (!c->store)
        rb_raise(rb_eArgError, "WebhookInbox::Inbox::Connection is closed");
    if (c->busy)
        rb_raise(rb_eThreadError, "WebhookInbox::Inbox::Connection is in use by another thread");
    return c;
}

/* Maps a core error to an exception: bad arguments to ConfigurationError, the rest
 * (server down, timeout, lost connection, SQL error) to StoreError. */
static VALUE store_error(const struct wi_err *err)
{
    const char *klass = err->code == WI_ERR_ARG ? "ConfigurationError" : "StoreError";
    if (err->code == WI_ERR_NOMEM)
        rb_memerror();
    return rb_exc_new_cstr(rb_const_get(mWebhookInbox, rb_intern(klass)), err->msg);
}

static void raise_store_err(const struct wi_err *err)
{
    rb_exc_raise(store_error(err));
}

/* Connection.new(conninfo, connect_timeout_ms, statement_timeout_ms, values_batches = false,
 * custom_plans = false, shard_receive = false): parses, does not connect. values_batches: see
 * wi_store_set_values_batches; custom_plans: wi_store_set_custom_plans (Citus); shard_receive:
 * wi_store_set_shard_receive (Citus nodes). */
static VALUE conn_initialize(int argc, VALUE *argv, VALUE self)
{
    VALUE conninfo, connect_ms, statement_ms, values_batches, custom_plans, shard_receive;
    struct conn *c;
    struct wi_err err;

    rb_scan_args(argc, argv, "33", &conninfo, &connect_ms, &statement_ms, &values_batches, &custom_plans, &shard_receive);
    TypedData_Get_Struct(self, struct conn, &conn_type, c);
    if (c->store)
        rb_raise(rb_eArgError, "already initialized");
    c->store = wi_store_new(StringValueCStr(conninfo), NUM2INT(connect_ms), NUM2INT(statement_ms), &err);
    RB_GC_GUARD(conninfo);
    if (!c->store)
        raise_store_err(&err);
    wi_store_set_values_batches(c->store, RTEST(values_batches));
    wi_store_set_custom_plans(c->store, RTEST(custom_plans));
    wi_store_set_shard_receive(c->store, RTEST(shard_receive));
    return self;
}

/* One call of the core without the GVL: connect, one row, or a batch of n rows. */
struct insert_call {
    struct wi_store *store;
    struct wi_store_row *rows;    /* n rows; the pre-check may rewrite them (idempotently) */
    struct wi_store_result *outs; /* n results */
    size_t n;
    struct wi_err err;
    int rc;
    int connect_only;
    int batch;                    /* wi_store_insert_batch (else wi_store_insert, n == 1) */
};

/* Skips the jsonb round trip that would fail: the core would also catch the server's
 * refusal (SQLSTATE class 22), this only saves a request for a bad body - and, in a batch,
 * the row-by-row redo of the whole batch. Idempotent: a row already raw is left as is. */
static void precheck(struct wi_store_row *row)
{
    if (row->headers && !wi_json_jsonb_safe(row->headers, row->headers_len))
        row->headers = NULL, row->headers_len = 0; /* never a reason to refuse the event */
    if (row->raw || wi_json_jsonb_safe(row->payload, row->payload_len))
        return;
    row->raw = 1;
    if (!row->quarantined) {
        row->quarantined = 1;
        if (!row->last_error) {
            row->last_error = WI_STORE_INVALID_JSON_REASON;
            row->last_error_len = sizeof WI_STORE_INVALID_JSON_REASON - 1;
        }
    }
}

static void *insert_nogvl(void *p)
{
    struct insert_call *a = p;
    size_t i;

    if (a->connect_only) {
        a->rc = wi_store_connect(a->store, &a->err);
        return NULL;
    }
    for (i = 0; i < a->n; i++)
        precheck(&a->rows[i]);
    a->rc = a->batch ? wi_store_insert_batch(a->store, a->rows, a->n, a->outs, &a->err)
                     : wi_store_insert(a->store, a->rows, a->outs, &a->err);
    return NULL;
}

/* Async-signal-safe (only sets a flag): Ruby may call it from a signal handler. */
static void insert_ubf(void *p)
{
    wi_store_interrupt(((struct insert_call *)p)->store);
}

static VALUE check_ints(VALUE unused)
{
    (void)unused;
    rb_thread_check_ints();
    return Qnil;
}

/* Runs the call without the GVL. An interrupt (a signal handler, Thread#raise, kill)
 * either stops it before it starts or makes the core return WI_STORE_EINTR within ~50 ms,
 * keeping an insert already sent in flight. rb_thread_check_ints() then runs the
 * interrupt: if it raises (or kills), the insert is abandoned by closing the connection
 * (wi_store_close never waits); otherwise the call is made again and resumes waiting
 * for the same statement, under the same deadline. */
static void run_nogvl(struct conn *c, struct insert_call *a)
{
    int state = 0;

    a->store = c->store;
    for (;;) {
        a->rc = -1; /* stays so when rb_nogvl returns without calling us (INTR_FAIL) */
        a->err.code = WI_STORE_EINTR;
        snprintf(a->err.msg, sizeof a->err.msg, "interrupted");
        c->busy = 1;
        /* INTR_FAIL (as rb_thread_call_without_gvl2): no interrupt check (no raise/throw)
         * before busy is cleared. UBF_ASYNC_SAFE: insert_ubf only sets a sig_atomic_t
         * flag. Without it, a call on the main thread of a single-threaded process makes
         * Ruby create and kill a helper thread per call to run the UBF (~3 context
         * switches, ~90 us CPU per insert). */
        rb_nogvl(insert_nogvl, a, insert_ubf, a, RB_NOGVL_INTR_FAIL | RB_NOGVL_UBF_ASYNC_SAFE);
        c->busy = 0;
        if (a->rc == 0)
            return;
        if (a->err.code != WI_STORE_EINTR)
            raise_store_err(&a->err);
        rb_protect(check_ints, Qnil, &state);
        if (state) {
            wi_store_close(c->store); /* Ruby gave up on this insert: abandon it */
            rb_jump_tag(state);
        }
    }
}

/* A frozen string whose bytes stay put while the GVL is released. */
static VALUE pinned(VALUE v)
{
    StringValue(v);
    return rb_str_new_frozen(v);
}

#define SET_FIELD(row, field, str) \
    ((row)->field = RSTRING_PTR(str), (row)->field##_len = (size_t)RSTRING_LEN(str))

/* Points *ptr and *len at String str (nil: NULL), pinned into pins. */
static void set_opt(const char **ptr, size_t *len, VALUE pins, VALUE str)
{
    if (NIL_P(str))
        return;
    str = pinned(str);
    rb_ary_push(pins, str);
    *ptr = RSTRING_PTR(str);
    *len = (size_t)RSTRING_LEN(str);
}

/* Fills *row from the Ruby values, pinning each string into pins (kept alive by the caller
 * until the call returns). Text fields must already be UTF-8 without NUL (Inbox checks);
 * headers is nil or a JSON object's text (Inbox builds it); ordering is nil or
 * [key spec, time path or nil] (Inbox checks their form); trace is nil or the receipt span's
 * traceparent: one of another length than 55 bytes is left out here (the INSERT checks the
 * rest, store.c), never an error. */
static void fill_row(struct wi_store_row *row, VALUE pins, VALUE scope, VALUE id, VALUE type,
                     VALUE payload, VALUE raw, VALUE quarantined, VALUE last_error, VALUE headers,
                     VALUE ordering, VALUE trace)
{
    memset(row, 0, sizeof *row);
    scope = pinned(scope);
    id = pinned(id);
    type = pinned(type);
    payload = pinned(payload);
    rb_ary_push(pins, scope);
    rb_ary_push(pins, id);
    rb_ary_push(pins, type);
    rb_ary_push(pins, payload);
    SET_FIELD(row, source_scope, scope);
    SET_FIELD(row, event_id, id);
    SET_FIELD(row, event_type, type);
    SET_FIELD(row, payload, payload);
    if (!NIL_P(last_error)) {
        last_error = pinned(last_error);
        rb_ary_push(pins, last_error);
        SET_FIELD(row, last_error, last_error);
    }
    if (!NIL_P(headers)) {
        headers = pinned(headers);
        rb_ary_push(pins, headers);
        SET_FIELD(row, headers, headers);
    }
    if (!NIL_P(ordering)) {
        VALUE key, time;
        Check_Type(ordering, T_ARRAY);
        if (RARRAY_LEN(ordering) != 2)
            rb_raise(rb_eArgError, "ordering is [key spec, time path or nil]");
        key = RARRAY_AREF(ordering, 0);
        time = RARRAY_AREF(ordering, 1);
        set_opt(&row->order_key, &row->order_key_len, pins, StringValue(key));
        if (!NIL_P(time))
            set_opt(&row->order_time, &row->order_time_len, pins, StringValue(time));
    }
    if (RB_TYPE_P(trace, T_STRING) && RSTRING_LEN(trace) == WI_TRACEPARENT_LEN)
        set_opt(&row->trace, &row->trace_len, pins, trace);
    row->raw = RTEST(raw);
    row->quarantined = RTEST(quarantined);
}

/* bit 0: a row was inserted (else duplicate); bit 1: payload stored raw; bit 2: quarantined. */
static VALUE result_code(const struct wi_store_result *out)
{
    return INT2FIX(out->inserted | out->stored_raw << 1 | out->quarantined << 2);
}

/* #insert(scope, event_id, event_type, payload, raw, quarantined, last_error, headers[, ordering[, trace]])
 * -> Integer (see result_code). Text fields must already be UTF-8 without NUL
 * (Inbox#insert checks). */
static VALUE conn_insert(int argc, VALUE *argv, VALUE self)
{
    VALUE scope, id, type, payload, raw, quarantined, last_error, headers, ordering, trace;
    struct conn *c = get_conn(self);
    struct insert_call a;
    struct wi_store_row row;
    struct wi_store_result out;
    VALUE pins = rb_ary_new_capa(6);

    rb_scan_args(argc, argv, "82", &scope, &id, &type, &payload, &raw, &quarantined, &last_error, &headers, &ordering,
                 &trace);
    memset(&a, 0, sizeof a);
    memset(&out, 0, sizeof out);
    fill_row(&row, pins, scope, id, type, payload, raw, quarantined, last_error, headers, ordering, trace);
    a.rows = &row;
    a.outs = &out;
    a.n = 1;
    run_nogvl(c, &a);
    RB_GC_GUARD(pins);
    return result_code(&out);
}

/* #insert_batch([[scope, event_id, event_type, payload, raw, quarantined, last_error, headers[, ordering[, trace]]], ...])
 * -> [Integer or StoreError, ...]: the rows in one statement and one commit (see
 * wi_store_insert_batch), per row, in order, its result code - or, for a row the server
 * refused alone (nothing of it stored), a StoreError saying why. At most
 * WI_STORE_BATCH_MAX rows. Raises StoreError when the batch failed as a whole. */
static VALUE conn_insert_batch(VALUE self, VALUE list)
{
    struct conn *c = get_conn(self);
    struct insert_call a;
    struct wi_store_row *rows;
    struct wi_store_result *outs;
    VALUE pins, result, rows_buf, outs_buf;
    long n, i;

    Check_Type(list, T_ARRAY);
    n = RARRAY_LEN(list);
    if (n < 1 || n > WI_STORE_BATCH_MAX)
        rb_raise(rb_eArgError, "a batch holds 1 to %d rows", WI_STORE_BATCH_MAX);
    list = rb_ary_dup(list); /* the caller may change its array while the GVL is released */
    pins = rb_ary_new_capa(n * 6);
    rows = ALLOCV_N(struct wi_store_row, rows_buf, n);
    outs = ALLOCV_N(struct wi_store_result, outs_buf, n);
    for (i = 0; i < n; i++) {
        VALUE r = rb_ary_entry(list, i);
        Check_Type(r, T_ARRAY);
        if (RARRAY_LEN(r) < 8 || RARRAY_LEN(r) > 10)
            rb_raise(rb_eArgError, "a batch row has 8 fields, 9 with ordering, 10 with a trace");
        fill_row(&rows[i], pins, RARRAY_AREF(r, 0), RARRAY_AREF(r, 1), RARRAY_AREF(r, 2),
                 RARRAY_AREF(r, 3), RARRAY_AREF(r, 4), RARRAY_AREF(r, 5), RARRAY_AREF(r, 6),
                 RARRAY_AREF(r, 7), RARRAY_LEN(r) >= 9 ? RARRAY_AREF(r, 8) : Qnil,
                 RARRAY_LEN(r) == 10 ? RARRAY_AREF(r, 9) : Qnil);
    }
    memset(&a, 0, sizeof a);
    memset(outs, 0, (size_t)n * sizeof *outs);
    a.rows = rows;
    a.outs = outs;
    a.n = (size_t)n;
    a.batch = 1;
    run_nogvl(c, &a);
    result = rb_ary_new_capa(n);
    for (i = 0; i < n; i++)
        rb_ary_push(result, outs[i].failed.code ? store_error(&outs[i].failed) : result_code(&outs[i]));
    ALLOCV_END(rows_buf);
    ALLOCV_END(outs_buf);
    RB_GC_GUARD(pins);
    RB_GC_GUARD(list);
    return result;
}

/* #connect: opens the connection now (the pool's health check); returns self. */
static VALUE conn_connect(VALUE self)
{
    struct conn *c = get_conn(self);
    struct insert_call a;

    memset(&a, 0, sizeof a);
    a.connect_only = 1;
    run_nogvl(c, &a);
    return self;
}

/* #close: closes the connection and frees the store; idempotent. */
static VALUE conn_close(VALUE self)
{
    struct conn *c;
    TypedData_Get_Struct(self, struct conn, &conn_type, c);
    if (c->busy)
        rb_raise(rb_eThreadError, "WebhookInbox::Inbox::Connection is in use by another thread");
    wi_store_free(c->store);
    c->store = NULL;
    return Qnil;
}

static VALUE conn_closed_p(VALUE self)
{
    struct conn *c;
    TypedData_Get_Struct(self, struct conn, &conn_type, c);
    return c->store ? Qfalse : Qtrue;
}

/* #backend_pid: the server process of the open connection, or nil. */
static VALUE conn_backend_pid(VALUE self)
{
    struct conn *c;
    int pid;
    TypedData_Get_Struct(self, struct conn, &conn_type, c);
    pid = wi_store_backend_pid(c->store);
    return pid ? INT2NUM(pid) : Qnil;
}

static VALUE conn_reconnects(VALUE self)
{
    struct conn *c;
    TypedData_Get_Struct(self, struct conn, &conn_type, c);
    return ULONG2NUM(wi_store_reconnects(c->store));
}

/* #inspect never shows the connection string (it may hold a password). */
static VALUE conn_inspect(VALUE self)
{
    struct conn *c;
    TypedData_Get_Struct(self, struct conn, &conn_type, c);
    return rb_sprintf("#<WebhookInbox::Inbox::Connection %s>",
                      !c->store ? "closed" : wi_store_backend_pid(c->store) ? "connected" : "idle");
}

/* Inbox.stored_event_id(id): id itself up to Inbox::EVENT_ID_MAX_BYTES, else its hashed
 * key (event_id.h), a new US-ASCII String. TypeError for a non-String. */
static VALUE inbox_stored_event_id(VALUE klass, VALUE id)
{
    char out[WI_EVENT_ID_HASHED_LEN + 1];

    (void)klass;
    StringValue(id);
    if (!wi_event_id_hashed((size_t)RSTRING_LEN(id)))
        return id;
    if (wi_event_id_hash(RSTRING_PTR(id), (size_t)RSTRING_LEN(id), out) < 0)
        rb_raise(rb_eNoMemError, "webhook_inbox: SHA-256 of an event id failed (libcrypto)");
    return rb_usascii_str_new(out, (long)strlen(out));
}

void wi_inbox_binding_init(VALUE mod)
{
    VALUE cInbox, cConn;

    mWebhookInbox = mod;
    cInbox = rb_define_class_under(mod, "Inbox", rb_cObject);
    rb_define_const(cInbox, "EVENT_ID_MAX_BYTES", INT2FIX(WI_EVENT_ID_MAX));
    rb_define_singleton_method(cInbox, "stored_event_id", inbox_stored_event_id, 1);
    cConn = rb_define_class_under(cInbox, "Connection", rb_cObject);
    rb_define_alloc_func(cConn, conn_alloc);
    rb_define_method(cConn, "initialize", conn_initialize, -1);
    rb_define_method(cConn, "insert", conn_insert, -1);
    rb_define_method(cConn, "insert_batch", conn_insert_batch, 1);
    rb_define_method(cConn, "connect", conn_connect, 0);
    rb_define_method(cConn, "close", conn_close, 0);
    rb_define_method(cConn, "closed?", conn_closed_p, 0);
    rb_define_method(cConn, "backend_pid", conn_backend_pid, 0);
    rb_define_method(cConn, "reconnects", conn_reconnects, 0);
    rb_define_method(cConn, "inspect", conn_inspect, 0);
}
