/* minitest.h - the smallest test harness: CHECK(cond) counts failures, DONE() reports. */
#ifndef WI_MINITEST_H
#define WI_MINITEST_H
#include <stdio.h>

static int mt_failures, mt_checks;
#define CHECK(cond)                                                                  \
    do {                                                                             \
        mt_checks++;                                                                 \
        if (!(cond)) {                                                               \
            mt_failures++;                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)
#define DONE(name)                                                                   \
    do {                                                                             \
        printf("%s: %d checks, %d failures\n", name, mt_checks, mt_failures);        \
        return mt_failures ? 1 : 0;                                                  \
    } while (0)
#endif
