/* reconcile_ids.c - the stored keys of the long event ids a provider's page lists: the page
 * statement names each id it cannot store as it is (the hex of its UTF-8 bytes), this file
 * hashes them as the receiver does (event_id.h, the one definition) for the statement's run
 * with their stored forms. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <stdlib.h>
#include <string.h>

#include "event_id.h"
#include "pg/pgarray.h"

static int nibble(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int wi_rc_stored_ids(const char *hexlist, struct wi_pgarray *hex, struct wi_pgarray *stored, struct wi_err *err)
{
    const char *p = hexlist;
    unsigned char *bytes = NULL;
    char key[WI_EVENT_ID_HASHED_LEN + 1];
    int n = 0;

    while (*p) {
        size_t len = strcspn(p, ","), i;
        if (!len || len % 2) {
            free(bytes);
            return wi_err_set(err, WI_ERR_ARG, "a long event id the page statement named is not hex");
        }
        unsigned char *grown = realloc(bytes, len / 2);
        if (!grown) {
            free(bytes);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
        bytes = grown;
        for (i = 0; i < len; i += 2) {
            int hi = nibble(p[i]), lo = nibble(p[i + 1]);
            if (hi < 0 || lo < 0) {
                free(bytes);
                return wi_err_set(err, WI_ERR_ARG, "a long event id the page statement named is not hex");
            }
            bytes[i / 2] = (unsigned char)(hi << 4 | lo);
        }
        if (wi_event_id_hash((const char *)bytes, len / 2, key) < 0) {
            free(bytes);
            return wi_err_set(err, WI_ERR_NOMEM, "SHA-256 of an event id failed (libcrypto)");
        }
        if (wi_pgarray_add(hex, p, len) < 0 || wi_pgarray_add_str(stored, key) < 0) {
            free(bytes);
            return wi_err_set(err, WI_ERR_NOMEM, "out of memory");
        }
        n++;
        p += len + (p[len] == ',');
    }
    free(bytes);
    return n;
}
