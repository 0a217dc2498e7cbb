/* providers.c - the provider table: one entry per webhook sender, read by sig.c's engine.
 * Adding an HMAC provider is one entry here plus its vectors (spec/fixtures/vectors). */
#include "provider.h"

#include <string.h>
#include "sig.h"
#include "sig_didit.h"
#include "sig_jwt.h"
#include "sig_adyen.h"
#include "sig_basic.h"
#include "sig_braintree.h"
#include "sig_mailgun.h"
#include "sig_paddle.h"
#include "sig_paypal.h"

#define HMAC256(t) {{t, WI_ALG_HMAC_SHA256, WI_KEY_RAW, NULL}}
#define NONE WI_NO_SLOT
#define NO_IDS {NONE, NONE}
/* one repository's issue or pull request (push and other events: unordered) */
#define GITHUB_ORDER_KEY "repository.id,issue.number|pull_request.number"

static const struct wi_provider table[] = {
    {.name = "stripe", .title = "Stripe", .headers = {"stripe-signature"}, .layout = WI_LAYOUT_KV,
     .kv_sep = ',', .kv_ts = "t", .enc = WI_SIG_HEX, .versions = HMAC256("v1"),
     .tmpl = "{timestamp}.{body}", .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE,
     .id_fields = {"id"}, .type_fields = {"type"}, .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .order_key = "data.object.id", .order_time = "created"},
    {.name = "standard_webhooks", .title = "Standard Webhooks, Svix, Clerk, Resend",
     .headers = {"webhook-id", "webhook-timestamp", "webhook-signature", "svix-id", "svix-timestamp", "svix-signature"},
     .alt_offset = 3, .sig_slot = 2, .layout = WI_LAYOUT_LIST, .enc = WI_SIG_BASE64,
     .versions = {{"v1", WI_ALG_HMAC_SHA256, WI_KEY_WHSEC, NULL}, {"v1a", WI_ALG_ED25519, WI_KEY_BASE64, "whpk_"}},
     .tmpl = "{id}.{timestamp}.{body}", .ts_slot = 1, .id_slots = {0, NONE}, .id_required = 1,
     .type_slot = NONE, .type_fields = {"type"}, .tolerance = WI_SIG_DEFAULT_TOLERANCE},
    {.name = "github", .title = "GitHub", .headers = {"x-hub-signature-256", "x-github-delivery", "x-github-event"},
     .prefix = "sha256=", .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE,
     .id_slots = {1, NONE}, .type_slot = 2, .tolerance = -1, .order_key = GITHUB_ORDER_KEY},
    {.name = "shopify", .title = "Shopify",
     .headers = {"x-shopify-hmac-sha256", "x-shopify-webhook-id", "x-shopify-event-id", "x-shopify-topic"},
     .enc = WI_SIG_BASE64, .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE, .id_slots = {1, 2},
     .type_slot = 3, .tolerance = -1},
    {.name = "slack", .title = "Slack", .headers = {"x-slack-signature", "x-slack-request-timestamp"},
     .prefix = "v0=", .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "v0:{timestamp}:{body}", .ts_slot = 1,
     .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"event_id"}, .type_fields = {"type"},
     .tolerance = WI_SIG_DEFAULT_TOLERANCE, .challenge = WI_CHALLENGE_SLACK_URL},
    /* Paddle's SDK allows 5 s (WebhooksValidator.MAX_VALID_TIME_DIFFERENCE) */
    {.name = "paddle", .title = "Paddle Billing", .headers = {"paddle-signature"}, .layout = WI_LAYOUT_KV,
     .kv_sep = ';', .kv_ts = "ts", .enc = WI_SIG_HEX, .versions = HMAC256("h1"), .tmpl = "{timestamp}:{body}",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"event_id"},
     .type_fields = {"event_type"}, .tolerance = 5, .order_key = "data.id"},
    /* not X-Timestamp: no Didit signature covers it, so it is never read */
    {.name = "didit", .title = "Didit", .headers = {"x-signature", "x-signature-v2", "x-signature-simple"},
     .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE, .ts_field = "timestamp",
     .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"event_id"}, .type_fields = {"webhook_type"},
     .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .content = "`x-signature`: body; `x-signature-v2`: canonical JSON (sorted keys, integral floats as "
                "integers); `x-signature-simple` (`allow_simple: true`): `timestamp:session_id:status:webhook_type`",
     .custom = wi_sig_didit, .order_key = "session_id", .order_time = "timestamp"},
    /* Discord interactions: Ed25519 over timestamp + body with the application's public key */
    {.name = "discord", .title = "Discord (interactions)", .headers = {"x-signature-ed25519", "x-signature-timestamp"},
     .enc = WI_SIG_HEX, .hex_any_case = 1, .versions = {{NULL, WI_ALG_ED25519, WI_KEY_HEX, NULL}}, .tmpl = "{timestamp}{body}",
     .ts_slot = 1, .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"id"}, .type_fields = {"type"},
     .type_numbers = 1, .tolerance = WI_SIG_DEFAULT_TOLERANCE, .challenge = WI_CHALLENGE_DISCORD_PING},
    /* SendGrid Event Webhook: ECDSA P-256 over timestamp + body; the body is a JSON array */
    {.name = "sendgrid", .title = "SendGrid (Twilio) Event Webhook",
     .headers = {"x-twilio-email-event-webhook-signature", "x-twilio-email-event-webhook-timestamp"},
     .enc = WI_SIG_BASE64, .versions = {{NULL, WI_ALG_ECDSA_P256, WI_KEY_B64_DER, NULL}},
     .tmpl = "{timestamp}{body}", .ts_slot = 1, .id_slots = NO_IDS, .type_slot = NONE,
     .tolerance = WI_SIG_DEFAULT_TOLERANCE},
    {.name = "zoom", .title = "Zoom", .headers = {"x-zm-signature", "x-zm-request-timestamp"}, .prefix = "v0=",
     .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "v0:{timestamp}:{body}", .ts_slot = 1,
     .id_slots = NO_IDS, .type_slot = NONE, .type_fields = {"event"}, .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .challenge = WI_CHALLENGE_ZOOM_URL},
    /* the time is the signed body's webhookTimestamp (ms); Linear asks for 60 s */
    {.name = "linear", .title = "Linear", .headers = {"linear-signature"}, .enc = WI_SIG_HEX, .versions = HMAC256(NULL),
     .tmpl = "{body}", .ts_slot = NONE, .ts_field = "webhookTimestamp", .ts_ms = 1, .id_slots = NO_IDS,
     .type_slot = NONE, .type_fields = {"type"}, .tolerance = 60},
    {.name = "calendly", .title = "Calendly", .headers = {"calendly-webhook-signature"}, .layout = WI_LAYOUT_KV,
     .kv_sep = ',', .kv_ts = "t", .enc = WI_SIG_HEX, .versions = HMAC256("v1"), .tmpl = "{timestamp}.{body}",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .type_fields = {"event"}, .tolerance = 180},
    {.name = "intercom", .title = "Intercom", .headers = {"x-hub-signature"}, .prefix = "sha1=", .enc = WI_SIG_HEX,
     .versions = {{NULL, WI_ALG_HMAC_SHA1, WI_KEY_RAW, NULL}}, .tmpl = "{body}", .ts_slot = NONE,
     .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"id"}, .type_fields = {"topic"}, .tolerance = -1},
    /* Verifier.new(:github, legacy_sha1: true): GitHub's older X-Hub-Signature */
    {.name = "github_sha1", .title = "GitHub, legacy SHA-1 (`:github, legacy_sha1: true`)",
     .headers = {"x-hub-signature", "x-github-delivery", "x-github-event"}, .prefix = "sha1=", .enc = WI_SIG_HEX,
     .versions = {{NULL, WI_ALG_HMAC_SHA1, WI_KEY_RAW, NULL}}, .tmpl = "{body}", .ts_slot = NONE,
     .id_slots = {1, NONE}, .type_slot = 2, .tolerance = -1, .order_key = GITHUB_ORDER_KEY},
    {.name = "razorpay", .title = "Razorpay", .headers = {"x-razorpay-signature", "x-razorpay-event-id"},
     .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE, .id_slots = {1, NONE},
     .type_slot = NONE, .type_fields = {"event"}, .tolerance = -1},
    {.name = "lemonsqueezy", .title = "Lemon Squeezy", .headers = {"x-signature"}, .enc = WI_SIG_HEX,
     .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE,
     .type_fields = {"meta.event_name"}, .tolerance = -1},
    /* the top level is the delivery (its id changes with attempt_number); event.id is the event */
    {.name = "coinbase_commerce", .title = "Coinbase Commerce", .headers = {"x-cc-webhook-signature"},
     .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE, .id_slots = NO_IDS,
     .type_slot = NONE, .id_fields = {"event.id"}, .type_fields = {"event.type"}, .tolerance = -1},
    /* URL-signed: {url} is the public URL the provider called (Verifier public_url:, else the
     * Rack env's). Twilio signs it with the form's pairs sorted; a JSON body is signed
     * through the URL's bodySHA256 instead. Neither Twilio nor Square signs a time. Twilio signs
 * with the auth token (HMAC-SHA1), or with a SharedKey by the algorithm its
 * X-Twilio-Webhooks-Signature-Settings names (HMAC_SHA1 or HMAC_SHA256): either is a secret. */
    {.name = "twilio", .title = "Twilio", .headers = {"x-twilio-signature", "x-twilio-webhooks-signature-settings"},
     .alg_slot = 1, .enc = WI_SIG_BASE64,
     .versions = {{"HMAC_SHA1", WI_ALG_HMAC_SHA1, WI_KEY_RAW, NULL}, {"HMAC_SHA256", WI_ALG_HMAC_SHA256, WI_KEY_RAW, NULL}},
     .tmpl = "{url}{params}", .url_hash_param = "bodySHA256",
     .url_ports = 1, .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .tolerance = -1,
     .content = "URL + form pairs sorted by name, each name+value (`{url}{params}`; the URL with or without its "
                "default port); JSON: URL whose `bodySHA256` is the body's SHA-256"},
    {.name = "square", .title = "Square", .headers = {"x-square-hmacsha256-signature"}, .enc = WI_SIG_BASE64,
     .versions = HMAC256(NULL), .tmpl = "{url}{body}", .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE,
     .id_fields = {"event_id"}, .type_fields = {"type"}, .tolerance = -1, .order_key = "data.id"},
    /* HubSpot v3: the URI with a few %XX escapes decoded, the timestamp in milliseconds */
    {.name = "hubspot", .title = "HubSpot (v3)", .headers = {"x-hubspot-signature-v3", "x-hubspot-request-timestamp"},
     .enc = WI_SIG_BASE64, .versions = HMAC256(NULL), .tmpl = "{method}{url}{body}{timestamp}",
     .url_unescape = ":/?@!$'()*,;", .ts_slot = 1, .ts_ms = 1, .id_slots = NO_IDS, .type_slot = NONE,
     .tolerance = WI_SIG_DEFAULT_TOLERANCE},
    /* next-gen webhooks; classic ones are unsigned (the body is only an id: fetch it) */
    {.name = "mollie", .title = "Mollie (next-gen webhooks)", .headers = {"x-mollie-signature"}, .prefix = "sha256=",
     .prefix_optional = 1, .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE,
     .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"id"}, .type_fields = {"type"}, .tolerance = -1},
    /* DocuSign Connect: one header per active Connect key (-1, -2, ...); the first 10 are read */
    {.name = "docusign", .title = "DocuSign Connect",
     .headers = {"x-docusign-signature-1", "x-docusign-signature-2", "x-docusign-signature-3", "x-docusign-signature-4",
                 "x-docusign-signature-5", "x-docusign-signature-6", "x-docusign-signature-7", "x-docusign-signature-8",
                 "x-docusign-signature-9", "x-docusign-signature-10"},
     .sig_count = 10, .enc = WI_SIG_BASE64, .versions = HMAC256(NULL), .tmpl = "{body}", .ts_slot = NONE,
     .id_slots = NO_IDS, .type_slot = NONE, .type_fields = {"event"}, .tolerance = -1},
    /* the signature is inside the body and signs timestamp + token, not event-data */
    {.name = "mailgun", .title = "Mailgun", .enc = WI_SIG_HEX, .versions = HMAC256(NULL), .tmpl = "{body}",
     .sig_field = "signature.signature", .ts_slot = NONE, .ts_field = "signature.timestamp", .id_slots = NO_IDS, .type_slot = NONE,
     .id_fields = {"signature.token"}, .id_required = 1, .type_fields = {"event-data.event"},
     .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .content = "body `signature.timestamp` + `signature.token`; **`event-data` is not signed**",
     .custom = wi_sig_mailgun},
    /* no signature at all: the endpoint's HTTP Basic credentials (authentication, not integrity) */
    {.name = "postmark", .title = "Postmark", .headers = {"authorization"},
     .enc = WI_SIG_BASE64, .versions = {{NULL, WI_ALG_HTTP_BASIC, WI_KEY_CREDENTIALS, NULL}}, .tmpl = "{body}",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .type_fields = {"RecordType"}, .tolerance = -1,
     .content = "**nothing**: `Authorization: Basic` credentials are checked, the body is not signed",
     .custom = wi_sig_basic},
    /* JWT-signed (sig_jwt.c): the token signs a claim with the body's SHA-256 and its iat */
    {.name = "vonage", .title = "Vonage (signed webhooks)", .headers = {"authorization"}, .prefix = "Bearer ",
     .enc = WI_SIG_BASE64, .versions = HMAC256(NULL), .tmpl = "{body}", .jwt_claim = "payload_hash",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"message_uuid", "uuid"},
     .type_fields = {"status", "message_type"}, .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .content = "JWT claims: `payload_hash` = hex SHA-256 of the body, `iat`", .custom = wi_sig_jwt},
    {.name = "plaid", .title = "Plaid", .headers = {"plaid-verification"}, .enc = WI_SIG_BASE64,
     .versions = {{NULL, WI_ALG_ECDSA_P256, WI_KEY_JWK, NULL}}, .tmpl = "{body}", .jwt_claim = "request_body_sha256",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .type_fields = {"webhook_type"},
     .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .content = "JWT claims: `request_body_sha256` = hex SHA-256 of the body, `iat`", .custom = wi_sig_jwt},
    /* Paddle Classic: a form whose p_signature signs the other fields (RSA, Paddle's public key) */
    {.name = "paddle_classic", .title = "Paddle Classic", .enc = WI_SIG_BASE64,
     .versions = {{NULL, WI_ALG_RSA_SHA1, WI_KEY_PEM, NULL}}, .tmpl = "{body}", .sig_field = "p_signature",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"alert_id"}, .type_fields = {"alert_name"},
     .tolerance = -1,
     .content = "the other form fields sorted by name, PHP-`serialize()`d (`a:N:{s:len:\"name\";s:len:\"value\";…}`)",
     .identity = "the decoded `alert_id`, else SHA-256 of the serialized signed fields / the decoded `alert_name`",
     .custom = wi_sig_paddle_classic},
    /* Braintree: a form; bt_signature's public_key|HMAC-SHA1 pairs sign bt_payload (base64 XML).
     * The XML's timestamp is not checked: Braintree retries a failed delivery for hours. */
    {.name = "braintree", .title = "Braintree", .enc = WI_SIG_HEX,
     .versions = {{NULL, WI_ALG_HMAC_SHA1, WI_KEY_PAIR, NULL}}, .tmpl = "{body}", .sig_field = "bt_signature",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .tolerance = -1,
     .content = "form `bt_payload` as sent (base64 of a `<notification>` XML, or with a newline added), by each `public_key\\|hex` pair of "
                "`bt_signature` (`&`-separated) under its own key",
     .identity = "SHA-256 of the signed `bt_payload` (form-decoded, with the newline its signature covers) / its XML "
                 "`<kind>`", .challenge = WI_CHALLENGE_BRAINTREE_GET,
     .custom = wi_sig_braintree},
    /* Adyen standard webhooks: an HMAC per notification item over eight of its fields; a
     * delivery (a batch of items) is one event, stored only when every item verifies */
    {.name = "adyen", .title = "Adyen (standard webhooks)", .enc = WI_SIG_BASE64,
     .versions = {{NULL, WI_ALG_HMAC_SHA256, WI_KEY_HEX, NULL}}, .tmpl = "{body}",
     .sig_field = "notificationItems[].NotificationRequestItem.additionalData.hmacSignature", .ts_slot = NONE,
     .id_slots = NO_IDS, .type_slot = NONE, .tolerance = -1,
     .content = "each item's `pspReference:originalReference:merchantAccountCode:merchantReference:amount.value:"
                "amount.currency:eventCode:success`, every item must verify; **the rest of an item (`eventDate`, "
                "`reason`, `additionalData`...) is not signed**",
     .identity = "one item: `pspReference:eventCode:success`, several: SHA-256 of the body / the items' `eventCode` "
                 "when they share one",
     .custom = wi_sig_adyen},
    /* PayPal: RSA-SHA256 by the X.509 certificate PAYPAL-CERT-URL names (configured, or
     * fetched by the gem: PaypalCertificates) over "transmission_id|transmission_time|webhook_id|crc32(body)" */
    {.name = "paypal", .title = "PayPal",
     .headers = {"paypal-transmission-id", "paypal-transmission-time", "paypal-transmission-sig", "paypal-cert-url",
                 "paypal-auth-algo"},
     .sig_slot = 2, .enc = WI_SIG_BASE64, .versions = {{NULL, WI_ALG_RSA_SHA256, WI_KEY_CERT, NULL}}, .tmpl = "{body}",
     .ts_slot = 1, .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"id"}, .type_fields = {"event_type"},
     .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .content = "`transmission_id\\|transmission_time\\|webhook_id\\|crc32(body)` (decimal), by the "
                "certificate `paypal-cert-url` names, configured or (`fetch_certificates:`) fetched from that URL once, "
                "chain and subject checked (`api.paypal.com`, `api.sandbox.paypal.com`, `api-m.*` only; "
                "`paypal-auth-algo` `SHA256withRSA` or absent); **the body is bound by its CRC-32 only** (see PayPal below)",
     .custom = wi_sig_paypal},
    /* generic: the headers, prefix, encoding, algorithm and template come from wi_sig_config */
    {.name = "hmac", .title = "anything else", .enc = WI_SIG_HEX, .hex_any_case = 1, .versions = HMAC256(NULL), .tmpl = "{body}",
     .ts_slot = NONE, .id_slots = NO_IDS, .type_slot = NONE, .id_fields = {"event_id", "id"},
     .type_fields = {"type", "event_type"}, .tolerance = WI_SIG_DEFAULT_TOLERANCE,
     .content = "`template:` e.g. `\"{timestamp}.{body}\"`"},
};

size_t wi_provider_count(void)
{
    return sizeof table / sizeof *table;
}

const struct wi_provider *wi_provider_at(size_t i)
{
    return i < wi_provider_count() ? &table[i] : NULL;
}

const struct wi_provider *wi_provider_find(const char *name)
{
    for (size_t i = 0; name && i < wi_provider_count(); i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    return NULL;
}

int wi_provider_id_signed(const struct wi_provider *p)
{
    if (p->id_slots[0] == WI_NO_SLOT) return 1;
    return p->tmpl && strstr(p->tmpl, "{id}") != NULL;
}
