# frozen_string_literal: true

require "json"
require "openssl"
require "base64"

module WebhookInbox
  module Testing
    module Signing
      # PayPal's signing side: the certificate's RSA key and the ids its secret names.
      PaypalKey = Struct.new(:rsa, :webhook_id, :cert_id) do
        def inspect = "#<#{self.class.name} #{cert_id}>"
      end

      # Keys - fresh credentials for one test, by the form of key the provider's entry takes
      # (Verifier::PROVIDERS): an HMAC secret, or a private key with the public form the
      # Verifier is configured with (hex, whpk_ base64, base64 DER, JWK, PEM, certificate).
      module Keys
        # The :hmac scheme's configuration when none is given (the options the signer and Verifier share).
        HMAC_DEFAULTS = { signature_header: "X-Signature", timestamp_header: "X-Timestamp", template: "{timestamp}.{body}" }.freeze

        module_function

        # asymmetric: true picks the asymmetric version where there is one (Standard Webhooks
        # v1a, Ed25519). options: the Verifier's (for :hmac, its header names and template).
        def for(provider, asymmetric: false, **options)
          entry = Verifier::PROVIDERS.fetch(provider) { raise ArgumentError, "unknown provider #{provider.inspect}" }
          version = entry[:versions].find { |v| v[:algorithm].to_s.start_with?("hmac") != asymmetric } || entry[:versions].first
          options = HMAC_DEFAULTS.merge(options) if provider == :hmac
          signing, secret = pair(entry, version)
          Credentials.new(provider: provider, signing_key: signing, secrets: [secret], options: options)
        end

        def pair(entry, version)
          case [version[:algorithm], version[:key]]
          in [:ed25519, :hex | :base64] then ed25519(version)
          in [:ecdsa_p256, :base64_der] then ec { |k| Base64.strict_encode64(k.public_to_der) }
          in [:ecdsa_p256, :jwk] then ec { |k| jwk(k) }
          in [:rsa_sha1, :pem] then rsa { |k| k.public_to_pem.strip }
          in [:rsa_sha256, :cert] then paypal
          in [_, :whsec] then same("whsec_#{Base64.strict_encode64(OpenSSL::Random.random_bytes(24))}")
          in [_, :hex] then same(OpenSSL::Random.random_bytes(32).unpack1("H*").upcase)
          in [_, :pair] then same("pub_#{hex(8)}:priv_#{hex(16)}")
          in [_, :credentials] then same("hooks:#{hex(16)}")
          in [_, :raw] then same("test_#{entry[:name]}_#{hex(16)}")
          end
        end

        def hex(n) = OpenSSL::Random.random_bytes(n).unpack1("H*")

        def same(secret) = [secret, secret]

        def ed25519(version)
          key = OpenSSL::PKey.generate_key("ED25519")
          raw = key.public_to_der[-32, 32]
          [key, version[:key] == :hex ? raw.unpack1("H*") : "#{version[:key_prefix]}#{Base64.strict_encode64(raw)}"]
        end

        def ec
          key = OpenSSL::PKey::EC.generate("prime256v1")
          [key, yield(key)]
        end

        def rsa
          key = OpenSSL::PKey::RSA.new(2048)
          [key, yield(key)]
        end

        # Plaid's webhook verification key as its API returns it, under the key's kid.
        def jwk(key)
          point = key.public_key.to_octet_string(:uncompressed)
          b64 = ->(s) { Base64.urlsafe_encode64(s, padding: false) }
          JSON.generate(alg: "ES256", crv: "P-256", kid: Signing.plaid_kid(key), kty: "EC", use: "sig",
                        x: b64.call(point[1, 32]), y: b64.call(point[33, 32]), created_at: Time.now.to_i, expired_at: nil)
        end

        # A fresh key with a certificate valid a day either side of now.
        def paypal
          signing = PaypalKey.new(OpenSSL::PKey::RSA.new(2048), "WH#{hex(8).upcase}", "CERT-#{hex(4)}-#{hex(4)}")
          [signing, paypal_secret(signing, not_before: Time.now - 86_400, not_after: Time.now + 86_400)]
        end

        # The PayPal secret "WEBHOOK_ID:CERT_ID:<PEM>" for a PaypalKey: a certificate of its key,
        # self-signed, valid from not_before to not_after (Times).
        def paypal_secret(signing, not_before:, not_after:)
          cert = OpenSSL::X509::Certificate.new
          cert.version = 2
          cert.serial = 1
          cert.subject = cert.issuer = OpenSSL::X509::Name.parse("/CN=messageverificationcerts.paypal.com")
          cert.public_key = signing.rsa
          cert.not_before = not_before
          cert.not_after = not_after
          cert.sign(signing.rsa, OpenSSL::Digest.new("SHA256"))
          "#{signing.webhook_id}:#{signing.cert_id}:#{cert.to_pem.strip}"
        end
      end
    end
  end
end
