/* sig_paypal.h - PayPal's webhooks (struct wi_provider.custom of "paypal"): RSA-SHA256 by a
 * configured X.509 certificate over transmission id|time|webhook id|CRC32(body). */
#ifndef WI_SIG_PAYPAL_H
#define WI_SIG_PAYPAL_H

#include <stdint.h>
#include "sig.h"

struct wi_sig_key;

/* Parses a secret "WEBHOOK_ID:CERT_ID:<PEM certificate>" into k: kid gets the certificate's
 * id (the last segment of PAYPAL-CERT-URL), account the webhook id, pk the certificate's RSA
 * key (of the first certificate: a chain's others are not read) and its validity period. A
 * bare "WEBHOOK_ID" fills account only (pk NULL: it names no certificate, so a delivery is
 * WI_SIG_E_UNKNOWN_KEY until one is added). Returns 0, or -1 and fills *err (WI_ERR_ARG; the
 * message never quotes the secret). Borrows s. */
int wi_sig_paypal_key(const char *s, size_t n, struct wi_sig_key *k, struct wi_err *err);

/* The certificate id at the end of url, one of PayPal's certificate endpoints
 * (https://api.paypal.com/v1/notifications/certs/<id>, api-m., api.sandbox., api-m.sandbox.;
 * no port, userinfo, query or dot segments) into *id (a slice of url). Returns 0, or -1
 * (WI_SIG_E_MALFORMED_SIGNATURE) for any other URL: no certificate is taken or fetched from one. */
int wi_sig_paypal_cert_id(struct wi_slice url, struct wi_slice *id, struct wi_err *err);

/* The CRC-32 (ISO-HDLC, zlib's) of p[0..n). */
uint32_t wi_sig_paypal_crc32(const char *p, size_t n);

/* The unix time of an RFC 3339 UTC time "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00|±HH:MM)"
 * into *out. Returns 0, or -1 when s is not one. */
int wi_sig_paypal_time(struct wi_slice s, int64_t *out);

/* Verifies a delivery: PAYPAL-AUTH-ALGO, when sent, must be SHA256withRSA, PAYPAL-CERT-URL an https URL
 * of PayPal's certificate endpoint whose id names a configured certificate valid now, and
 * PAYPAL-TRANSMISSION-SIG its RSA-SHA256 signature of "id|time|webhook_id|crc32(body)" for a
 * configured webhook id; the transmission time must be within the tolerance. The event id
 * is the body's id, the type its event_type. A certificate id no secret holds is
 * WI_SIG_E_UNKNOWN_KEY (its message names the id). The contract of wi_sig_verify, called after
 * its size and secret checks. */
int wi_sig_paypal(const struct wi_sig_verifier *v, const struct wi_sig_request *req,
                  struct wi_sig_event *ev, struct wi_err *err);

#endif
