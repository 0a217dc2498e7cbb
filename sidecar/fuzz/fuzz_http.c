/* fuzz_http.c - libFuzzer target for the metrics listener's request-head parser: no crash
 * or overread on any bytes, and on success slices that lie inside the input with the
 * syntax the listener relies on; a complete head stays complete with more bytes after it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "observability/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees any read past the end. */
    char *buf = malloc(size ? size : 1);
    struct wi_http_req req;
    long n;

    if (!buf)
        return 0;
    memcpy(buf, data, size);
    n = wi_http_parse(buf, size, &req);
    if (n > 0) {
        if ((size_t)n > size || req.method != buf || req.method_len == 0 || req.target_len == 0 ||
            req.target < buf || req.target + req.target_len > buf + n || req.target[0] != '/' ||
            req.minor < 0 || req.minor > 9)
            abort();
        (void)wi_http_path_is(&req, "/metrics");
        (void)wi_http_method_is(&req, "GET");
        /* The same head parsed alone gives the same length. */
        if (wi_http_parse(buf, (size_t)n, &req) != n)
            abort();
    } else if (n == 0 && size > 0) {
        /* "Need more" must hold for every shorter prefix too (never -1 then 0). */
        if (wi_http_parse(buf, size - 1, &req) < 0)
            abort();
    }
    free(buf);
    return 0;
}
