/* fuzz_destination.c - libFuzzer target for the outbox's parsers: the --destination spec
 * (flag and config-file forms), Retry-After values, and the answer-text sanitizer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/destination.h"
#include "delivery/http_client.h"
#include "delivery/outbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct wi_dest d;
    struct wi_dest_list l = {NULL, 0};
    struct wi_err err;
    long long ms;
    char *copy = malloc(size ? size : 1);

    if (!copy)
        return 0;
    /* Borrowed slices with no NUL: the parsers must stay inside [data, data + size). */
    if (wi_dest_parse((const char *)data, size, (size & 1) != 0, &d, &err) == 0) {
        if (wi_dest_list_put(&l, &d, &err) == 0)
            (void)wi_dest_list_resolve(&l, &err);
        wi_dest_list_free(&l);
    }
    wi_dest_clear(&d);
    if (wi_http_parse_retry_after((const char *)data, size, 1700000000, &ms) == 0 && (ms < 0 || ms > 30LL * 86400000))
        abort();
    memcpy(copy, data, size);
    wi_outbox_text_sanitize(copy, size);
    for (size_t i = 0; i < size; i++)
        if (copy[i] == '\0')
            abort();
    free(copy);
    return 0;
}
