/* destination.h - the outbox's named HTTP destinations: the `--destination` spec parser
 * ("NAME=URL [key=value ...]"), the list the configuration holds, and credentials that come
 * from the environment or the config file, never from flags or payloads. Pure C. */
#ifndef WI_DESTINATION_H
#define WI_DESTINATION_H

#include <stdio.h>
#include "wi_err.h"

#define WI_DEST_NAME_MAX 63 /* [a-z][a-z0-9_]{0,62}: the outbox's destination CHECK */

enum { WI_DEST_SIGN_NONE = 0, WI_DEST_SIGN_STANDARD_WEBHOOKS = 1 };

/* One destination. Invariant after wi_dest_parse(): name matches [a-z][a-z0-9_]{0,62}, url
 * starts with https:// (or http:// with allow_http, or to a loopback host) and holds no
 * space or control character; sign == STANDARD_WEBHOOKS only once a secret is resolved
 * (wi_dest_list_resolve). Strings are heap-owned; token and secret are wiped when freed. */
struct wi_dest {
    char name[WI_DEST_NAME_MAX + 1];
    char *url;             /* where effects are POSTed */
    char *token;           /* bearer token (Authorization header), or NULL */
    char *secret;          /* Standard Webhooks signing secret ("whsec_..."), or NULL */
    int sign;              /* WI_DEST_SIGN_* */
    int concurrency;       /* deliveries in flight at most; 0 = --destination-concurrency */
    double timeout;        /* seconds, whole request; 0 = --destination-timeout */
    double connect_timeout; /* seconds; 0 = --destination-connect-timeout */
    int allow_http;        /* plain http:// to a non-loopback host allowed */
};

struct wi_dest_list {
    struct wi_dest *v;
    int n;
};

/* The outbox destination under which the app's Ruby handler runs wait for its Ruby worker
 * (db/009): never a --destination's name. */
#define WI_DEST_RESERVED_RUBY "ruby"

/* Parses spec[0..len) ("NAME=URL" then space-separated key=value options: concurrency=N,
 * timeout=D, connect_timeout=D, sign=standard_webhooks|none, allow_http=true; and, only when
 * secrets_allowed (the config file), token=... and secret=...) into *out. Returns 0, or -1
 * with *err (*out is then zeroed; the message never quotes a token or secret); refuses the
 * name WI_DEST_RESERVED_RUBY. The caller frees with wi_dest_clear(). Borrows spec. */
int wi_dest_parse(const char *spec, size_t len, int secrets_allowed, struct wi_dest *out, struct wi_err *err);

/* The path of a parsed destination URL (after the authority, before any '?' or '#'; "/"
 * when empty) as a slice of url: what an effect's webhook-id names (see outbox.c). */
const char *wi_dest_path(const char *url, size_t *len);

/* 1 when name is a destination name ([a-z][a-z0-9_]{0,62}, the outbox's CHECK), else 0. */
int wi_dest_name_ok(const char *name);

/* Wipes and frees d's strings; leaves *d zeroed. Accepts NULL. */
void wi_dest_clear(struct wi_dest *d);

/* Adds d to the list, replacing (and clearing) a destination of the same name: a later
 * source overrides an earlier one. Takes ownership of d's strings (d is zeroed). Returns 0,
 * or -1 with *err (out of memory; d is cleared). */
int wi_dest_list_put(struct wi_dest_list *l, struct wi_dest *d, struct wi_err *err);

/* Fills credentials from the environment, which overrides the config file:
 * WEBHOOK_INBOX_DEST_<NAME>_TOKEN and WEBHOOK_INBOX_DEST_<NAME>_SECRET (NAME upper-cased).
 * Then checks that sign=standard_webhooks has a secret in the "whsec_<base64>" form.
 * Returns 0, or -1 with *err. */
int wi_dest_list_resolve(struct wi_dest_list *l, struct wi_err *err);

/* The destination named name, or NULL. */
const struct wi_dest *wi_dest_list_find(const struct wi_dest_list *l, const char *name);

/* 1 when a and b configure the same destinations (credentials included). */
int wi_dest_list_equal(const struct wi_dest_list *a, const struct wi_dest_list *b);

/* Frees every destination; leaves *l empty. Accepts NULL. */
void wi_dest_list_free(struct wi_dest_list *l);

/* Writes url ("scheme://host/path?query#fragment") with every query value and the fragment
 * as "*****" (names kept: "?api_key=*****&v=*****"), and any userinfo as "*****@"; the
 * path is printed as is (credentials belong in a destination's token= or secret=). */
void wi_dest_print_masked_url(const char *url, FILE *out);

/* Writes one "destination = ..." line per destination; the URL's query values, fragment
 * and userinfo (wi_dest_print_masked_url) and the credentials are masked. */
void wi_dest_list_print(const struct wi_dest_list *l, FILE *out);

#endif
