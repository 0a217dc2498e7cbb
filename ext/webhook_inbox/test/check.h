/* check.h - the C unit tests' one assertion: CHECK(cond, fmt, ...) counts, and on failure
 * prints file:line, the condition and the message, then carries on. Each test file defines
 * main() and reports `failures` / `checks`. */
#ifndef WI_TEST_CHECK_H
#define WI_TEST_CHECK_H

#include <stdio.h>

static int failures, checks;

#define CHECK(cond, ...)                                               \
    do {                                                               \
        checks++;                                                      \
        if (!(cond)) {                                                 \
            failures++;                                                \
            fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                              \
            fputc('\n', stderr);                                       \
        }                                                              \
    } while (0)

#endif
