/* traceparent.h - the W3C Trace Context `traceparent` header (version 00) that the receipt
 * stores with an event (trace_context, db/030): parsed into ids, printed back, new span ids.
 * Pure C, no allocation. */
#ifndef WI_TRACEPARENT_H
#define WI_TRACEPARENT_H

#include <stddef.h>

#define WI_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */

/* A span's context. Invariant after a successful parse or wi_traceparent_child: neither id
 * is all zeros. */
struct wi_traceparent {
    unsigned char trace_id[16];
    unsigned char span_id[8];
    unsigned char flags;        /* bit 0: sampled */
};

/* Parses s[0..len) (need not be NUL-terminated): exactly 55 bytes "00-<32 lower hex>-<16 lower
 * hex>-<2 lower hex>" with non-zero ids, as webhook_inbox_trace_context() keeps them. Returns 0
 * and fills *out, or -1 for anything else (*out unspecified). Reads at most len bytes. */
int wi_traceparent_parse(const char *s, size_t len, struct wi_traceparent *out);

/* Writes tp as a traceparent and a NUL into out (WI_TRACEPARENT_LEN + 1 bytes). */
void wi_traceparent_format(const struct wi_traceparent *tp, char *out);

/* Lower-case hex of n bytes into out (2n chars and a NUL). */
void wi_traceparent_hex(const unsigned char *bytes, size_t n, char *out);

/* A child of parent: the same trace id and flags, a new random span id (OpenSSL RAND_bytes,
 * never all zeros). Returns 0, or -1 when the random generator failed. */
int wi_traceparent_child(const struct wi_traceparent *parent, struct wi_traceparent *child);

/* The span a handler run has under receipt, the same in every process and on every node:
 * receipt's trace id and flags, a span id of the first 8 bytes of SHA-256 (OpenSSL) over
 * "<receipt span id hex>:<strlen(scope)>:<scope><event_id>:<attempts>" (all zeros -> ...01).
 * db/functions/traces.sql's webhook_inbox_handle_trace_context() derives the same, and the
 * dispatch hands it to the handler, so the handler's effects are this span's children.
 * attempts: the event's attempts before this run. Returns 0, or -1 when OpenSSL failed. */
int wi_traceparent_handle(const struct wi_traceparent *receipt, const char *scope, const char *event_id, int attempts,
                          struct wi_traceparent *handle);

#endif
