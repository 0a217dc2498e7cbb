/* metrics.h - process counters (events by outcome) and the `stats` subcommand (inbox
 * health read from webhook_inbox_stats() and webhook_inbox_unrouted()). */
#ifndef WI_METRICS_H
#define WI_METRICS_H

#include <stdio.h>
#include "pgw.h"

/* WI_M_WAITING: runs that found no route and left the event pending (--unrouted=wait). */
enum { WI_M_DONE, WI_M_QUARANTINED, WI_M_RETRY, WI_M_WAITING, WI_M_BATCHES, WI_M_RECONNECTS, WI_M_COUNT };

/* Thread-safe increment of counter which (WI_M_*). */
void wi_metrics_add(int which, long n);
long wi_metrics_get(int which);

/* Logs one summary line of the counters. */
void wi_metrics_log_summary(void);

/* Connects to conninfo, checks the schema (wi_schema_require: a missing, stale or too new
 * schema is an error), prints the inbox stats (text or JSON) on out, with the pending
 * events that wait for a route. Returns 0, or -1 with *err. */
int wi_metrics_stats(const char *conninfo, int json, FILE *out, struct wi_err *err);

#endif
