/* fuzz_canon.c - libFuzzer entry point for the JSON scanner and the Didit V2
 * canonicalizer. Checks: canonical output is a fixed point (canon(canon(x)) == canon(x)),
 * is itself valid JSON, and canonicalization succeeds only on input the scanner accepts;
 * on valid JSON the fast duplicate scan (STOP_EARLY | DUPLICATES) finds the same fields
 * and the same duplicates as the full scan. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../canon.h"
#include "../json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct wi_err err;
    struct wi_json_field f[3] = {{.name = "id"}, {.name = "type"}, {.name = "timestamp"}};
    char *out = NULL, *again = NULL;
    size_t on = 0, an = 0;

    int valid = wi_json_scan(s, size, 0, f, 3, NULL, &err) == 0;
    (void)wi_json_jsonb_safe(s, size);
    if (valid) {
        struct wi_json_field d[3] = {{.name = "id"}, {.name = "type"}, {.name = "timestamp"}};
        if (wi_json_scan(s, size, WI_JSON_STOP_EARLY | WI_JSON_DUPLICATES, d, 3, NULL, &err) != 0) abort();
        for (int i = 0; i < 3; i++)
            if (d[i].kind != f[i].kind || d[i].duplicate != f[i].duplicate || d[i].value.p != f[i].value.p) abort();
    }
    for (int i = 0; i < 3; i++)
        if (f[i].kind == WI_JSON_STRING) {
            char *buf = malloc(f[i].value.n + 1);
            if (!buf) return 0;
            if (wi_json_unescape(f[i].value.p, f[i].value.n, buf) > f[i].value.n) abort();
            free(buf);
        }
    if (wi_canon_didit(s, size, WI_CANON_MAX_OUT(size), NULL, &out, &on, &err) != 0) return 0;
    if (!valid) abort(); /* canon accepted what the validator rejects */
    if (memmem(out, on, "Infinity", 8) == NULL) {
        if (wi_json_scan(out, on, 0, NULL, 0, NULL, &err) != 0) abort();
        if (wi_canon_didit(out, on, WI_CANON_MAX_OUT(on), NULL, &again, &an, &err) != 0) abort();
        if (an != on || memcmp(again, out, on) != 0) abort();
        wi_canon_free(again);
    }
    wi_canon_free(out);
    return 0;
}
