/* http_client.h - concurrent HTTP POSTs over one libcurl multi handle (its connection cache
 * keeps connections alive across requests), bounded answers, and the Retry-After parser.
 * Used by one thread. */
#ifndef WI_HTTP_CLIENT_H
#define WI_HTTP_CLIENT_H

#include <poll.h>
#include <stddef.h>
#include <time.h>
#include "wi_err.h"

#define WI_HTTP_BODY_MAX 65536 /* answer bytes kept; the rest is read and dropped */

struct wi_http; /* opaque: the multi handle and its transfers */

/* One POST. Everything is copied by wi_http_start(). */
struct wi_http_req {
    const char *url;
    const char *body;           /* sent as is, Content-Type: application/json */
    size_t body_len;
    const char *const *headers; /* "Name: value" lines, nheaders of them */
    int nheaders;
    long connect_timeout_ms;
    long timeout_ms;            /* the whole request */
    void *user;                 /* returned in the result */
};

/* A finished transfer. status 0: no answer (error holds why: timeout, refused, TLS...). */
struct wi_http_res {
    void *user;
    long status;
    int timed_out;              /* curl gave up at a timeout */
    char *body;                 /* NUL-terminated, at most WI_HTTP_BODY_MAX bytes; owned */
    size_t body_len;
    long long retry_after_ms;   /* a valid Retry-After header, else -1 */
    char error[160];            /* "" after an answer; never holds the URL's query or credentials */
};

/* Calls curl_global_init once; call before any thread starts. Returns 0 or -1. */
int wi_http_global_init(void);

/* Returns a client, or NULL with *err. */
struct wi_http *wi_http_new(struct wi_err *err);

/* Aborts transfers still running and frees everything; accepts NULL. */
void wi_http_free(struct wi_http *h);

/* Starts a POST; it progresses in wi_http_wait(). TLS peer and host verification are on;
 * only http and https; redirects are not followed. Returns 0, or -1 with *err. */
int wi_http_start(struct wi_http *h, const struct wi_http_req *req, struct wi_err *err);

/* Transfers started and not yet returned by wi_http_next(). */
int wi_http_in_flight(const struct wi_http *h);

/* Drives the transfers without waiting: sends the requests just started, reads what has
 * arrived. Returns 0, or -1 with *err. */
int wi_http_perform(struct wi_http *h, struct wi_err *err);

/* Drives the transfers and waits up to timeout_ms for progress or for one of extra[0..n)
 * to become readable (their revents are set); does not wait when a transfer has finished
 * that wi_http_next() has not returned yet. Returns 0, or -1 with *err. */
int wi_http_wait(struct wi_http *h, struct pollfd *extra, int nextra, int timeout_ms, struct wi_err *err);

/* Moves one finished transfer into *res (the caller frees it with wi_http_res_free).
 * Returns 1, or 0 when none has finished. */
int wi_http_next(struct wi_http *h, struct wi_http_res *res);

/* Frees res's body; accepts NULL. */
void wi_http_res_free(struct wi_http_res *res);

/* Parses a Retry-After value v[0..n) (surrounding spaces allowed): delta-seconds (digits) or
 * an HTTP-date (IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT"). Returns 0 and sets *ms to the
 * wait from now (0 for a date in the past; at most 30 days), or -1 when it is neither.
 * Allocates nothing. */
int wi_http_parse_retry_after(const char *v, size_t n, time_t now, long long *ms);

#endif
