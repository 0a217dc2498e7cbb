/* sig_paddle.h - Paddle Classic's form webhooks (struct wi_provider.custom of "paddle_classic"). */
#ifndef WI_SIG_PADDLE_H
#define WI_SIG_PADDLE_H

#include "sig.h"

/* Verifies a form body whose p_signature field is the base64 RSA-SHA1 signature of every
 * other field, sorted by name and PHP-serialize()d as Paddle signs them. The event id is
 * the decoded alert_id, else the SHA-256 of the serialized signed fields (body_sha256 holds
 * that hash either way, never one of the raw form); the type the decoded alert_name. The contract of wi_sig_verify, called after its
 * size and secret checks. */
int wi_sig_paddle_classic(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                          struct wi_sig_event *ev, struct wi_err *err);

#endif
