/* wake.h - how a NOTIFY reaches one of a process's workers.
 *
 * One listener connection per process LISTENs (listener.c); the workers do not. Every
 * worker LISTENing and claiming on each NOTIFY cost an empty claim per worker per receipt
 * (500 receipts/s, 4 workers: 10.5 transactions per event; now 1.4). Now:
 *  - A notification stays pending until a claim that started after it arrived covers it
 *    (its row committed before the NOTIFY was sent, so that claim's snapshot sees it).
 *  - An active worker (running a batch or lingering) looks at the pending mark before it
 *    goes idle, so it covers a notification within its batch and linger. An idle worker
 *    is woken for a notification, and claims for it when no other worker is active, or
 *    when the notification has waited the defer window (--batch-linger + a few ms: a slow
 *    batch must not hold new events back). One wake-up, one claim.
 *  - A full batch (more may be due) wakes one idle worker at once: a backlog brings every
 *    worker in, one by one. */
#ifndef WI_WAKE_H
#define WI_WAKE_H

#include <pthread.h>

struct wi_wake {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* idle workers wait here (CLOCK_MONOTONIC) */
    double pending;      /* arrival of the earliest notification no claim covers (monotonic s); 0: none */
    int backlog;         /* a full batch asked for one more worker */
    int active;          /* workers running a batch or lingering: each looks at pending before idling */
    int waiting;         /* idle workers inside wi_wake_wait */
    int stopping;
};

void wi_wake_init(struct wi_wake *wk);
void wi_wake_destroy(struct wi_wake *wk);

/* Notifications arrived at now (or the listener (re)connected, so some may have been
 * missed): pending from now unless already pending; wakes one idle worker. */
void wi_wake_notify(struct wi_wake *wk, double now);

/* A worker starts a claim at now (*active: its own flag, 0 when idle): it is active, and
 * its claim covers the notifications that arrived before now. */
void wi_wake_claiming(struct wi_wake *wk, int *active, double now);

/* A worker's batch was full: more may be due; wakes one idle worker, if one waits, to claim
 * at once. */
void wi_wake_more(struct wi_wake *wk);

/* A worker that will not claim until it has reconnected or napped goes idle (*active = 0). */
void wi_wake_idle(struct wi_wake *wk, int *active);

/* A worker with nothing more to do goes idle (*active = 0) and waits. Returns 1 when it
 * should claim for a notification (pending, and no other worker active or it waited
 * defer_s) or for a backlog, 0 at the deadline (monotonic s) or after wi_wake_stop. */
int wi_wake_wait(struct wi_wake *wk, int *active, double deadline, double defer_s);

/* Wakes every waiter for good (the process stops). */
void wi_wake_stop(struct wi_wake *wk);

#endif
