/* fuzz_config.c - libFuzzer target for the sidecar's configuration parsers: command-line
 * flags, the key = value file (--config, fed through a memfd), durations, and the --notify
 * and --notify-setting values of a loaded configuration (notify.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/config.h"
#include "core/duration.h"
#include "observability/notify.h"

#define MAX_ARGS 16

/* Input layout: the first line is a duration; up to MAX_ARGS more lines are flags; what
 * follows a line holding only "--" is the config file's content. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1), *file = NULL, *argv[MAX_ARGS + 2], path[64];
    struct wi_config cfg;
    struct wi_err err;
    double seconds;
    int argc = 0, fd = -1;

    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';

    char *line = buf, *next = strchr(line, '\n');
    if (next)
        *next++ = '\0';
    (void)wi_duration_parse(line, &seconds);

    for (line = next; line && argc < MAX_ARGS; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strcmp(line, "--") == 0) {
            file = next ? next : "";
            break;
        }
        if (strncmp(line, "--config", 8) != 0) /* the file comes only from the memfd below */
            argv[argc++] = line;
    }
    if (file && (fd = memfd_create("fuzz-config", 0)) >= 0 &&
        write(fd, file, strlen(file)) == (ssize_t)strlen(file)) {
        snprintf(path, sizeof path, "--config=/proc/self/fd/%d", fd);
        argv[argc++] = path;
    }
    argv[argc] = NULL;
    memset(&cfg, 0, sizeof cfg);
    if (wi_config_load(&cfg, argc, argv, &err) == 0) {
        char d[256], f[256], st[256]; /* small: the "too many values" bounds are reached too */
        (void)wi_notify_targets(&cfg, d, sizeof d, f, sizeof f, st, sizeof st, &err);
        wi_config_free(&cfg);
    }
    if (fd >= 0)
        close(fd);
    free(buf);
    return 0;
}
