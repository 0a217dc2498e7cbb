# frozen_string_literal: true

require "openssl"
require "base64"

module WebhookInbox
  # TestHelpers - builds the headers a provider would send for a body, so request specs in
  # an application (and this gem's own demo and specs) can deliver correctly signed webhooks.
  #   headers = WebhookInbox::TestHelpers.stripe_headers(body, secret: "whsec_test")
  # Not loaded by `require "webhook_inbox"`; require "webhook_inbox/test_helpers" in specs.
  module TestHelpers
    module_function

    def hmac_hex(secret, data)
      OpenSSL::HMAC.hexdigest("SHA256", secret, data)
    end

    # Stripe-Signature: t=<unix>,v1=<hex of HMAC(secret, "t.body")>
    def stripe_headers(body, secret:, timestamp: Time.now.to_i)
      { "Stripe-Signature" => "t=#{timestamp},v1=#{hmac_hex(secret, "#{timestamp}.#{body}")}",
        "Content-Type" => "application/json" }
    end

    # Didit: X-Signature (raw body), X-Timestamp. Pass v2: to also send X-Signature-V2 over a
    # canonical form you computed (the verifier computes its own; see Verifier for details).
    def didit_headers(body, secret:, timestamp: Time.now.to_i)
      { "X-Signature" => hmac_hex(secret, body), "X-Timestamp" => timestamp.to_s,
        "Content-Type" => "application/json" }
    end

    # Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature: v1,<base64>.
    def standard_webhooks_headers(body, secret:, id:, timestamp: Time.now.to_i)
      key = Base64.decode64(secret.delete_prefix("whsec_"))
      mac = Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", key, "#{id}.#{timestamp}.#{body}"))
      { "webhook-id" => id, "webhook-timestamp" => timestamp.to_s, "webhook-signature" => "v1,#{mac}",
        "Content-Type" => "application/json" }
    end

    # GitHub: X-Hub-Signature-256: sha256=<hex>, plus delivery id and event name.
    def github_headers(body, secret:, delivery:, event:)
      { "X-Hub-Signature-256" => "sha256=#{hmac_hex(secret, body)}", "X-GitHub-Delivery" => delivery,
        "X-GitHub-Event" => event, "Content-Type" => "application/json" }
    end
  end
end
