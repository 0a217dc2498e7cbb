/* notify.h - operational notifications: `run --notify NAME[:FORMAT]` checks the conditions an
 * operator must hear about every --notify-interval on one sidecar of many, and each change
 * becomes a message per destination through the outbox (db/functions/alerts.sql);
 * `notify --test` sends a test message. */
#ifndef WI_NOTIFY_H
#define WI_NOTIFY_H

#include <stdio.h>
#include "core/config.h"
#include "wi_err.h"

struct wi_notify; /* opaque: the checking thread and its connection */

#define WI_NOTIFY_TARGETS_MAX 2048 /* bytes of each of wi_notify_targets' three texts */

/* The --notify and --notify-setting values as the SQL functions take them: dests and formats
 * as text[] literals ({a,b}), settings as a JSON object. Each NAME must be a --destination
 * (a message needs the URL); a FORMAT is json (the default) or slack; a setting is KEY=NUMBER
 * (the keys are checked by the database, which names an unknown one). Returns 0, or -1 with
 * *err saying which value is wrong. */
int wi_notify_targets(const struct wi_config *cfg, char *dests, size_t dests_len, char *formats,
                      size_t formats_len, char *settings, size_t settings_len, struct wi_err *err);

/* Starts the thread for `run` (cfg->notifies.n > 0): the first check after a few seconds,
 * then every cfg->notify_interval; a failed check is logged and tried again at the next.
 * Returns NULL with *err when the values are wrong or the thread cannot start. */
struct wi_notify *wi_notify_start(const struct wi_config *cfg, struct wi_err *err);

/* Stops the thread (a check in flight finishes first) and frees; accepts NULL. */
void wi_notify_stop(struct wi_notify *n);

/* `notify --test`: records a test message for each --notify destination, then waits up to
 * wait_s for running sidecars to deliver them, printing each outcome to out. Returns the exit
 * code: 0 all delivered, 1 not (quarantined, or not delivered in time), 2 bad values. */
int wi_notify_test(const struct wi_config *cfg, double wait_s, FILE *out);

#endif
