/* claim.h - claiming due pending events: FOR UPDATE SKIP LOCKED inside the caller's
 * transaction, so no other worker on any host can take them until it ends. */
#ifndef WI_CLAIM_H
#define WI_CLAIM_H

#include "pg/pgw.h"

extern const struct wi_pg_stmt wi_claim_stmt;
extern const struct wi_pg_stmt wi_next_due_stmt;
extern const struct wi_pg_stmt wi_next_due_from_head_stmt;
extern const struct wi_pg_stmt wi_claim_before_now_stmt;

/* One claimed row. Strings are owned by the batch.
 * Invariant: once dispatched, the row in the database already says what result says (the
 * dispatch statement recorded it in the claiming transaction); charged events have
 * attempts + 1 there. */
struct wi_event {
    char *scope;
    char *event_id;
    char *event_type;
    int attempts;      /* attempts before this run */
    /* filled by dispatch */
    char result[16];   /* done, quarantined, retry, waiting, skipped; "" = not run */
    char *detail;      /* outcome, reason or error (owned) */
    double latency_ms; /* receipt to dispatch */
    int charged;       /* 1: this run was charged one attempt (retry, or quarantined at the maximum) */
    long long retry_in_ms; /* retry / waiting: delay before the next run; else -1 */
};

struct wi_batch {
    struct wi_event *ev;
    int n;
};

/* Claims up to limit due events (oldest first) in the open transaction. Returns the
 * number claimed (0..limit) or -1 with *err. Frees any previous content of *b. */
int wi_claim(struct wi_pg *pg, int limit, struct wi_batch *b, struct wi_err *err);

/* Releases the strings of a batch; accepts NULL; leaves it empty. */
void wi_batch_free(struct wi_batch *b);

/* Seconds until the earliest pending event is due (<= 0: due now), or -1 when none is
 * pending or on error. */
double wi_claim_next_due(struct wi_pg *pg);

#endif
