/* fuzz_ordering.c - libFuzzer entry point for ordering.c: any spec, time path and text, read
 * in a buffer of exactly its size. Outcomes stay in range, a key fits its bound, a time is
 * only read for a key, and the same input always reads the same. Input: spec, NUL, time path
 * (empty: none), NUL, then the JSON text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../ordering.h"

static void check(const struct wi_ordering *o)
{
    if (o->key < WI_ORDERING_SQL || o->key > WI_ORDERING_VALUE || o->time < WI_ORDERING_SQL ||
        o->time > WI_ORDERING_VALUE || o->key_len > WI_ORDERING_KEY_MAX || o->time_len > sizeof o->time_text)
        abort();
    if (o->key == WI_ORDERING_NONE && o->time != WI_ORDERING_NONE)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    const char *spec = p, *nul1 = memchr(p, 0, size), *time, *nul2;
    struct wi_ordering a, b;
    char *json;
    size_t n;

    if (!nul1)
        return 0;
    time = nul1 + 1;
    if (!(nul2 = memchr(time, 0, (size_t)(end - time))))
        return 0;
    n = (size_t)(end - nul2 - 1);
    if (!(json = malloc(n ? n : 1)))
        abort();
    memcpy(json, nul2 + 1, n);
    wi_ordering_derive(json, n, spec, (size_t)(nul1 - spec), nul2 > time ? time : NULL, (size_t)(nul2 - time), &a);
    check(&a);
    wi_ordering_derive(json, n, spec, (size_t)(nul1 - spec), nul2 > time ? time : NULL, (size_t)(nul2 - time), &b);
    if (a.key != b.key || a.time != b.time || a.key_len != b.key_len || memcmp(a.key_text, b.key_text, a.key_len))
        abort();
    free(json);
    return 0;
}
