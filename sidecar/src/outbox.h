/* outbox.h - the deliverer: one thread with its own connection that leases due effects from
 * webhook_inbox_outbox (db/006_outbox.sql), POSTs them to their configured destination with
 * the operation id as Idempotency-Key (Standard Webhooks-signed for sign=standard_webhooks),
 * and saves each answer while it still owns the lease. Plus `stats` and `requeue --effects`. */
#ifndef WI_OUTBOX_H
#define WI_OUTBOX_H

#include <stdio.h>
#include "pgw.h"

struct wi_runtime;
struct wi_outbox; /* opaque: the deliverer thread and its state */

/* Starts the deliverer when rt->cfg names destinations (counted in rt->alive like a worker;
 * it stops with rt->stopping after the deliveries in flight are saved, or with cfg.once
 * once nothing is due and the workers are gone). Returns the deliverer, or NULL when there is
 * nothing to deliver or the thread could not start (logged). */
struct wi_outbox *wi_outbox_start(struct wi_runtime *rt);

/* Waits for the deliverer to end and frees it; accepts NULL. */
void wi_outbox_join(struct wi_outbox *o);

/* Prints the outbox per destination (webhook_inbox_outbox_stats()) on out: text lines, or,
 * with json, `"outbox":{...}` to be placed inside the stats object (a leading comma
 * included). Returns 0, or -1 with *err. */
int wi_outbox_stats(struct wi_pg *pg, int json, FILE *out, struct wi_err *err);

/* quarantined effects -> pending, attempts reset, by operation id (NULL with all = every
 * one). Returns how many, or -1 with *err. */
long wi_outbox_requeue(const char *conninfo, const char *operation_id, int all, struct wi_err *err);

/* A copy of the JSON-unsafe or non-UTF-8 bytes of s[0..n) replaced by '?' is written in place
 * (NUL and invalid or overlong UTF-8 sequences): an answer body becomes valid text for a
 * text parameter. */
void wi_outbox_text_sanitize(char *s, size_t n);

#endif
