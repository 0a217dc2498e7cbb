/* citus_node.c - how the sidecar reaches a Citus worker directly: --citus-node's host overrides
 * and the worker's conninfo (the coordinator's connection parameters, host and port replaced). */
#define _POSIX_C_SOURCE 200809L
#include "citus/citus_node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

/* One --citus-node entry's parts: "NAME[:PORT]=HOST[:PORT]". Returns 0, or -1 when malformed
 * (an empty NAME or HOST, a PORT not in 1..65535; port 0 when absent). */
static int parse_override(const char *e, const char **name, size_t *name_len, int *name_port, const char **host,
                          size_t *host_len, int *host_port)
{
    const char *eq = strchr(e, '='), *c;
    char *end;
    long v;

    if (!eq)
        return -1;
    *name = e;
    *host = eq + 1;
    *name_port = *host_port = 0;
    if ((c = memchr(e, ':', (size_t)(eq - e)))) {
        v = strtol(c + 1, &end, 10);
        if (end != eq || c + 1 == eq || v < 1 || v > 65535)
            return -1;
        *name_port = (int)v;
    }
    *name_len = (size_t)((c ? c : eq) - e);
    if ((c = strchr(*host, ':'))) {
        v = strtol(c + 1, &end, 10);
        if (*end || !c[1] || v < 1 || v > 65535)
            return -1;
        *host_port = (int)v;
    }
    *host_len = c ? (size_t)(c - *host) : strlen(*host);
    return *name_len > 0 && *host_len > 0 ? 0 : -1;
}

int wi_citus_node_override(char *const *entries, int n, const char *name, int node_port, const char **host,
                           size_t *host_len, int *port, struct wi_err *err)
{
    const char *nm, *h;
    size_t nl, hl;
    int np, hp, i;

    for (i = 0; entries && i < n; i++) {
        if (parse_override(entries[i], &nm, &nl, &np, &h, &hl, &hp) < 0)
            return wi_err_set(err, WI_ERR_ARG, "--citus-node #%d: expected NAME[:PORT]=HOST[:PORT]", i + 1);
        if (name && strlen(name) == nl && !memcmp(name, nm, nl) && (np == 0 || np == node_port)) {
            *host = h;
            *host_len = hl;
            *port = hp ? hp : node_port;
            return 1;
        }
    }
    return 0;
}

/* Appends v[0..len) to conninfo as a single-quoted value (\ and ' escaped) at buf + *at, or
 * only counts when buf is NULL. */
static void put_value(char *buf, size_t *at, const char *v, size_t len)
{
    size_t i;

    if (buf)
        buf[*at] = '\'';
    (*at)++;
    for (i = 0; i < len; i++) {
        if (v[i] == '\\' || v[i] == '\'') {
            if (buf)
                buf[*at] = '\\';
            (*at)++;
        }
        if (buf)
            buf[*at] = v[i];
        (*at)++;
    }
    if (buf)
        buf[*at] = '\'';
    (*at)++;
}

/* Writes (buf NULL: counts) url's options but host, hostaddr and port, then host and port. */
static size_t put_conninfo(char *buf, const PQconninfoOption *opts, const char *host, size_t host_len, const char *port)
{
    const PQconninfoOption *o;
    size_t at = 0, k;

    for (o = opts; o->keyword; o++) {
        if (!o->val || !strcmp(o->keyword, "host") || !strcmp(o->keyword, "hostaddr") || !strcmp(o->keyword, "port"))
            continue;
        k = strlen(o->keyword);
        if (buf) {
            memcpy(buf + at, o->keyword, k);
            buf[at + k] = '=';
        }
        at += k + 1;
        put_value(buf, &at, o->val, strlen(o->val));
        if (buf)
            buf[at] = ' ';
        at++;
    }
    if (buf)
        memcpy(buf + at, "host=", 5);
    at += 5;
    put_value(buf, &at, host, host_len);
    if (buf)
        memcpy(buf + at, " port=", 6);
    at += 6;
    put_value(buf, &at, port, strlen(port));
    if (buf)
        buf[at] = '\0';
    return at + 1;
}

char *wi_citus_node_conninfo(const char *url, const char *host, size_t host_len, int port, struct wi_err *err)
{
    PQconninfoOption *opts;
    char *errmsg = NULL, *buf, p[16];
    size_t len;

    if (!(opts = PQconninfoParse(url, &errmsg))) {
        PQfreemem(errmsg); /* it may quote the URL */
        wi_err_set(err, WI_ERR_ARG, "database-url: not a valid conninfo");
        return NULL;
    }
    snprintf(p, sizeof p, "%d", port);
    len = put_conninfo(NULL, opts, host, host_len, p);
    if ((buf = malloc(len)))
        put_conninfo(buf, opts, host, host_len, p);
    else
        wi_err_set(err, WI_ERR_NOMEM, "out of memory");
    PQconninfoFree(opts);
    return buf;
}
