# frozen_string_literal: true

require "openssl"
require "base64"

module WebhookInbox
  module Testing
    # Signing - the headers a provider would send for a body, so request specs (and this gem's
    # own demo and specs) deliver correctly signed webhooks:
    #   headers = WebhookInbox::Testing::Signing.stripe_headers(body, secret: "whsec_test")
    #   headers = WebhookInbox::Testing::Signing.headers(:shopify, body, secret: "...", id: "wh_1", topic: "orders/paid")
    module Signing
      module_function

      # Dispatch by provider name (the names Verifier takes): :stripe, :didit,
      # :standard_webhooks, :github, :shopify, :slack, :paddle, :hmac.
      def headers(provider, body, secret:, **options)
        public_send("#{provider}_headers", body, secret: secret, **options)
      rescue NoMethodError => e
        raise ArgumentError, "no signer for provider #{provider.inspect}" if e.name.to_s == "#{provider}_headers"

        raise
      end

      def hmac_hex(secret, data, digest = "SHA256")
        OpenSSL::HMAC.hexdigest(digest, secret, data)
      end

      def hmac_base64(secret, data, digest = "SHA256")
        Base64.strict_encode64(OpenSSL::HMAC.digest(digest, secret, data))
      end

      # Stripe-Signature: t=<unix>,v1=<hex of HMAC(secret, "t.body")>
      def stripe_headers(body, secret:, timestamp: Time.now.to_i)
        { "Stripe-Signature" => "t=#{timestamp},v1=#{hmac_hex(secret, "#{timestamp}.#{body}")}",
          "Content-Type" => "application/json" }
      end

      # Didit: X-Signature (raw body), X-Timestamp. The verifier checks the body's own
      # timestamp field, which the body must carry: X-Timestamp is sent as Didit sends it,
      # and never read (no Didit signature covers it).
      def didit_headers(body, secret:, timestamp: Time.now.to_i)
        { "X-Signature" => hmac_hex(secret, body), "X-Timestamp" => timestamp.to_s,
          "Content-Type" => "application/json" }
      end

      # Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature: v1,<base64>.
      def standard_webhooks_headers(body, secret:, id:, timestamp: Time.now.to_i)
        key = Base64.decode64(secret.delete_prefix("whsec_"))
        { "webhook-id" => id, "webhook-timestamp" => timestamp.to_s,
          "webhook-signature" => "v1,#{hmac_base64(key, "#{id}.#{timestamp}.#{body}")}",
          "Content-Type" => "application/json" }
      end

      # GitHub: X-Hub-Signature-256: sha256=<hex>, plus delivery id and event name.
      def github_headers(body, secret:, delivery:, event:)
        { "X-Hub-Signature-256" => "sha256=#{hmac_hex(secret, body)}", "X-GitHub-Delivery" => delivery,
          "X-GitHub-Event" => event, "Content-Type" => "application/json" }
      end

      # Shopify: X-Shopify-Hmac-Sha256 (base64 of the body's HMAC), webhook id and topic.
      def shopify_headers(body, secret:, id:, topic:)
        { "X-Shopify-Hmac-Sha256" => hmac_base64(secret, body), "X-Shopify-Webhook-Id" => id,
          "X-Shopify-Topic" => topic, "Content-Type" => "application/json" }
      end

      # Slack: X-Slack-Signature: v0=<hex of HMAC("v0:ts:body")>, X-Slack-Request-Timestamp.
      # content_type: "application/x-www-form-urlencoded" for slash commands.
      def slack_headers(body, secret:, timestamp: Time.now.to_i, content_type: "application/json")
        { "X-Slack-Signature" => "v0=#{hmac_hex(secret, "v0:#{timestamp}:#{body}")}",
          "X-Slack-Request-Timestamp" => timestamp.to_s, "Content-Type" => content_type }
      end

      # Paddle Billing: Paddle-Signature: ts=<unix>;h1=<hex of HMAC("ts:body")>.
      def paddle_headers(body, secret:, timestamp: Time.now.to_i)
        { "Paddle-Signature" => "ts=#{timestamp};h1=#{hmac_hex(secret, "#{timestamp}:#{body}")}",
          "Content-Type" => "application/json" }
      end

      # The generic :hmac scheme, configured like the Verifier: the template's {body},
      # {timestamp} and {id} are filled in; the header names are the ones the endpoint reads.
      def hmac_headers(body, secret:, signature_header:, template: "{body}", algorithm: :sha256, encoding: :hex,
                       prefix: nil, timestamp_header: nil, timestamp: Time.now.to_i, id_header: nil, id: nil)
        signed = template.gsub(/\{(body|timestamp|id)\}/) { { "body" => body, "timestamp" => timestamp.to_s, "id" => id.to_s }[$1] }
        digest = algorithm.to_s.upcase
        mac = encoding.to_sym == :base64 ? hmac_base64(secret, signed, digest) : hmac_hex(secret, signed, digest)
        h = { signature_header => "#{prefix}#{mac}", "Content-Type" => "application/json" }
        h[timestamp_header] = timestamp.to_s if timestamp_header
        h[id_header] = id.to_s if id_header
        h
      end
    end
  end

  # The name earlier versions documented.
  TestHelpers = Testing::Signing
end
