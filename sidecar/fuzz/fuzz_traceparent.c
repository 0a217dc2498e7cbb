/* fuzz_traceparent.c - libFuzzer target for the W3C traceparent parser: no crash or overread
 * on any bytes; what it accepts prints back byte for byte and has non-zero ids. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "observability/traceparent.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees any read past the end. */
    char *buf = malloc(size ? size : 1), out[WI_TRACEPARENT_LEN + 1];
    struct wi_traceparent tp;
    static const unsigned char zero[16];

    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (wi_traceparent_parse(buf, size, &tp) == 0) {
        wi_traceparent_format(&tp, out);
        if (size != WI_TRACEPARENT_LEN || memcmp(out, buf, size) != 0 || !memcmp(tp.trace_id, zero, 16) ||
            !memcmp(tp.span_id, zero, 8))
            abort();
    }
    free(buf);
    return 0;
}
