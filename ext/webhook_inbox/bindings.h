/* bindings.h - the Ruby binding modules' init functions, called from Init_webhook_inbox. */
#ifndef WI_BINDINGS_H
#define WI_BINDINGS_H
#include <ruby.h>

void wi_verifier_binding_init(VALUE mod); /* verifier_binding.c: WebhookInbox::Verifier */
void wi_inbox_binding_init(VALUE mod);    /* inbox_binding.c: WebhookInbox::Inbox */
void wi_headers_binding_init(VALUE mod);  /* headers_binding.c: WebhookInbox::RequestHeaders.from_env */

#endif
