/* handle_spans.h - a webhook_inbox.handle span for each event a committed batch handled whose
 * receipt stored a trace context (webhook_inbox.trace_context, db/030): the child of the
 * receipt's span, exported by observability/otlp.h. Only with `run --otlp-endpoint`. */
#ifndef WI_HANDLE_SPANS_H
#define WI_HANDLE_SPANS_H

#include "claim/claim.h"
#include "pg/pgw.h"

/* Reads the batch's stored trace contexts: prepared on every worker connection. */
extern const struct wi_pg_stmt wi_handle_spans_stmt;

/* When spans are wanted (wi_otlp_on): reads the trace contexts of b's events in one query
 * (outside any transaction; the cost of tracing: one round trip per batch) and adds a span per
 * event that has one, from start_ns to end_ns (the batch's transaction, Unix ns) with its
 * scope, type, id, result and attempt. A failed read is logged (once a minute) and costs only
 * the spans. Never called inside a transaction. */
void wi_handle_spans(struct wi_pg *pg, const struct wi_batch *b, long long start_ns, long long end_ns);

#endif
