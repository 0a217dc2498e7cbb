/* exporter.h - `run --metrics-listen HOST:PORT`: a small non-blocking HTTP listener (its own
 * thread) serving GET /metrics in Prometheus text format 0.0.4, and the inbox and outbox
 * gauges read from webhook_inbox_stats() and webhook_inbox_outbox_stats() on a dedicated
 * connection (a second thread), cached between scrapes. Workers never wait for either. */
#ifndef WI_EXPORTER_H
#define WI_EXPORTER_H

#include "delivery/destination.h"
#include "wi_err.h"

struct wi_exporter;

/* The inbox gauges are read at most this often, whatever the scrape rate, and only while
 * someone scrapes (WI_EXPORTER_IDLE_S after the last scrape they stop). A scrape never shows
 * gauges whose read is older than WI_EXPORTER_REFRESH_S as current: it waits for a fresh
 * read (after an idle spell, a slow or failed one, a PostgreSQL restart) at most
 * WI_EXPORTER_WAIT_S, then leaves them out (webhook_inbox_stats_up 0). */
#define WI_EXPORTER_REFRESH_S 5.0
#define WI_EXPORTER_IDLE_S 600.0
#define WI_EXPORTER_WAIT_S 2.0

/* Limits of the listener: a request head larger than this gets 431; one not complete this
 * long after its connection was accepted is dropped (slowloris); a response not taken by the
 * client in WI_EXPORTER_WRITE_TIMEOUT_S is dropped; at most WI_EXPORTER_MAX_CONNS open
 * connections. When full, a new connection takes the slot of one whose response is all sent,
 * else of the one idle the longest (a stalled head, a response its client does not read),
 * so no client holds every slot, whether it sends or reads or not. */
#define WI_EXPORTER_MAX_HEAD 8192
#define WI_EXPORTER_READ_TIMEOUT_S 5.0
#define WI_EXPORTER_WRITE_TIMEOUT_S 10.0
#define WI_EXPORTER_MAX_CONNS 64

/* Binds listen ("HOST:PORT", "[IPv6]:PORT" or ":PORT" for every address; port 0 picks a
 * free one) and starts both threads; conninfo (borrowed, must outlive the exporter) is the
 * database for the gauges; dests (copied; may be NULL) the configured destinations, always
 * shown in the effects gauges (0 when the outbox has no row for one). Logs msg=metrics_listening with the bound address. Call with
 * every signal blocked (the threads inherit the mask). Returns NULL with *err when the
 * address does not parse or cannot be bound. */
struct wi_exporter *wi_exporter_start(const char *listen, const char *conninfo, const struct wi_dest_list *dests,
                                      struct wi_err *err);

/* Stops both threads (a refresh in flight ends first: bounded by the connection's connect
 * and statement timeouts), closes every socket and frees; accepts NULL. */
void wi_exporter_stop(struct wi_exporter *ex);

/* Splits "HOST:PORT" / "[V6]:PORT" / ":PORT" into host (NULL for ":PORT") and port, both
 * copied into the caller's buffers. Returns 0, or -1 when malformed or too long. */
int wi_exporter_split_address(const char *listen, char *host, size_t hostsz, char *port, size_t portsz);

#endif
