# frozen_string_literal: true

require "openssl"
require "webhook_inbox"
require "base64"
require_relative "signing/delivery"
require_relative "signing/table_signer"
require_relative "signing/body_signers"
require_relative "signing/scheme_signers"
require_relative "signing/keys"

module WebhookInbox
  module Testing
    # Signing - requests signed as each provider signs them, for every provider of
    # Verifier::PROVIDERS, so an app's tests (and this gem's specs) deliver webhooks the real
    # Verifier accepts:
    #   headers = WebhookInbox::Testing::Signing.headers(:stripe, body, secret: "whsec_test")
    #   delivery = WebhookInbox::Testing::Signing.delivery(:adyen, body, secret: hex_key)  # body signed inside
    #   creds = WebhookInbox::Testing::Signing.keypair(:sendgrid)  # a key made for the test
    #   Verifier.new(:sendgrid, secrets: creds.secrets); creds.delivery(body).headers
    # Table providers are signed from their entry (TableSigner); the others by BodySigners
    # (the signature inside the body) and SchemeSigners (Didit, JWT, Basic, PayPal).
    module Signing
      SIGNERS = {
        didit: SchemeSigners.method(:didit), vonage: SchemeSigners.method(:vonage), plaid: SchemeSigners.method(:plaid),
        postmark: SchemeSigners.method(:postmark), paypal: SchemeSigners.method(:paypal),
        mailgun: BodySigners.method(:mailgun), paddle_classic: BodySigners.method(:paddle_classic),
        braintree: BodySigners.method(:braintree), adyen: BodySigners.method(:adyen)
      }.freeze

      module_function

      # The signed request for body (a Delivery: body, headers, url, method). secret: the
      # provider's secret as the Verifier is configured with it, or the private key
      # keypair made; options: the signer's (timestamp:, id:, type:, url:, ...).
      # ArgumentError for a provider without a signer.
      def delivery(provider, body, secret:, **options)
        provider = Verifier::ALIASES.fetch(provider, provider)
        return hmac_delivery(body, secret: secret, **options) if provider == :hmac
        return SIGNERS[provider].call(body, secret: secret, **options) if SIGNERS.key?(provider)

        entry = Verifier::PROVIDERS[provider]
        raise ArgumentError, "no signer for provider #{provider.inspect}" if entry.nil? || entry[:custom]

        TableSigner.sign(provider, body, secret: secret, **options)
      end

      # The headers of delivery(...), for providers that sign outside the body; one that signs
      # inside it (Mailgun, Paddle Classic, Braintree, Adyen) needs delivery's body: ArgumentError.
      def headers(provider, body, secret:, **options)
        d = delivery(provider, body, secret: secret, **options)
        raise ArgumentError, "#{provider} signs inside the body: use Signing.delivery (webhook_delivery) and send its body" if d.body != body

        d.headers
      end

      # Fresh Credentials for provider: an HMAC secret, or a key pair with the public form its
      # Verifier takes (Discord, SendGrid, Standard Webhooks v1a with asymmetric: true, Plaid,
      # Paddle Classic, PayPal). Credentials#secrets (and #options) configure Verifier.new.
      def keypair(provider, **options) = Keys.for(Verifier::ALIASES.fetch(provider, provider), **options)

      # Plaid's key id for an EC key: the kid the JWT names and the JWK carries.
      def plaid_kid(key) = "kid-#{OpenSSL::Digest::SHA256.hexdigest(key.public_to_der)[0, 16]}"

      # Every provider the kit signs for (all of Verifier::PROVIDERS).
      def providers = Verifier::PROVIDERS.keys.select { |p| p == :hmac || SIGNERS.key?(p) || !Verifier::PROVIDERS[p][:custom] }

      def hmac_hex(secret, data, digest = "SHA256")
        OpenSSL::HMAC.hexdigest(digest, secret, data)
      end

      def hmac_base64(secret, data, digest = "SHA256")
        Base64.strict_encode64(OpenSSL::HMAC.digest(digest, secret, data))
      end

      # The signers earlier versions documented, each the headers of delivery(provider, ...).
      # Stripe-Signature: t=<unix>,v1=<hex of HMAC(secret, "t.body")>
      def stripe_headers(body, secret:, timestamp: Time.now.to_i) = headers(:stripe, body, secret: secret, timestamp: timestamp)

      # Didit: X-Signature (raw body), X-Timestamp (see SchemeSigners.didit).
      def didit_headers(body, secret:, **options) = headers(:didit, body, secret: secret, **options)

      # Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature: v1,<base64>.
      def standard_webhooks_headers(body, secret:, id:, timestamp: Time.now.to_i)
        headers(:standard_webhooks, body, secret: secret, id: id, timestamp: timestamp)
      end

      # GitHub: X-Hub-Signature-256: sha256=<hex>, plus delivery id and event name.
      def github_headers(body, secret:, delivery:, event:) = headers(:github, body, secret: secret, id: delivery, type: event)

      # Shopify: X-Shopify-Hmac-Sha256 (base64 of the body's HMAC), webhook id and topic.
      def shopify_headers(body, secret:, id:, topic:) = headers(:shopify, body, secret: secret, id: id, type: topic)

      # Slack: X-Slack-Signature: v0=<hex of HMAC("v0:ts:body")>, X-Slack-Request-Timestamp.
      # content_type: "application/x-www-form-urlencoded" for slash commands.
      def slack_headers(body, secret:, timestamp: Time.now.to_i, content_type: "application/json")
        headers(:slack, body, secret: secret, timestamp: timestamp, content_type: content_type)
      end

      # Paddle Billing: Paddle-Signature: ts=<unix>;h1=<hex of HMAC("ts:body")>.
      def paddle_headers(body, secret:, timestamp: Time.now.to_i) = headers(:paddle, body, secret: secret, timestamp: timestamp)

      # The generic :hmac scheme, configured like the Verifier: the template's {body},
      # {timestamp} and {id} are filled in; the header names are the ones the endpoint reads.
      def hmac_headers(body, secret:, **options) = hmac_delivery(body, secret: secret, **options).headers

      def hmac_delivery(body, secret:, signature_header:, template: "{body}", algorithm: :sha256, encoding: :hex,
                        prefix: nil, timestamp_header: nil, timestamp: Time.now.to_i, id_header: nil, id: nil)
        signed = template.gsub(/\{(body|timestamp|id)\}/) { { "body" => body, "timestamp" => timestamp.to_s, "id" => id.to_s }[$1] }
        digest = algorithm.to_s.upcase
        mac = encoding.to_sym == :base64 ? hmac_base64(secret, signed, digest) : hmac_hex(secret, signed, digest)
        h = { signature_header => "#{prefix}#{mac}", "Content-Type" => "application/json" }
        h[timestamp_header] = timestamp.to_s if timestamp_header
        h[id_header] = id.to_s if id_header
        Delivery.new(provider: :hmac, body: body, headers: h, url: "https://example.com/webhooks/hmac", method: "POST")
      end
    end
  end

  # The name earlier versions documented.
  TestHelpers = Testing::Signing
end
