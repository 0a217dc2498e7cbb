/* listener.h - the process's one LISTEN webhook_inbox connection (`run`, not --once): each
 * notification goes to at most one idle worker through rt->claims (wake.h). */
#ifndef WI_LISTENER_H
#define WI_LISTENER_H

#include "core/runtime.h"

struct wi_listener;

/* Starts the listener thread on rt->cfg.database_url; it connects (and reconnects, with
 * backoff) on its own. Returns NULL only when the thread cannot be created. */
struct wi_listener *wi_listener_start(struct wi_runtime *rt);

/* Joins the thread (it ends once rt->stopping is set and rt->stop_fd is readable) and frees
 * it. Accepts NULL. */
void wi_listener_stop(struct wi_listener *l);

#endif
