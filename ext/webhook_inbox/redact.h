/* redact.h - keeps every part of a database password out of messages, including the parts
 * libpq misreads as host, port or database when a URL's password holds an unencoded '@'
 * or '/'. Pure C (no libpq, no ruby.h); shared by the store and the sidecar. */
#ifndef WI_REDACT_H
#define WI_REDACT_H

#include <stddef.h>

#define WI_REDACT_SPLIT_MSG \
    "database_url: the password holds an unencoded '@' or '/', which libpq would read as " \
    "part of the host or database name; percent-encode it (%40, %2F)"

/* Finds the password of a postgres:// or postgresql:// URL as its author meant it: after
 * the user name's ':' and up to the LAST '@' before the query, so an unencoded '@' or '/'
 * in it does not cut it short (libpq stops at the first '@'). Returns 1 and sets *off and
 * *len (bytes into conninfo), or 0 when conninfo is not a URL or has no password.
 * Errs on the side of hiding: a database name with an unencoded '@' after a port may be
 * taken for part of a password. */
int wi_redact_password_span(const char *conninfo, size_t *off, size_t *len);

/* 1 when conninfo is a URL whose password holds an unencoded '@' or '/': libpq would then
 * connect to a host (DNS lookup included) or port named by part of the password, and quote
 * it in its messages. Callers refuse such a URL with WI_REDACT_SPLIT_MSG. */
int wi_redact_url_split(const char *conninfo);

/* Overwrites with '*' every occurrence in msg of secret (if not NULL or empty) and of the
 * URL password of conninfo (as written and percent-decoded). msg stays NUL-terminated and
 * keeps its length. */
void wi_redact_scrub(char *msg, const char *conninfo, const char *secret);

#endif
