/* otlp.h - the sidecar's OpenTelemetry spans (webhook_inbox.handle, webhook_inbox.effect),
 * exported as OTLP/HTTP JSON (POST <endpoint>/v1/traces, application/json) by a thread of
 * their own from a bounded queue: adding a span never waits for the network (a short mutex
 * only), and a span added while the queue is full is dropped and counted
 * (webhook_inbox_trace_spans_dropped_total). Off unless `run --otlp-endpoint`: then every
 * function here is one atomic load. Attributes carry ids and outcomes, never payloads,
 * headers or credentials (the callers choose them: docs/operations.md, "Traces"). */
#ifndef WI_OTLP_H
#define WI_OTLP_H

#include "observability/traceparent.h"
#include "wi_err.h"

#define WI_OTLP_ATTRS_MAX 8

enum { WI_SPAN_INTERNAL = 1, WI_SPAN_CLIENT = 3 }; /* OTLP SpanKind */

/* One attribute: a string (str != NULL) or an integer. Borrowed until wi_otlp_add returns. */
struct wi_span_attr {
    const char *key;
    const char *str;
    long long num;
};

/* A finished span. Strings are borrowed until wi_otlp_add returns (it renders a copy). */
struct wi_span {
    const char *name;
    int kind;                      /* WI_SPAN_* */
    struct wi_traceparent ctx;     /* the trace id and this span's own id */
    unsigned char parent_id[8];    /* the parent span's id (same trace) */
    long long start_ns, end_ns;    /* Unix time in nanoseconds */
    int error;                     /* 1: status ERROR (a failed run or delivery) */
    struct wi_span_attr attrs[WI_OTLP_ATTRS_MAX];
    int nattrs;
};

/* Starts the exporter thread for endpoint (http:// or https://; "/v1/traces" is appended
 * unless the URL ends with it) with a queue of queue_max spans. Process-wide: call once,
 * before the threads that add spans. Returns 0, or -1 with *err (a bad URL, no thread). */
int wi_otlp_start(const char *endpoint, int queue_max, struct wi_err *err);

/* 1 while the exporter runs (spans are wanted), else 0. */
int wi_otlp_on(void);

/* Renders s as OTLP JSON and queues it, or drops it (counted) when the queue is full or
 * memory is short. Thread-safe; never blocks on the network. No-op when off. */
void wi_otlp_add(const struct wi_span *s);

/* Sends what is queued (one try, bounded by the export timeout), stops the thread, frees.
 * No-op when off. */
void wi_otlp_stop(void);

/* Spans sent (a 2xx) and dropped (the queue full, a failed export, too large) since start:
 * webhook_inbox_trace_spans_exported_total and _dropped_total. Thread-safe. */
void wi_otlp_counts(long *exported, long *dropped);

/* Now, Unix time in nanoseconds (CLOCK_REALTIME). */
long long wi_otlp_now_ns(void);

#endif
