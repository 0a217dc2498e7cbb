/* outbox.h - the deliverer: one thread with its own connection that leases due effects from
 * webhook_inbox_outbox (db/006_outbox.sql), POSTs them to their configured destination with
 * the operation id as Idempotency-Key (Standard Webhooks-signed for sign=standard_webhooks),
 * and saves each answer while it still owns the lease. (`stats` and `requeue --effects`:
 * outbox_admin.h.) */
#ifndef WI_OUTBOX_H
#define WI_OUTBOX_H

#include <stdio.h>
#include "pg/pgw.h"

struct wi_runtime;
struct wi_outbox; /* opaque: the deliverer thread and its state */

/* Starts the deliverer when rt->cfg names destinations (counted in rt->alive like a worker;
 * it stops with rt->stopping after the deliveries in flight are saved, or with cfg.once
 * once nothing is due and the workers are gone). Returns the deliverer, or NULL when there is
 * nothing to deliver or the thread could not start (logged). */
struct wi_outbox *wi_outbox_start(struct wi_runtime *rt);

/* Waits for the deliverer to end and frees it; accepts NULL. */
void wi_outbox_join(struct wi_outbox *o);

/* A copy of the JSON-unsafe or non-UTF-8 bytes of s[0..n) replaced by '?' is written in place
 * (NUL and invalid or overlong UTF-8 sequences): an answer body becomes valid text for a
 * text parameter. */
void wi_outbox_text_sanitize(char *s, size_t n);

#endif
