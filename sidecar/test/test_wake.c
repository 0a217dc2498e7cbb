/* test_wake.c - the NOTIFY hand-off (wake.c): a notification is pending until a claim that
 * started after it covers it; an idle worker claims for it at once when no other worker is
 * active, and after the defer window when one is (unless that one covered it meanwhile); a
 * full batch's call for help reaches a waiting worker and is taken once (with nobody waiting
 * it is not kept); a stop releases every waiter; a notification
 * wakes a worker waiting in another thread long before its deadline. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#include "claim/wake.h"
#include "core/clock.h"
#include "minitest.h"

static struct wi_wake shared;

static void nap_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void *waiter(void *arg)
{
    int *got = arg, active = 0;
    *got = wi_wake_wait(&shared, &active, wi_clock_s() + 10, 0.005);
    return NULL;
}

int main(void)
{
    struct wi_wake wk;
    pthread_t t;
    int a = 0, b = 0, got = -1;
    double t0, now;

    wi_wake_init(&wk);
    CHECK(wi_wake_wait(&wk, &a, 0, 0.005) == 0);   /* nothing pending: returns at the (past) deadline */
    now = wi_clock_s();
    wi_wake_notify(&wk, now);
    wi_wake_claiming(&wk, &a, now - 0.5);          /* a claim older than the notification covers nothing */
    CHECK(a == 1 && wk.active == 1);
    t0 = wi_clock_s();
    CHECK(wi_wake_wait(&wk, &b, t0 + 5, 0.05) == 1); /* a is active: b claims only after the defer window */
    CHECK(wi_clock_s() - t0 >= 0.04);
    wi_wake_claiming(&wk, &b, wi_clock_s());       /* b's claim covers it */
    CHECK(wk.pending == 0 && wk.active == 2);
    CHECK(wi_wake_wait(&wk, &b, 0, 0.05) == 0 && b == 0 && wk.active == 1);

    /* The active worker covers a notification within the window: the idle one does not claim. */
    now = wi_clock_s();
    wi_wake_notify(&wk, now);
    wi_wake_claiming(&wk, &a, now + 0.001);
    CHECK(wi_wake_wait(&wk, &b, wi_clock_s() + 0.1, 0.05) == 0);
    /* With nobody active, an idle worker claims at once, whatever the window. */
    wi_wake_idle(&wk, &a);
    CHECK(a == 0 && wk.active == 0);
    wi_wake_notify(&wk, wi_clock_s());
    t0 = wi_clock_s();
    CHECK(wi_wake_wait(&wk, &b, t0 + 5, 5) == 1);
    CHECK(wi_clock_s() - t0 < 1);
    wi_wake_claiming(&wk, &b, wi_clock_s());
    /* A full batch asks for one more worker: nobody waits, so nothing is left behind. */
    wi_wake_more(&wk);
    CHECK(wi_wake_wait(&wk, &a, 0, 5) == 0);
    wi_wake_stop(&wk);
    t0 = wi_clock_s();
    CHECK(wi_wake_wait(&wk, &a, t0 + 10, 0) == 0); /* stopping: no claim, no wait */
    CHECK(wi_clock_s() - t0 < 1);
    wi_wake_destroy(&wk);

    /* Across threads: a waiting worker is woken by a notification, or released by a stop. */
    wi_wake_init(&shared);
    t0 = wi_clock_s();
    CHECK(pthread_create(&t, NULL, waiter, &got) == 0);
    nap_ms(50);
    wi_wake_notify(&shared, wi_clock_s());
    pthread_join(t, NULL);
    CHECK(got == 1);
    CHECK(wi_clock_s() - t0 < 5);
    /* A full batch's call reaches a waiting worker at once, and is taken once. */
    wi_wake_claiming(&shared, &a, wi_clock_s());
    got = -1;
    t0 = wi_clock_s();
    CHECK(pthread_create(&t, NULL, waiter, &got) == 0);
    nap_ms(50);
    wi_wake_more(&shared);
    pthread_join(t, NULL);
    CHECK(got == 1);
    CHECK(wi_clock_s() - t0 < 5);
    CHECK(wi_wake_wait(&shared, &b, 0, 5) == 0);
    wi_wake_idle(&shared, &a);
    got = -1;
    CHECK(pthread_create(&t, NULL, waiter, &got) == 0);
    nap_ms(50);
    wi_wake_stop(&shared);
    pthread_join(t, NULL);
    CHECK(got == 0);
    wi_wake_destroy(&shared);
    DONE("test_wake");
}
