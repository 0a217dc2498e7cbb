/* listener.c - LISTEN webhook_inbox on a connection of its own; every batch of notifications
 * it reads becomes one wi_wake_notify(); a lost or failed connection is retried with
 * jittered, doubling delays, and a fresh one counts as a notification (some may have been
 * missed meanwhile). */
#define _POSIX_C_SOURCE 200809L
#include "claim/listener.h"
#include "core/clock.h"

#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "claim/retry.h"
#include "core/log.h"
#include "pg/pgw.h"

struct wi_listener {
    struct wi_runtime *rt;
    pthread_t thread;
};

static const struct wi_pg_stmt listen_stmt = {"wi_listen", "LISTEN webhook_inbox"};

static void *listen_main(void *arg)
{
    struct wi_listener *l = arg;
    struct wi_runtime *rt = l->rt;
    struct wi_pg *pg = NULL;
    double delay = WI_RECONNECT_MIN_S;
    uint64_t rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20) ^ 0x5DEECE66Dull;

    while (!atomic_load(&rt->stopping)) {
        struct pollfd p[2];
        struct wi_err err;
        int got;

        if (!pg) {
            if (!(pg = wi_pg_connect(rt->cfg.database_url, &listen_stmt, 1, &err)) ||
                wi_pg_cmd(pg, listen_stmt.name, 0, NULL, &err) < 0) {
                log_warnx("listener_connect_failed", "retry_in_s=%.1f error=%s", delay, WI_LOG_Q(err.msg));
                wi_pg_free(pg);
                pg = NULL;
                wi_runtime_nap(rt, wi_retry_backoff(&delay, &rng));
                continue;
            }
            delay = WI_RECONNECT_MIN_S;
            log_info("listener_connected", "channel=webhook_inbox");
            wi_wake_notify(&rt->claims, wi_clock_s());
        }
        p[0].fd = wi_pg_socket(pg);
        p[1].fd = rt->stop_fd;
        p[0].events = p[1].events = POLLIN;
        p[0].revents = p[1].revents = 0;
        if (poll(p, 2, -1) < 0 || !p[0].revents)
            continue; /* EINTR, or stopping */
        if ((got = wi_pg_drain_notifies(pg)) < 0) {
            log_warnx("listener_connection_lost", "note=\"reconnecting; workers look every --poll-interval meanwhile\"");
            wi_pg_free(pg);
            pg = NULL;
        } else if (got > 0) {
            wi_wake_notify(&rt->claims, wi_clock_s());
        }
    }
    wi_pg_free(pg);
    return NULL;
}

struct wi_listener *wi_listener_start(struct wi_runtime *rt)
{
    struct wi_listener *l = calloc(1, sizeof *l);

    if (!l)
        return NULL;
    l->rt = rt;
    if (pthread_create(&l->thread, NULL, listen_main, l) != 0) {
        free(l);
        return NULL;
    }
    return l;
}

void wi_listener_stop(struct wi_listener *l)
{
    if (!l)
        return;
    pthread_join(l->thread, NULL);
    free(l);
}
