/* sig_jwt.h - JWT-signed deliveries (struct wi_provider.custom of "vonage" and "plaid"). */
#ifndef WI_SIG_JWT_H
#define WI_SIG_JWT_H

#include "sig.h"

/* Verifies a delivery whose header (slot 0, after the entry's prefix) is a JWT signed with
 * the entry's algorithm (HS256 with the secret; ES256 with a JWK, chosen by the token's kid)
 * and whose claim p.jwt_claim is the hex SHA-256 of the body; its iat is the time. The
 * contract of wi_sig_verify, called after its size and secret checks. */
int wi_sig_jwt(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
               struct wi_sig_event *ev, struct wi_err *err);

#endif
