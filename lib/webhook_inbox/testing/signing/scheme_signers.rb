# frozen_string_literal: true

require "json"
require "openssl"
require "base64"
require "time"
require "zlib"

module WebhookInbox
  module Testing
    module Signing
      # SchemeSigners - header schemes the provider table does not spell out: Didit's three
      # signatures, the JWT providers (Vonage, Plaid), Postmark's HTTP Basic credentials and
      # PayPal's certificate. Each returns a Delivery.
      module SchemeSigners
        module_function

        # Didit: X-Signature over the raw body (version: :raw), or X-Signature-V2 over its
        # canonical JSON (version: :v2, survives re-serialization); X-Timestamp as Didit sends
        # it (no signature covers it). The body carries its own signed timestamp field.
        def didit(body, secret:, timestamp: Time.now.to_i, version: :raw)
          header, signed = case version
                           when :raw then ["X-Signature", body]
                           when :v2 then ["X-Signature-V2", Verifier.didit_canonical_json(body)]
                           else raise ArgumentError, "didit version: :raw or :v2"
                           end
          json(:didit, body, header => OpenSSL::HMAC.hexdigest("SHA256", secret, signed), "X-Timestamp" => timestamp.to_s)
        end

        # Vonage: Authorization: Bearer <HS256 JWT with iat and payload_hash, the body's hex SHA-256>.
        def vonage(body, secret:, timestamp: Time.now.to_i)
          token = jwt({ alg: "HS256", typ: "JWT" }, { iat: timestamp.to_i, payload_hash: sha256(body) }) do |input|
            OpenSSL::HMAC.digest("SHA256", secret, input)
          end
          json(:vonage, body, "Authorization" => "Bearer #{token}")
        end

        # Plaid: Plaid-Verification: an ES256 JWT (kid: Signing.plaid_kid of the key) with iat and
        # request_body_sha256. secret: the EC P-256 private key Signing.keypair(:plaid) made.
        def plaid(body, secret:, timestamp: Time.now.to_i)
          token = jwt({ alg: "ES256", kid: Signing.plaid_kid(secret), typ: "JWT" },
                      { iat: timestamp.to_i, request_body_sha256: sha256(body) }) do |input|
            OpenSSL::ASN1.decode(secret.sign("SHA256", input)).value.map { |n| n.value.to_s(2).rjust(32, "\0") }.join
          end
          json(:plaid, body, "Plaid-Verification" => token)
        end

        # Postmark signs nothing: Authorization: Basic with the endpoint's "user:password".
        def postmark(body, secret:)
          json(:postmark, body, "Authorization" => "Basic #{Base64.strict_encode64(secret)}")
        end

        # PayPal: RSA-SHA256 over transmission id|time|webhook id|CRC-32 of the body, by the
        # certificate's key. secret: the Signing::PaypalKey Signing.keypair(:paypal) made.
        # transmission_time: the time as sent (default timestamp: in ISO 8601, UTC); cert_url:
        # default PayPal's live endpoint for the key's certificate id.
        def paypal(body, secret:, timestamp: Time.now.to_i, transmission_id: nil, transmission_time: nil, cert_url: nil)
          time = transmission_time || Time.at(timestamp.to_i).utc.iso8601
          tid = transmission_id || "tid-#{sha256("#{time}#{body}")[0, 24]}"
          sig = secret.rsa.sign("SHA256", [tid, time, secret.webhook_id, Zlib.crc32(body)].join("|"))
          json(:paypal, body, "PAYPAL-TRANSMISSION-ID" => tid, "PAYPAL-TRANSMISSION-TIME" => time,
                              "PAYPAL-TRANSMISSION-SIG" => Base64.strict_encode64(sig), "PAYPAL-AUTH-ALGO" => "SHA256withRSA",
                              "PAYPAL-CERT-URL" => cert_url || "https://api.paypal.com/v1/notifications/certs/#{secret.cert_id}")
        end

        def jwt(header, claims)
          input = [header, claims].map { |part| Base64.urlsafe_encode64(JSON.generate(part), padding: false) }.join(".")
          "#{input}.#{Base64.urlsafe_encode64(yield(input), padding: false)}"
        end

        def sha256(s) = OpenSSL::Digest::SHA256.hexdigest(s)

        def json(provider, body, headers)
          Delivery.new(provider: provider, body: body, headers: headers.merge("Content-Type" => "application/json"),
                       url: "https://example.com/webhooks/#{provider}", method: "POST")
        end
      end
    end
  end
end
