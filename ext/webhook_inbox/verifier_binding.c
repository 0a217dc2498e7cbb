/* verifier_binding.c - Ruby binding of sig.c: WebhookInbox::Verifier (setup, verify),
 * header lookup in a Hash or Rack env, Event construction, error mapping. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <ruby/encoding.h>
#include <stdatomic.h>
#include <ruby/thread.h>
#include <string.h>
#include "bindings.h"
#include "canon.h"
#include "json.h"
#include "sig.h"
#include "sig_braintree.h"
#include "sig_paypal.h"

/* Invariant: core is NULL until #_setup succeeds; candidates[i] is a frozen Array of the
 * Hash keys tried for header slot i (Rack env, lowercase, Title-Case, underscores). */
struct verifier {
    struct wi_sig_verifier *core; /* owned; keys wiped on free */
    VALUE provider;               /* Symbol returned as Event#provider */
    VALUE candidates;             /* Array of Arrays of frozen Strings, one per slot */
    const char *names[WI_SIG_MAX_HEADERS]; /* canonical header names (owned by core) */
    size_t nslots;
    size_t max_body;
};

static VALUE cVerifier, cEvent;
static ID id_to_i, id_reasons[WI_SIG_E_UNKNOWN_KEY - WI_SIG_E_MISSING_SIGNATURE + 1];
static VALUE str_request_method;

static void verifier_mark(void *p)
{
    struct verifier *v = p;
    rb_gc_mark(v->provider);
    rb_gc_mark(v->candidates);
}

static void verifier_free(void *p)
{
    struct verifier *v = p;
    wi_sig_verifier_free(v->core);
    xfree(v);
}

static size_t verifier_size(const void *p)
{
    (void)p;
    return sizeof(struct verifier) + 4096; /* core state: keys and digest contexts */
}

static const rb_data_type_t verifier_type = {
    .wrap_struct_name = "WebhookInbox::Verifier",
    .function = {.dmark = verifier_mark, .dfree = verifier_free, .dsize = verifier_size},
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE verifier_alloc(VALUE klass)
{
    struct verifier *v;
    VALUE obj = TypedData_Make_Struct(klass, struct verifier, &verifier_type, v);
    v->provider = Qnil;
    v->candidates = Qnil;
    return obj;
}

/* The one validating getter: a configured verifier, or a ConfigurationError. */
static struct verifier *get_verifier(VALUE self)
{
    struct verifier *v = rb_check_typeddata(self, &verifier_type);
    /* candidates is the last field _setup fills: a setup that raised midway is "not set up". */
    if (!v->core || NIL_P(v->candidates))
        rb_raise(rb_path2class("WebhookInbox::ConfigurationError"), "verifier is not set up");
    return v;
}

/* Maps a core error to an exception. Messages come from the core: no secrets, no payload. */
static void raise_wi_err(const struct wi_err *e, VALUE reason_override)
{
    if (e->code == WI_ERR_NOMEM) rb_memerror();
    if (e->code == WI_ERR_ARG)
        rb_raise(rb_path2class("WebhookInbox::ConfigurationError"), "%s", e->msg);
    if (e->code >= WI_SIG_E_MISSING_SIGNATURE && e->code <= WI_SIG_E_UNKNOWN_KEY) {
        VALUE args[2] = {ID2SYM(id_reasons[e->code - WI_SIG_E_MISSING_SIGNATURE]),
                         rb_str_new_cstr(e->msg)};
        rb_exc_raise(rb_class_new_instance(2, args, rb_path2class("WebhookInbox::VerificationError")));
    }
    if (e->code >= WI_JSON_E_SYNTAX && e->code <= WI_JSON_E_SURROGATE) {
        VALUE args[2] = {reason_override, rb_str_new_cstr(e->msg)};
        rb_exc_raise(rb_class_new_instance(2, args, rb_path2class("WebhookInbox::VerificationError")));
    }
    rb_raise(rb_path2class("WebhookInbox::Error"), "%s", e->msg);
}

static VALUE frozen(const char *s, size_t n)
{
    return rb_obj_freeze(rb_str_new(s, (long)n));
}

/* Keys tried for a header named like "x-hub-signature-256". */
static VALUE candidate_keys(const char *name)
{
    char buf[128];
    size_t n = strlen(name);
    VALUE a = rb_ary_new_capa(5);
    if (n + 6 > sizeof buf) rb_raise(rb_path2class("WebhookInbox::ConfigurationError"), "header name too long");
    memcpy(buf, "HTTP_", 5); /* Rack env */
    for (size_t i = 0; i < n; i++) buf[5 + i] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
    rb_ary_push(a, frozen(buf, n + 5));
    rb_ary_push(a, frozen(name, n)); /* lowercase (Rack 3 response style, HTTP/2) */
    for (size_t i = 0; i < n; i++) /* Title-Case */
        buf[i] = (i == 0 || name[i - 1] == '-') ? (char)toupper((unsigned char)name[i]) : name[i];
    rb_ary_push(a, frozen(buf, n));
    for (size_t i = 0; i < n; i++) buf[i] = name[i] == '-' ? '_' : name[i];
    rb_ary_push(a, frozen(buf, n));
    for (size_t i = 0; i < n; i++) buf[i] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
    rb_ary_push(a, frozen(buf, n));
    return rb_obj_freeze(a);
}

static char *opt_cstr(VALUE s)
{
    return NIL_P(s) ? NULL : StringValueCStr(s);
}

/* _setup(provider, entry name, tolerance, max_body, allow_simple, alg, encoding, prefix,
 *        signature_header, timestamp_header, id_header, template, secrets, id_from_body) */
static VALUE verifier_setup(int argc, VALUE *argv, VALUE self)
{
    struct verifier *v = rb_check_typeddata(self, &verifier_type);
    struct wi_sig_config cfg;
    struct wi_err err;
    VALUE secrets, cands;

    rb_check_arity(argc, 14, 14);
    if (v->core) rb_raise(rb_path2class("WebhookInbox::ConfigurationError"), "verifier already set up");
    memset(&cfg, 0, sizeof cfg);
    cfg.provider = StringValueCStr(argv[1]);
    cfg.tolerance = NIL_P(argv[2]) ? -1 : NUM2LL(argv[2]);
    cfg.max_body = NUM2SIZET(argv[3]);
    cfg.allow_simple = RTEST(argv[4]);
    cfg.alg = (enum wi_hmac_alg)NUM2INT(argv[5]);
    cfg.encoding = (enum wi_sig_encoding)NUM2INT(argv[6]);
    cfg.prefix = opt_cstr(argv[7]);
    cfg.signature_header = opt_cstr(argv[8]);
    cfg.timestamp_header = opt_cstr(argv[9]);
    cfg.id_header = opt_cstr(argv[10]);
    cfg.template = opt_cstr(argv[11]);
    cfg.id_from_body = RTEST(argv[13]);
    secrets = rb_Array(argv[12]);
    for (long i = 0; i < RARRAY_LEN(secrets); i++) Check_Type(RARRAY_AREF(secrets, i), T_STRING);

    struct wi_sig_verifier *core = wi_sig_verifier_new(&cfg, &err);
    if (!core) raise_wi_err(&err, Qnil);
    for (long i = 0; i < RARRAY_LEN(secrets); i++) {
        VALUE s = RARRAY_AREF(secrets, i);
        if (wi_sig_verifier_add_secret(core, RSTRING_PTR(s), (size_t)RSTRING_LEN(s), &err)) {
            wi_sig_verifier_free(core);
            raise_wi_err(&err, Qnil);
        }
        RB_GC_GUARD(s);
    }
    v->core = core;
    v->provider = argv[0];
    v->max_body = cfg.max_body;
    v->nslots = wi_sig_verifier_headers(core, v->names);
    cands = rb_ary_new_capa((long)v->nslots);
    for (size_t i = 0; i < v->nslots; i++)
        rb_ary_push(cands, v->names[i] ? candidate_keys(v->names[i]) : Qnil);
    v->candidates = rb_obj_freeze(cands);
    RB_GC_GUARD(secrets);
    RB_GC_GUARD(argv[1]);
    return self;
}

static VALUE header_value(VALUE val)
{
    if (RB_TYPE_P(val, T_STRING)) return val;
    if (RB_TYPE_P(val, T_ARRAY) && RARRAY_LEN(val) > 0 && RB_TYPE_P(RARRAY_AREF(val, 0), T_STRING))
        return RARRAY_AREF(val, 0);
    return Qundef;
}

struct scan_ctx {
    struct verifier *v;
    VALUE *vals;
};

/* Slow path for plain Hashes with unusual key spelling: normalize each key
 * (lowercase, '_' -> '-', no "http-" prefix) and fill the still-missing slots. */
static int scan_key(VALUE key, VALUE val, VALUE arg)
{
    struct scan_ctx *c = (struct scan_ctx *)arg;
    char buf[128];
    const char *p;
    long n;
    if (SYMBOL_P(key)) key = rb_sym2str(key);
    if (!RB_TYPE_P(key, T_STRING)) return ST_CONTINUE;
    p = RSTRING_PTR(key);
    n = RSTRING_LEN(key);
    if (n >= (long)sizeof buf) return ST_CONTINUE;
    for (long i = 0; i < n; i++) buf[i] = p[i] == '_' ? '-' : (char)tolower((unsigned char)p[i]);
    p = buf;
    if (n > 5 && !memcmp(buf, "http-", 5)) p += 5, n -= 5;
    for (size_t i = 0; i < c->v->nslots; i++) {
        const char *name = c->v->names[i];
        if (name && c->vals[i] == Qundef && strlen(name) == (size_t)n && !memcmp(name, p, (size_t)n))
            c->vals[i] = header_value(val);
    }
    return ST_CONTINUE;
}

static int64_t now_seconds(VALUE now)
{
    long long t;
    if (NIL_P(now)) return (int64_t)time(NULL);
    if (RB_INTEGER_TYPE_P(now)) t = NUM2LL(now);
    else if (RB_FLOAT_TYPE_P(now)) { /* clamp before the cast: NaN or beyond long long is UB */
        double d = RFLOAT_VALUE(now);
        if (isnan(d)) rb_raise(rb_eArgError, "now: must not be NaN");
        t = d > 0x1p60 ? 1LL << 60 : d < -0x1p60 ? -(1LL << 60) : (long long)d;
    }
    else if (rb_obj_is_kind_of(now, rb_cTime)) t = NUM2LL(rb_funcall(now, id_to_i, 0));
    else rb_raise(rb_eTypeError, "now: must be a Time, an Integer (unix seconds) or nil");
    if (t > (1LL << 60)) t = 1LL << 60;
    if (t < -(1LL << 60)) t = -(1LL << 60);
    return t;
}

/* Bodies at least this large are verified without the GVL, so other Ruby threads (Puma)
 * keep running while a big body is hashed. The work is bounded (canon.h) and the Didit V2
 * canonicalization polls req.cancel, which the unblocking function sets: Thread#raise,
 * Thread#kill and signals reach a thread inside verify within a few microseconds. */
#define NOGVL_MIN_BODY (64 * 1024)

struct verify_call {
    const struct wi_sig_verifier *core;
    struct wi_sig_request *req;
    struct wi_sig_event *ev;
    struct wi_err *err;
    _Atomic int cancel;
    int rc;
};

static void *verify_nogvl(void *arg)
{
    struct verify_call *c = arg;
    c->rc = wi_sig_verify(c->core, c->req, c->ev, c->err);
    return NULL;
}

static void verify_ubf(void *arg)
{
    struct verify_call *c = arg;
    atomic_store(&c->cancel, 1);
}

/* Runs the verification without the GVL. An interrupted run lets Ruby handle the interrupt
 * (raise, kill, a trap); if that returns, the verification starts again. */
static void verify_interruptible(struct verify_call *call)
{
    call->req->cancel = &call->cancel;
    for (;;) {
        atomic_store(&call->cancel, 0);
        rb_thread_call_without_gvl(verify_nogvl, call, verify_ubf, call);
        if (!call->rc || call->err->code != WI_CANON_E_INTERRUPTED) return;
        rb_thread_check_ints();
    }
}

static VALUE json_str(struct wi_slice s, int escaped)
{
    if (!escaped) return rb_utf8_str_new(s.p, (long)s.n);
    VALUE str = rb_utf8_str_new(NULL, (long)s.n);
    size_t n = wi_json_unescape(s.p, s.n, RSTRING_PTR(str));
    rb_str_set_len(str, (long)n);
    return str;
}

/* An event id or type goes into a text column: valid UTF-8 without NUL, else the
 * delivery is malformed (a header's raw bytes, or a JSON \u0000 / lone surrogate). */
static VALUE event_text(VALUE str, const char *what)
{
    struct wi_err err;
    if (rb_enc_str_coderange(str) == ENC_CODERANGE_BROKEN || memchr(RSTRING_PTR(str), 0, (size_t)RSTRING_LEN(str))) {
        wi_err_set(&err, WI_SIG_E_MALFORMED_PAYLOAD, "event %s is not UTF-8 text without NUL", what);
        raise_wi_err(&err, Qnil);
    }
    return str;
}

/* Didit Simple: the JSON object of the four fields its signature covers, keys sorted, values
 * as the body wrote them (a field that is absent or not a string or number, signed as
 * empty, is left out). This, not the body, is what such an event may be trusted for. */
static VALUE simple_body(const struct wi_sig_event *ev)
{
    static const char *const keys[] = {"session_id", "status", "timestamp", "webhook_type"};
    VALUE out = rb_utf8_str_new_cstr("{");
    int first = 1;
    for (int i = 0; i < 4; i++) {
        const struct wi_json_field *f = &ev->simple_fields[i];
        if (f->kind != WI_JSON_STRING && f->kind != WI_JSON_NUMBER) continue;
        rb_str_catf(out, "%s\"%s\":", first ? "" : ",", keys[i]);
        if (f->kind == WI_JSON_STRING) rb_str_cat(out, "\"", 1);
        rb_str_cat(out, f->value.p, (long)f->value.n);
        if (f->kind == WI_JSON_STRING) rb_str_cat(out, "\"", 1);
        first = 0;
    }
    rb_str_cat(out, "}", 1);
    return rb_obj_freeze(out);
}

/* The JSON a verified challenge is answered with, or nil. The values are JSON string bodies
 * the scan validated, copied as they are. */
static VALUE challenge_answer(const struct wi_sig_event *ev)
{
    VALUE out;
    switch (ev->challenge) {
    case WI_CHALLENGE_NONE:
    case WI_CHALLENGE_BRAINTREE_GET: return Qnil; /* a GET: Verifier#braintree_challenge */
    case WI_CHALLENGE_DISCORD_PING: return rb_obj_freeze(rb_utf8_str_new_cstr("{\"type\":1}"));
    case WI_CHALLENGE_SLACK_URL: out = rb_utf8_str_new_cstr("{\"challenge\":\""); break;
    case WI_CHALLENGE_ZOOM_URL: out = rb_utf8_str_new_cstr("{\"plainToken\":\""); break;
    default: return Qnil;
    }
    rb_str_cat(out, ev->challenge_value.p, (long)ev->challenge_value.n);
    if (ev->challenge == WI_CHALLENGE_ZOOM_URL) rb_str_catf(out, "\",\"encryptedToken\":\"%s", ev->challenge_hmac);
    rb_str_cat_cstr(out, "\"}");
    return rb_obj_freeze(out);
}

/* An Event filled member by member. rb_struct_new runs Event#initialize (a method call and
 * an arity check): 4x the instructions, 40 % of the binding's own for a 2 KiB Stripe body. */
static VALUE new_event(VALUE provider, VALUE id, VALUE type, VALUE ts, VALUE body, VALUE body_signed,
                       VALUE challenge)
{
    const VALUE members[] = {provider, id, type, ts, body, body_signed, challenge};
    VALUE event = rb_obj_alloc(cEvent);
    for (int i = 0; i < (int)(sizeof members / sizeof *members); i++) RSTRUCT_SET(event, i, members[i]);
    return event;
}

/* The String s as a slice (a frozen snapshot when snap), or absent for nil. */
static struct wi_slice opt_slice(VALUE *s, int snap)
{
    if (NIL_P(*s)) return (struct wi_slice){NULL, 0};
    StringValue(*s);
    if (snap) *s = rb_str_new_frozen(*s);
    return (struct wi_slice){RSTRING_PTR(*s), (size_t)RSTRING_LEN(*s)};
}

/* _verify(body, headers, now, url, method) -> Event; raises VerificationError. url and
 * method (Strings or nil) are what a template's {url} and {method} sign. */
static VALUE verifier_verify(VALUE self, VALUE body, VALUE headers, VALUE now, VALUE url, VALUE method)
{
    struct verifier *v = get_verifier(self);
    struct wi_sig_request req;
    struct wi_sig_event ev;
    struct wi_err err;
    VALUE vals[WI_SIG_MAX_HEADERS];
    int missing = 0;

    StringValue(body);
    if ((size_t)RSTRING_LEN(body) > v->max_body) { /* first: before touching anything else */
        wi_err_set(&err, WI_SIG_E_PAYLOAD_TOO_LARGE, "body is %ld bytes; the limit is %zu",
                   RSTRING_LEN(body), v->max_body);
        raise_wi_err(&err, Qnil);
    }
    Check_Type(headers, T_HASH);
    memset(&req, 0, sizeof req);
    req.now = now_seconds(now);
    for (size_t i = 0; i < v->nslots; i++) {
        VALUE cands = RARRAY_AREF(v->candidates, (long)i);
        vals[i] = Qundef;
        if (NIL_P(cands)) continue;
        for (long j = 0; j < RARRAY_LEN(cands) && vals[i] == Qundef; j++) {
            VALUE hv = rb_hash_lookup2(headers, RARRAY_AREF(cands, j), Qundef);
            if (hv != Qundef) vals[i] = header_value(hv);
        }
        if (vals[i] == Qundef) missing = 1;
    }
    if (missing && rb_hash_lookup2(headers, str_request_method, Qundef) == Qundef) {
        struct scan_ctx c = {v, vals};
        rb_hash_foreach(headers, scan_key, (VALUE)&c);
    }
    VALUE snap = body;
    int nogvl = RSTRING_LEN(body) >= NOGVL_MIN_BODY;
    if (nogvl) { /* frozen (shared, not copied) snapshots: no other thread can change them */
        snap = rb_str_new_frozen(body);
        for (size_t i = 0; i < v->nslots; i++)
            if (vals[i] != Qundef) vals[i] = rb_str_new_frozen(vals[i]);
    }
    for (size_t i = 0; i < v->nslots; i++)
        if (vals[i] != Qundef) req.hdr[i] = (struct wi_slice){RSTRING_PTR(vals[i]), (size_t)RSTRING_LEN(vals[i])};
    req.body = (struct wi_slice){RSTRING_PTR(snap), (size_t)RSTRING_LEN(snap)};
    req.url = opt_slice(&url, nogvl);
    req.method = opt_slice(&method, nogvl);

    struct verify_call call = {.core = v->core, .req = &req, .ev = &ev, .err = &err};
    if (nogvl) verify_interruptible(&call);
    else verify_nogvl(&call);
    if (call.rc) raise_wi_err(&err, Qnil);

    VALUE id = ev.id.p ? event_text(json_str(ev.id, ev.id_escaped), "id") : rb_usascii_str_new(ev.body_sha256, 64);
    VALUE type = ev.type.p ? event_text(json_str(ev.type, ev.type_escaped), "type") : Qnil;
    VALUE ts = ev.has_timestamp ? LL2NUM(ev.timestamp) : Qnil;
    VALUE event = new_event(v->provider, id, type, ts, ev.simple ? simple_body(&ev) : body,
                            ev.simple ? Qfalse : Qtrue, challenge_answer(&ev));
    RB_GC_GUARD(body);
    RB_GC_GUARD(snap);
    RB_GC_GUARD(headers);
    RB_GC_GUARD(url);
    RB_GC_GUARD(method);
    for (size_t i = 0; i < v->nslots; i++) RB_GC_GUARD(vals[i]);
    return event;
}

static VALUE verifier_secret_count(VALUE self)
{
    return SIZET2NUM(wi_sig_verifier_secret_count(get_verifier(self)->core));
}

static VALUE verifier_header_names(VALUE self)
{
    struct verifier *v = get_verifier(self);
    VALUE a = rb_ary_new();
    for (size_t i = 0; i < v->nslots; i++)
        if (v->names[i]) rb_ary_push(a, rb_str_new_cstr(v->names[i]));
    return a;
}

/* _braintree_challenge(challenge) -> "public_key|hex", the bt_challenge answer; raises
 * VerificationError (:malformed_payload, :no_secret). */
static VALUE verifier_braintree_challenge(VALUE self, VALUE challenge)
{
    struct verifier *v = get_verifier(self);
    char out[WI_BT_ANSWER_MAX];
    struct wi_err e;
    StringValue(challenge);
    long n = wi_sig_braintree_challenge(v->core, (struct wi_slice){RSTRING_PTR(challenge), (size_t)RSTRING_LEN(challenge)},
                                        out, sizeof out, &e);
    RB_GC_GUARD(challenge);
    if (n < 0) raise_wi_err(&e, Qnil);
    return rb_str_new(out, n);
}

/* Verifier.jsonb_safe?(str): valid JSON that PostgreSQL jsonb accepts. */
static VALUE verifier_s_jsonb_safe(VALUE klass, VALUE str)
{
    StringValue(str);
    int ok = wi_json_jsonb_safe(RSTRING_PTR(str), (size_t)RSTRING_LEN(str));
    RB_GC_GUARD(str);
    return ok ? Qtrue : Qfalse;
}

static VALUE canon_to_str(VALUE arg)
{
    char **bufs = (char **)arg;
    return rb_utf8_str_new(bufs[0], (long)(size_t)bufs[1]);
}

static VALUE canon_release(VALUE arg)
{
    wi_canon_free(((char **)arg)[0]);
    return Qnil;
}

/* Verifier.didit_canonical_json(str): the bytes Didit's X-Signature-V2 signs, with the
 * verifier's output limit (VerificationError :payload_too_large beyond it). */
static VALUE verifier_s_didit_canonical(VALUE klass, VALUE str)
{
    struct wi_err err;
    char *out;
    size_t n;
    StringValue(str);
    if (wi_canon_didit(RSTRING_PTR(str), (size_t)RSTRING_LEN(str), WI_CANON_MAX_OUT(RSTRING_LEN(str)), NULL,
                       &out, &n, &err)) {
        if (err.code == WI_CANON_E_TOO_LARGE) err.code = WI_SIG_E_PAYLOAD_TOO_LARGE;
        raise_wi_err(&err, ID2SYM(id_reasons[WI_SIG_E_MALFORMED_PAYLOAD - WI_SIG_E_MISSING_SIGNATURE]));
    }
    RB_GC_GUARD(str);
    char *bufs[2] = {out, (char *)(size_t)n};
    return rb_ensure(canon_to_str, (VALUE)bufs, canon_release, (VALUE)bufs);
}

static VALUE opt_str(const char *s)
{
    return s ? rb_obj_freeze(rb_utf8_str_new_cstr(s)) : Qnil;
}

static VALUE sym(const char *s)
{
    return ID2SYM(rb_intern(s));
}

/* One provider entry as a frozen Hash (Verifier.provider_table): what the Ruby side needs to
 * configure it and what the README's provider table shows. */
static VALUE provider_hash(const struct wi_provider *p)
{
    static const char *const algs[] = {"hmac_sha1", "hmac_sha256", "hmac_sha512", "ed25519", "ecdsa_p256", "http_basic", "rsa_sha1", "rsa_sha256"};
    static const char *const keys[] = {"raw", "whsec", "hex", "base64", "base64_der", "jwk", "credentials", "pem", "pair", "cert"};
    static const char *const layouts[] = {"one", "kv", "list"};
    static const char *const challenges[] = {"none", "discord_ping", "slack_url_verification", "zoom_url_validation",
                                             "braintree_get"};
    VALUE h = rb_hash_new(), headers = rb_ary_new(), versions = rb_ary_new(), ids = rb_ary_new(), types = rb_ary_new();
    for (int i = 0; i < WI_SIG_MAX_HEADERS; i++) rb_ary_push(headers, opt_str(p->headers[i]));
    for (int i = 0; i < 2 && (i == 0 || p->versions[i].tag); i++) {
        VALUE ver = rb_hash_new();
        rb_hash_aset(ver, sym("tag"), opt_str(p->versions[i].tag));
        rb_hash_aset(ver, sym("algorithm"), sym(algs[p->versions[i].alg]));
        rb_hash_aset(ver, sym("key"), sym(keys[p->versions[i].key]));
        rb_hash_aset(ver, sym("key_prefix"), opt_str(p->versions[i].key_prefix));
        rb_ary_push(versions, rb_obj_freeze(ver));
    }
    for (int i = 0; i < 3 && p->id_fields[i]; i++) rb_ary_push(ids, opt_str(p->id_fields[i]));
    for (int i = 0; i < 3 && p->type_fields[i]; i++) rb_ary_push(types, opt_str(p->type_fields[i]));
    rb_hash_aset(h, sym("name"), sym(p->name));
    rb_hash_aset(h, sym("title"), opt_str(p->title));
    rb_hash_aset(h, sym("headers"), rb_obj_freeze(headers));
    rb_hash_aset(h, sym("alt_offset"), INT2NUM(p->alt_offset));
    rb_hash_aset(h, sym("sig_slot"), INT2NUM(p->sig_slot));
    rb_hash_aset(h, sym("sig_count"), INT2NUM(p->sig_count > 1 ? p->sig_count : 1));
    rb_hash_aset(h, sym("prefix_optional"), p->prefix_optional ? Qtrue : Qfalse);
    rb_hash_aset(h, sym("layout"), sym(layouts[p->layout]));
    rb_hash_aset(h, sym("kv_sep"), p->kv_sep ? rb_obj_freeze(rb_str_new(&p->kv_sep, 1)) : Qnil);
    rb_hash_aset(h, sym("kv_ts"), opt_str(p->kv_ts));
    rb_hash_aset(h, sym("prefix"), opt_str(p->prefix));
    rb_hash_aset(h, sym("encoding"), sym(p->enc == WI_SIG_HEX ? "hex" : "base64"));
    rb_hash_aset(h, sym("hex_any_case"), p->hex_any_case ? Qtrue : Qfalse);
    rb_hash_aset(h, sym("alg_slot"), p->alg_slot > 0 ? INT2NUM(p->alg_slot) : Qnil);
    rb_hash_aset(h, sym("versions"), rb_obj_freeze(versions));
    rb_hash_aset(h, sym("template"), opt_str(p->tmpl));
    rb_hash_aset(h, sym("url_hash_param"), opt_str(p->url_hash_param));
    rb_hash_aset(h, sym("url_unescape"), opt_str(p->url_unescape));
    rb_hash_aset(h, sym("ts_slot"), p->ts_slot == WI_NO_SLOT ? Qnil : INT2NUM(p->ts_slot));
    rb_hash_aset(h, sym("ts_field"), opt_str(p->ts_field));
    rb_hash_aset(h, sym("ts_ms"), p->ts_ms ? Qtrue : Qfalse);
    rb_hash_aset(h, sym("id_slots"), rb_obj_freeze(rb_ary_new_from_args(2, p->id_slots[0] == WI_NO_SLOT ? Qnil : INT2NUM(p->id_slots[0]),
                                                                     p->id_slots[1] == WI_NO_SLOT ? Qnil : INT2NUM(p->id_slots[1]))));
    rb_hash_aset(h, sym("id_required"), p->id_required ? Qtrue : Qfalse);
    rb_hash_aset(h, sym("id_signed"), wi_provider_id_signed(p) ? Qtrue : Qfalse);
    rb_hash_aset(h, sym("type_slot"), p->type_slot == WI_NO_SLOT ? Qnil : INT2NUM(p->type_slot));
    rb_hash_aset(h, sym("id_fields"), rb_obj_freeze(ids));
    rb_hash_aset(h, sym("type_fields"), rb_obj_freeze(types));
    rb_hash_aset(h, sym("tolerance"), p->tolerance < 0 ? Qnil : LL2NUM(p->tolerance));
    rb_hash_aset(h, sym("challenge"), p->challenge ? sym(challenges[p->challenge]) : Qnil);
    rb_hash_aset(h, sym("content"), opt_str(p->content));
    rb_hash_aset(h, sym("identity"), opt_str(p->identity));
    rb_hash_aset(h, sym("jwt_claim"), opt_str(p->jwt_claim));
    rb_hash_aset(h, sym("sig_field"), opt_str(p->sig_field));
    rb_hash_aset(h, sym("custom"), p->custom ? Qtrue : Qfalse);
    rb_hash_aset(h, sym("order_key"), opt_str(p->order_key));
    rb_hash_aset(h, sym("order_time"), opt_str(p->order_time));
    return rb_obj_freeze(h);
}

/* Verifier.paypal_cert_id(url): the certificate id of a URL on PayPal's certificate endpoint
 * (the one allowlist sig_paypal.c verifies by), or nil for any other URL. */
static VALUE verifier_s_paypal_cert_id(VALUE klass, VALUE url)
{
    struct wi_slice id;
    struct wi_err e;
    (void)klass;
    StringValue(url);
    if (wi_sig_paypal_cert_id((struct wi_slice){RSTRING_PTR(url), (size_t)RSTRING_LEN(url)}, &id, &e)) return Qnil;
    VALUE r = frozen(id.p, id.n);
    RB_GC_GUARD(url);
    return r;
}

/* Verifier.provider_table: every provider entry, in table order. */
static VALUE verifier_s_provider_table(VALUE klass)
{
    VALUE a = rb_ary_new();
    for (size_t i = 0; i < wi_provider_count(); i++) rb_ary_push(a, provider_hash(wi_provider_at(i)));
    return rb_obj_freeze(a);
}

void wi_verifier_binding_init(VALUE mod)
{
    static const char *const reasons[] = {
        "missing_signature", "malformed_signature", "signature_mismatch",
        "timestamp_out_of_tolerance", "payload_too_large", "no_secret", "missing_timestamp",
        "malformed_timestamp", "missing_id", "malformed_payload", "duplicate_key", "unknown_key"};
    for (size_t i = 0; i < sizeof reasons / sizeof *reasons; i++) id_reasons[i] = rb_intern(reasons[i]);
    id_to_i = rb_intern("to_i");
    str_request_method = rb_obj_freeze(rb_str_new_cstr("REQUEST_METHOD"));
    rb_gc_register_mark_object(str_request_method);

    cEvent = rb_struct_define_under(mod, "Event", "provider", "event_id", "event_type",
                                    "timestamp", "body", "body_signed", "challenge", NULL);
    rb_gc_register_mark_object(cEvent);
    cVerifier = rb_define_class_under(mod, "Verifier", rb_cObject);
    rb_gc_register_mark_object(cVerifier);
    rb_define_alloc_func(cVerifier, verifier_alloc);
    rb_define_private_method(cVerifier, "_setup", verifier_setup, -1);
    rb_define_private_method(cVerifier, "_verify", verifier_verify, 5);
    rb_define_method(cVerifier, "secret_count", verifier_secret_count, 0);
    rb_define_private_method(cVerifier, "_braintree_challenge", verifier_braintree_challenge, 1);
    rb_define_method(cVerifier, "header_names", verifier_header_names, 0);
    rb_define_singleton_method(cVerifier, "jsonb_safe?", verifier_s_jsonb_safe, 1);
    rb_define_singleton_method(cVerifier, "didit_canonical_json", verifier_s_didit_canonical, 1);
    rb_define_singleton_method(cVerifier, "provider_table", verifier_s_provider_table, 0);
    rb_define_singleton_method(cVerifier, "paypal_cert_id", verifier_s_paypal_cert_id, 1);
}
