/* http.h - a strict parser for the head of one HTTP/1.x request (request line and header
 * lines): the only bytes the metrics listener reads from the network. Pure C, no sockets. */
#ifndef WI_HTTP_H
#define WI_HTTP_H

#include <stddef.h>

/* Slices into the caller's buffer (borrowed, never copied; not NUL-terminated). */
struct wi_http_req {
    const char *method;  /* a token: GET, HEAD, POST, ... */
    size_t method_len;
    const char *target;  /* origin-form: starts with '/', visible ASCII, query included */
    size_t target_len;
    int minor;           /* HTTP/1.minor */
};

/* Parses buf[0..len) as a request head ending with an empty line (CRLF CRLF; a bare LF is
 * accepted in place of CRLF). Returns the length of the head (> 0) once it is complete, 0
 * while more bytes are needed, or -1 when the bytes cannot become a valid head (then it
 * never turns valid with more input). Fills *req only on success. Allocates nothing. */
long wi_http_parse(const char *buf, size_t len, struct wi_http_req *req);

/* 1 if req's target is exactly path, ignoring a query string ("/metrics?x=1"), else 0. */
int wi_http_path_is(const struct wi_http_req *req, const char *path);

/* 1 if req's method is m (case-sensitive, as HTTP methods are), else 0. */
int wi_http_method_is(const struct wi_http_req *req, const char *m);

#endif
