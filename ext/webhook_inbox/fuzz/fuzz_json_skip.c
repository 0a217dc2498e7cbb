/* fuzz_json_skip.c - libFuzzer entry point for json_skip.c: the dispatched (AVX2 where the CPU
 * has it) and the portable skipper must agree with each other and with a byte-by-byte
 * reading on any text starting with a bracket. */
#include <stdint.h>
#include <stdlib.h>
#include "../json_skip.h"

static const char *reference(const char *p, const char *end)
{
    long depth = 0;
    int in_string = 0, escaped = 0;
    for (const char *q = p; q < end; q++) {
        if (in_string) {
            if (escaped) escaped = 0;
            else if (*q == '\\') escaped = 1;
            else if (*q == '"') in_string = 0;
        } else if (*q == '"') {
            in_string = 1;
        } else if (*q == '{' || *q == '[') {
            depth++;
        } else if ((*q == '}' || *q == ']') && --depth == 0) {
            return q + 1;
        }
    }
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    if (!size || (*p != '{' && *p != '[')) return 0;
    const char *want = reference(p, end);
    if (wi_json_skip_container(p, end) != want || wi_json_skip_portable(p, end) != want) abort();
    return 0;
}
