/* webhook_inbox.c - extension entry point: only calls each binding's init. */
#include <ruby.h>
#include "bindings.h"

RUBY_FUNC_EXPORTED void Init_webhook_inbox(void)
{
    VALUE mod = rb_define_module("WebhookInbox");
    wi_verifier_binding_init(mod);
    wi_inbox_binding_init(mod);
    wi_headers_binding_init(mod);
}
