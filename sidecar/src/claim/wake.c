/* wake.c - the NOTIFY hand-off from the listener to one idle worker (see wake.h). */
#define _POSIX_C_SOURCE 200809L
#include "claim/wake.h"
#include "core/clock.h"

#include <math.h>
#include <string.h>
#include <time.h>

void wi_wake_init(struct wi_wake *wk)
{
    pthread_condattr_t a;

    memset(wk, 0, sizeof *wk);
    pthread_mutex_init(&wk->lock, NULL);
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* deadlines are wi_clock_s() */
    pthread_cond_init(&wk->cond, &a);
    pthread_condattr_destroy(&a);
}

void wi_wake_destroy(struct wi_wake *wk)
{
    pthread_cond_destroy(&wk->cond);
    pthread_mutex_destroy(&wk->lock);
}

void wi_wake_notify(struct wi_wake *wk, double now)
{
    pthread_mutex_lock(&wk->lock);
    if (wk->pending == 0)
        wk->pending = now > 0 ? now : 1e-9;
    pthread_cond_signal(&wk->cond);
    pthread_mutex_unlock(&wk->lock);
}

void wi_wake_claiming(struct wi_wake *wk, int *active, double now)
{
    pthread_mutex_lock(&wk->lock);
    if (wk->pending > 0 && wk->pending <= now)
        wk->pending = 0;
    if (!*active) {
        *active = 1;
        wk->active++;
    }
    pthread_mutex_unlock(&wk->lock);
}

void wi_wake_more(struct wi_wake *wk)
{
    pthread_mutex_lock(&wk->lock);
    if (wk->waiting > 0) { /* else nobody would take it before the asking worker itself */
        wk->backlog = 1;
        pthread_cond_signal(&wk->cond);
    }
    pthread_mutex_unlock(&wk->lock);
}

void wi_wake_idle(struct wi_wake *wk, int *active)
{
    pthread_mutex_lock(&wk->lock);
    if (*active) {
        *active = 0;
        wk->active--;
    }
    pthread_mutex_unlock(&wk->lock);
}

static void to_timespec(double t, struct timespec *ts)
{
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - floor(t)) * 1e9);
    if (ts->tv_nsec >= 1000000000L)
        ts->tv_nsec = 999999999L;
}

int wi_wake_wait(struct wi_wake *wk, int *active, double deadline, double defer_s)
{
    int claim = 0;

    pthread_mutex_lock(&wk->lock);
    if (*active) {
        *active = 0;
        wk->active--;
    }
    while (!wk->stopping) {
        double now = wi_clock_s(), until = deadline;
        struct timespec ts;

        if (wk->backlog) {
            wk->backlog = 0;
            claim = 1;
            break;
        }
        if (wk->pending > 0) {
            if (wk->active == 0 || now >= wk->pending + defer_s) {
                claim = 1;
                break;
            }
            if (wk->pending + defer_s < until)
                until = wk->pending + defer_s; /* an active worker should cover it by then */
        }
        if (now >= deadline)
            break;
        to_timespec(until, &ts);
        wk->waiting++;
        (void)pthread_cond_timedwait(&wk->cond, &wk->lock, &ts);
        wk->waiting--;
    }
    pthread_mutex_unlock(&wk->lock);
    return claim;
}

void wi_wake_stop(struct wi_wake *wk)
{
    pthread_mutex_lock(&wk->lock);
    wk->stopping = 1;
    pthread_cond_broadcast(&wk->cond);
    pthread_mutex_unlock(&wk->lock);
}
