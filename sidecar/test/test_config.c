/* test_config.c - the configuration table: defaults, env/file/flag precedence,
 * validation errors, reload of reloadable fields only, log value quoting. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "minitest.h"

static int load(struct wi_config *c, struct wi_err *e, int argc, char **argv)
{
    return wi_config_load(c, argc, argv, e);
}

int main(void)
{
    struct wi_config c, d;
    struct wi_err e;
    char buf[64];
    char path[] = "/tmp/wi-test-config-XXXXXX";
    int fd;
    FILE *f;

    unsetenv("DATABASE_URL");
    unsetenv("WEBHOOK_INBOX_CONFIG");
    unsetenv("WEBHOOK_INBOX_BATCH_SIZE");

    /* Defaults. */
    CHECK(load(&c, &e, 0, NULL) == 0);
    CHECK(c.concurrency == 2 && c.batch_size == 20 && c.max_attempts == 10);
    CHECK(c.backoff_base == 1.0 && c.backoff_cap == 3600.0 && c.poll_interval == 5.0);
    CHECK(c.unrouted == WI_UNROUTED_WAIT && c.unrouted_delay == 60.0 && c.log_events == 1 && c.once == 0);
    CHECK(strcmp(wi_config_unrouted_name(c.unrouted), "wait") == 0);
    CHECK(strcmp(wi_config_unrouted_name(WI_UNROUTED_IGNORE), "ignore") == 0);
    CHECK(c.database_url && strcmp(c.database_url, "") == 0);
    CHECK(c.citus_direct == 1 && c.citus_nodes.n == 0);
    wi_config_free(&c);

    /* --citus-node: checked at load, the entry never echoed. */
    {
        char *ok[] = {"--citus-node", "w1:5432=10.0.0.5", "--citus-direct=false"};
        char *no[] = {"--citus-node", "w1=10.0.0.5:s3cret"};
        CHECK(load(&c, &e, 3, ok) == 0 && c.citus_nodes.n == 1 && c.citus_direct == 0);
        wi_config_free(&c);
        CHECK(load(&c, &e, 2, no) < 0 && strstr(e.msg, "--citus-node #1") && !strstr(e.msg, "s3cret"));
    }

    /* Flags: --name=value, --name value, bare booleans, underscores accepted. */
    {
        char *argv[] = {"--batch-size=5", "--concurrency", "3", "--once", "--unrouted=quarantine",
                        "--backoff_base", "250ms", "--database-url", "dbname=x"};
        CHECK(load(&c, &e, 9, argv) == 0);
        CHECK(c.batch_size == 5 && c.concurrency == 3 && c.once == 1 && c.unrouted == WI_UNROUTED_QUARANTINE);
        CHECK(c.backoff_base > 0.2499 && c.backoff_base < 0.2501);
        CHECK(strcmp(c.database_url, "dbname=x") == 0);
        wi_config_free(&c);
    }

    /* Errors: unknown option, out of range, bad enum, missing value, cap < base, stray argument. */
    {
        char *a1[] = {"--nope=1"}, *a2[] = {"--batch-size=0"}, *a3[] = {"--unrouted=drop"};
        char *a4[] = {"--batch-size"}, *a5[] = {"--backoff-base=10s", "--backoff-cap=1s"}, *a6[] = {"stray"};
        char *a7[] = {"--concurrency=2x"}, *a8[] = {"--once=maybe"};
        CHECK(load(&c, &e, 1, a1) < 0 && strstr(e.msg, "unknown option --nope"));
        CHECK(load(&c, &e, 1, a2) < 0 && strstr(e.msg, "batch-size"));
        CHECK(load(&c, &e, 1, a3) < 0 && strstr(e.msg, "wait, ignore, quarantine, retry"));
        CHECK(load(&c, &e, 1, a4) < 0 && strstr(e.msg, "needs a value"));
        CHECK(load(&c, &e, 2, a5) < 0 && strstr(e.msg, "backoff-cap"));
        CHECK(load(&c, &e, 1, a6) < 0);
        CHECK(load(&c, &e, 1, a7) < 0);
        /* Durations have upper bounds, so later ms/int conversions cannot overflow. */
        char *b1[] = {"--poll-interval=25d"}, *b2[] = {"--lock-timeout=2d"}, *b3[] = {"--backoff-cap=31d"};
        char *b4[] = {"--poll-interval=1d", "--backoff-cap=30d"};
        CHECK(load(&c, &e, 1, b1) < 0 && strstr(e.msg, "poll-interval must be at most 1d"));
        CHECK(load(&c, &e, 1, b2) < 0 && strstr(e.msg, "lock-timeout"));
        CHECK(load(&c, &e, 1, b3) < 0 && strstr(e.msg, "backoff-cap must be at most 30d"));
        CHECK(load(&c, &e, 2, b4) == 0 && c.poll_interval == 86400.0);
        wi_config_free(&c);
        /* ... and --unrouted-delay a lower one: `run --once` must not meet a waiting event again. */
        char *b5[] = {"--unrouted-delay=500ms"}, *b6[] = {"--unrouted-delay=2m"};
        CHECK(load(&c, &e, 1, b5) < 0 && strstr(e.msg, "unrouted-delay must be at least 1s"));
        CHECK(load(&c, &e, 1, b6) == 0 && c.unrouted_delay == 120.0);
        wi_config_free(&c);
        CHECK(load(&c, &e, 1, a8) < 0);
        CHECK(c.database_url == NULL); /* freed and zeroed on failure */
    }

    /* Precedence: file < environment < flags. */
    fd = mkstemp(path);
    CHECK(fd >= 0);
    f = fdopen(fd, "w");
    fputs("# comment\nbatch_size = 7\nmax-attempts = 3\nunrouted = 'retry'\npoll_interval = 2s\n", f);
    fclose(f);
    setenv("WEBHOOK_INBOX_MAX_ATTEMPTS", "4", 1);
    setenv("DATABASE_URL", "dbname=fromenv", 1);
    {
        char cfgflag[64];
        char *argv[2];
        snprintf(cfgflag, sizeof cfgflag, "--config=%s", path);
        argv[0] = cfgflag;
        argv[1] = "--poll-interval=3s";
        CHECK(load(&c, &e, 2, argv) == 0);
        CHECK(c.batch_size == 7);           /* file */
        CHECK(c.max_attempts == 4);         /* env beats file */
        CHECK(c.poll_interval == 3.0);      /* flag beats file */
        CHECK(c.unrouted == WI_UNROUTED_RETRY);
        CHECK(strcmp(c.database_url, "dbname=fromenv") == 0);

        /* Reload copies reloadable fields only. */
        memset(&d, 0, sizeof d);
        {
            char *argv2[] = {"--batch-size=9", "--concurrency=7", "--database-url=dbname=other"};
            CHECK(load(&d, &e, 3, argv2) == 0);
        }
        wi_config_apply_reload(&c, &d);
        CHECK(c.batch_size == 9);
        CHECK(c.concurrency == 2);
        CHECK(strcmp(c.database_url, "dbname=fromenv") == 0);
        wi_config_free(&d);
        wi_config_free(&c);
    }
    /* A bad file is an error (the caller keeps its old configuration). */
    f = fopen(path, "w");
    fputs("batch_size = lots\n", f);
    fclose(f);
    {
        char cfgflag[64];
        char *argv[1];
        snprintf(cfgflag, sizeof cfgflag, "--config=%s", path);
        argv[0] = cfgflag;
        CHECK(load(&c, &e, 1, argv) < 0 && strstr(e.msg, "config file line 1"));
    }
    unlink(path);
    unsetenv("WEBHOOK_INBOX_MAX_ATTEMPTS");
    unsetenv("DATABASE_URL");

    /* --destination: NAME=URL configures a destination; a bare NAME (flags only) is the
     * requeue --effects filter, checked like the outbox's CHECK, at most one. */
    {
        char *ok[] = {"--destination", "alpha_1", "--destination=beta=https://example.test/x"};
        char *bad[] = {"--destination", "Alpha"};
        char *two[] = {"--destination", "alpha", "--destination", "beta"};
        char *url[] = {"--destination", "https://user:pw@example.test"};
        CHECK(load(&c, &e, 3, ok) == 0 && c.effects_destination && strcmp(c.effects_destination, "alpha_1") == 0 &&
              c.destinations.n == 1 && strcmp(c.destinations.v[0].name, "beta") == 0);
        wi_config_free(&c);
        CHECK(c.effects_destination == NULL);
        CHECK(load(&c, &e, 2, bad) < 0 && strstr(e.msg, "[a-z][a-z0-9_]{0,62}"));
        CHECK(load(&c, &e, 4, two) < 0 && strstr(e.msg, "one destination"));
        CHECK(load(&c, &e, 2, url) < 0 && !strstr(e.msg, "pw"));
        setenv("WEBHOOK_INBOX_DESTINATION", "alpha", 1); /* the bare form is a flag only */
        CHECK(load(&c, &e, 0, NULL) < 0 && strstr(e.msg, "NAME=URL"));
        unsetenv("WEBHOOK_INBOX_DESTINATION");
    }

    /* Log values: bare when safe, quoted and escaped otherwise, bounded. */
    CHECK(strcmp(wi_log_quote(buf, sizeof buf, "evt_1", 100), "evt_1") == 0);
    CHECK(strcmp(wi_log_quote(buf, sizeof buf, "a b", 100), "\"a b\"") == 0);
    CHECK(strcmp(wi_log_quote(buf, sizeof buf, "x\"y\n", 100), "\"x\\\"y\\x0a\"") == 0);
    CHECK(strcmp(wi_log_quote(buf, sizeof buf, "", 100), "\"\"") == 0);
    CHECK(strcmp(wi_log_quote(buf, sizeof buf, NULL, 100), "\"\"") == 0);
    {
        char big[500];
        memset(big, 'a', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        CHECK(strlen(wi_log_quote(buf, sizeof buf, big, 400)) < sizeof buf);
        big[10] = ' ';
        CHECK(strlen(wi_log_quote(buf, sizeof buf, big, 400)) < sizeof buf);
    }
    DONE("test_config");
}
