/* citus_node.h - how the sidecar reaches a Citus worker directly: --citus-node's host overrides
 * and the worker's conninfo. No state; used by citus.c and by the configuration's check. */
#ifndef WI_CITUS_NODE_H
#define WI_CITUS_NODE_H

#include <stddef.h>
#include "wi_err.h"

/* --citus-node's entries[0..n), "NAME[:PORT]=HOST[:PORT]": the worker pg_dist_node calls NAME (with
 * nodeport PORT, or any) is reached at HOST (and PORT, or its nodeport) from this sidecar.
 * With name NULL only checks every entry. Returns 1 and points *host and *host_len at the match's
 * HOST in its entry (*port set), 0 when no entry names that node, or -1 with *err for a
 * malformed entry (nothing of it echoed but its position). */
int wi_citus_node_override(char *const *entries, int n, const char *name, int node_port, const char **host,
                           size_t *host_len, int *port, struct wi_err *err);

/* url's connection parameters (a password too) with host and port replaced (hostaddr dropped),
 * as a conninfo string of quoted values: heap, the caller wipes (OPENSSL_cleanse) and frees it.
 * NULL with *err when url does not parse (never echoed) or out of memory. */
char *wi_citus_node_conninfo(const char *url, const char *host, size_t host_len, int port, struct wi_err *err);

#endif
