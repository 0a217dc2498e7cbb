# frozen_string_literal: true

require "json"
require "openssl"
require "base64"
require "uri"

module WebhookInbox
  module Testing
    module Signing
      # BodySigners - providers whose signature travels inside the body: each takes the content
      # to send and returns a Delivery whose body carries the signature, as the provider builds it.
      module BodySigners
        module_function

        # Mailgun: body (a JSON String or Hash) gets "signature" => {timestamp, token, signature:
        # hex HMAC-SHA256(timestamp + token)}; token: is the event id (random by default).
        def mailgun(body, secret:, timestamp: Time.now.to_i, token: OpenSSL::Random.random_bytes(25).unpack1("H*"))
          doc = body.is_a?(String) ? JSON.parse(body) : body.transform_keys(&:to_s)
          sig = OpenSSL::HMAC.hexdigest("SHA256", secret, "#{timestamp}#{token}")
          json(:mailgun, JSON.generate({ "signature" => { "token" => token, "timestamp" => timestamp.to_s, "signature" => sig } }
                                         .merge(doc.except("signature"))))
        end

        # Paddle Classic: body (a Hash of fields, or a form String) signed as Paddle signs: the fields
        # sorted by name, PHP-serialize()d, RSA-SHA1 by the private key, base64 in p_signature.
        def paddle_classic(body, secret:)
          fields = (body.is_a?(String) ? URI.decode_www_form(body) : body.map { |k, v| [k.to_s, v.to_s] }).to_h.except("p_signature")
          php = "a:#{fields.size}:{#{fields.sort.map { |k, v| %(s:#{k.bytesize}:"#{k}";s:#{v.bytesize}:"#{v}";) }.join}}"
          form(:paddle_classic, URI.encode_www_form(fields.to_a + [["p_signature", Base64.strict_encode64(secret.sign("SHA1", php))]]))
        end

        # Braintree: body (the notification's XML) as bt_payload (base64, wrapped, ending in a
        # newline, as Braintree sends it), bt_signature "public_key|hex HMAC-SHA1 under
        # SHA-1(private_key)"; secret: "public_key:private_key" as configured.
        def braintree(body, secret:)
          public_key, private_key = secret.split(":", 2)
          payload = body.start_with?("<") ? Base64.encode64(body) : body
          mac = OpenSSL::HMAC.hexdigest("SHA1", OpenSSL::Digest::SHA1.digest(private_key), payload)
          form(:braintree, URI.encode_www_form([["bt_signature", "#{public_key}|#{mac}"], ["bt_payload", payload]]))
        end

        ADYEN_FIELDS = [%w[pspReference], %w[originalReference], %w[merchantAccountCode], %w[merchantReference],
                        %w[amount value], %w[amount currency], %w[eventCode], %w[success]].freeze

        # Adyen: every notification item of body (JSON String or Hash with "notificationItems")
        # gets additionalData.hmacSignature: base64 HMAC-SHA256, under the hex key, of its eight
        # fields joined by ":".
        def adyen(body, secret:)
          doc = body.is_a?(String) ? JSON.parse(body) : JSON.parse(JSON.generate(body))
          doc.fetch("notificationItems").each do |wrapper|
            item = wrapper.fetch("NotificationRequestItem")
            signed = ADYEN_FIELDS.map { |path| item.dig(*path).to_s }.join(":")
            (item["additionalData"] ||= {})["hmacSignature"] =
              Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", [secret].pack("H*"), signed))
          end
          json(:adyen, JSON.generate(doc))
        end

        def json(provider, body) = Delivery.new(provider: provider, body: body, headers: { "Content-Type" => "application/json" },
                                                 url: "https://example.com/webhooks/#{provider}", method: "POST")

        def form(provider, body) = json(provider, body).tap { |d| d.headers["Content-Type"] = TableSigner::FORM }
      end
    end
  end
end
