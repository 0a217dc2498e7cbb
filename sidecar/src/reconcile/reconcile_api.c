/* reconcile_api.c - what the provider API shapes (reconcile_<provider>.c) share: the
 * Authorization line and the check of an id put in a URL or a JSON body. */
#define _POSIX_C_SOURCE 200809L
#include "reconcile/reconcile.h"

#include <stdio.h>
#include <string.h>

int wi_rc_bearer(const char *key, const char *const *extra, char (*lines)[512], int n)
{
    int k = 0;
    if (n < 1 || snprintf(lines[k++], 512, "Authorization: Bearer %s", key) >= 512)
        return -1;
    for (; extra && *extra; extra++)
        if (k >= n || snprintf(lines[k++], 512, "%s", *extra) >= 512)
            return -1;
    return k;
}

int wi_rc_id_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n > 0 && n <= max &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == n;
}
