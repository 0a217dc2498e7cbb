/* ordering.h - a receipt's ordering key and event time read in C from the payload bytes,
 * exactly as db/functions/ordering.sql's webhook_inbox_ordering_key and _ordering_time read
 * them from the stored jsonb; what this cannot match byte for byte is left to those
 * functions (WI_ORDERING_SQL). Pure C, allocates nothing. */
#ifndef WI_ORDERING_H
#define WI_ORDERING_H

#include <stddef.h>

/* Keys longer than this are stored as "sha256:<hex>" by the SQL function: left to it. */
#define WI_ORDERING_KEY_MAX 200

enum wi_ordering_outcome {
    WI_ORDERING_SQL = 0, /* not decided here: the INSERT derives it from the jsonb */
    WI_ORDERING_NONE,    /* decided: NULL (a path missing or null; no time path; not a number) */
    WI_ORDERING_VALUE    /* decided: the text in the buffer */
};

/* What wi_ordering_derive found. Invariant: key_len/time_len count bytes of key/time only
 * when the matching outcome is WI_ORDERING_VALUE; time is WI_ORDERING_NONE whenever key is. */
struct wi_ordering {
    int key;                              /* enum wi_ordering_outcome */
    size_t key_len;
    char key_text[WI_ORDERING_KEY_MAX];   /* the key (not NUL-terminated) */
    int time;                             /* enum wi_ordering_outcome */
    size_t time_len;
    char time_text[24];                   /* seconds since the epoch: "1700000000" or, from
                                           * milliseconds, "1700000000.123" (float8 input) */
};

/* Reads the key for spec (paths split by ',' into parts, each by '|' into alternatives, each
 * by '.' into members) and the time at time_path (NULL: none) from the JSON text
 * json[0..n). Decides only what needs no jsonb semantics beyond an object walk: members
 * (the last of duplicate keys wins, as in jsonb; escaped keys decoded), strings, integers,
 * true, false, null. A path through an array, a value that is an object, an array or a
 * non-integer number, a string that needs escaping inside a several-part key, a key past
 * WI_ORDERING_KEY_MAX, or text that is not JSON leaves the part to SQL. Borrows every
 * argument; never fails. */
void wi_ordering_derive(const char *json, size_t n, const char *spec, size_t spec_len,
                        const char *time_path, size_t time_path_len, struct wi_ordering *out);

#endif
