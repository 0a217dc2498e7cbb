/* test_json_skip.c - json_skip.c against a byte-by-byte reference: random texts of quotes,
 * backslashes, brackets and filler (blocks with and without escapes, strings across block
 * edges), every truncation point, both the dispatched and the portable path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../json_skip.h"
#include "check.h"

/* The contract, spelled out one byte at a time. */
static const char *reference(const char *p, const char *end)
{
    long depth = 0;
    int in_string = 0, escaped = 0;
    for (const char *q = p; q < end; q++) {
        char c = *q;
        if (in_string) {
            if (escaped) escaped = 0;
            else if (c == '\\') escaped = 1;
            else if (c == '"') in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return q + 1;
        }
    }
    return NULL;
}

int main(void)
{
    static const char alphabet[] = "\"\\{}[]a :,\"{}aaaaaaaa";
    char *buf = malloc(1024);
    unsigned seed = 12345;
    for (int round = 0; round < 20000; round++) {
        size_t n = 1 + (size_t)(rand_r(&seed) % 600);
        int no_escapes = round % 3 == 0; /* most blocks then take the mask path */
        buf[0] = round % 2 ? '{' : '[';
        for (size_t i = 1; i < n; i++) {
            char c = alphabet[rand_r(&seed) % (sizeof alphabet - 1)];
            buf[i] = no_escapes && c == '\\' ? 'a' : c;
        }
        /* each text once whole, and a few prefixes (every one for short texts) */
        for (size_t m = n; m > 0;) {
            const char *want = reference(buf, buf + m);
            CHECK(wi_json_skip_container(buf, buf + m) == want, "round %d length %zu", round, m);
            CHECK(wi_json_skip_portable(buf, buf + m) == want, "portable: round %d length %zu", round, m);
            size_t step = n < 80 ? 1 : 1 + (size_t)(rand_r(&seed) % 97);
            m = m > step ? m - step : 0;
        }
    }
    /* dense brackets (the blocks that may close, found by running sums on AVX2): k opening
     * brackets, a filler of items, then k closing ones, for every depth around the 64-byte
     * block and every truncation point */
    static const char *const items[] = {"[],", "{},", "[[]],", "[ ],", "[\"]\"],", "[{}]"};
    for (int k = 1; k <= 70; k++) {
        for (size_t it = 0; it < sizeof items / sizeof items[0]; it++) {
            size_t len = 0, lead = (size_t)(k * 7 + (int)it) % 64;
            for (size_t i = 0; i < (size_t)k; i++) buf[len++] = i % 2 ? '{' : '[';
            while (len < lead + 200) len += (size_t)sprintf(buf + len, "%s", items[it]);
            buf[len++] = '0';
            for (int i = k - 1; i >= 0; i--) buf[len++] = i % 2 ? '}' : ']';
            for (size_t m = len; m > 0; m--) {
                const char *want = reference(buf, buf + m);
                CHECK(wi_json_skip_container(buf, buf + m) == want, "dense %d %zu length %zu", k, it, m);
                CHECK(wi_json_skip_portable(buf, buf + m) == want, "dense portable %d %zu length %zu", k, it, m);
            }
        }
    }
    /* a deep document: brackets closing inside a block after many blocks of opens */
    size_t n = 0;
    for (int i = 0; i < 300; i++) buf[n++] = '[';
    for (int i = 0; i < 300; i++) buf[n++] = ']';
    CHECK(wi_json_skip_container(buf, buf + n) == buf + n, "nested arrays");
    CHECK(wi_json_skip_container(buf, buf + n - 1) == NULL, "one bracket short");
    memcpy(buf, "{\"}\\\"}\"}", 8); /* a quote escaped inside a string */
    CHECK(wi_json_skip_container(buf, buf + 8) == buf + 8, "escaped quote");
    free(buf);
    printf("json_skip: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
