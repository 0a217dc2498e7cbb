/* headers_binding.c - WebhookInbox::RequestHeaders.from_env: the request_headers JSON of a
 * Rack env (headers.h says what is kept), in C because every receipt pays for it; and
 * .credential?, the same rule for headers shown or given by a caller. */
#include <ruby.h>
#include <ruby/encoding.h>
#include <string.h>

#include "bindings.h"
#include "headers.h"

static int add_entry(VALUE key, VALUE value, VALUE arg)
{
    struct wi_headers *h = (struct wi_headers *)arg;

    if (!RB_TYPE_P(key, T_STRING) || !RB_TYPE_P(value, T_STRING))
        return ST_CONTINUE;
    return wi_headers_add(h, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), RSTRING_PTR(value),
                          (size_t)RSTRING_LEN(value)) ? ST_CONTINUE : ST_STOP;
}

struct build {
    VALUE env;
    struct wi_headers h;
};

static VALUE build_json(VALUE arg)
{
    struct build *b = (struct build *)arg;
    const char *json;
    size_t len;

    rb_hash_foreach(b->env, add_entry, (VALUE)&b->h);
    json = wi_headers_json(&b->h, &len);
    return json ? rb_utf8_str_new(json, (long)len) : Qnil;
}

static VALUE free_headers(VALUE arg)
{
    wi_headers_free(&((struct build *)arg)->h);
    return Qnil;
}

/* RequestHeaders.from_env(env) -> String (a JSON object) or nil (no header kept). */
static VALUE headers_from_env(VALUE self, VALUE env)
{
    struct build b;

    Check_Type(env, T_HASH);
    memset(&b, 0, sizeof b);
    b.env = env;
    return rb_ensure(build_json, (VALUE)&b, free_headers, (VALUE)&b);
}

/* RequestHeaders.credential?(name, value = nil) -> true when from_env would leave the
 * header out as a credential (by its name, or by its value when one is given). */
static VALUE headers_credential_p(int argc, VALUE *argv, VALUE self)
{
    VALUE name, value;
    int rc;

    rb_scan_args(argc, argv, "11", &name, &value);
    StringValue(name);
    if (!NIL_P(value))
        StringValue(value);
    rc = wi_headers_credential(RSTRING_PTR(name), (size_t)RSTRING_LEN(name), NIL_P(value) ? NULL : RSTRING_PTR(value),
                               NIL_P(value) ? 0 : (size_t)RSTRING_LEN(value));
    RB_GC_GUARD(name);
    RB_GC_GUARD(value);
    return rc ? Qtrue : Qfalse;
}

void wi_headers_binding_init(VALUE mod)
{
    VALUE m = rb_define_module_under(mod, "RequestHeaders");
    rb_define_module_function(m, "from_env", headers_from_env, 1);
    rb_define_module_function(m, "credential?", headers_credential_p, -1);
    rb_define_const(m, "MAX_HEADERS", INT2FIX(WI_HEADERS_MAX));
    rb_define_const(m, "MAX_VALUE_BYTES", INT2FIX(WI_HEADERS_MAX_VALUE));
}
