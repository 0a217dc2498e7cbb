# frozen_string_literal: true

require "uri"

module WebhookInbox
  module Testing
    module Signing
      # One signed request as the provider sends it: body (the kit's own for providers that sign
      # inside it: Mailgun, Paddle Classic, Braintree, Adyen), headers, and the URL and method
      # it was sent to (signed by Twilio, Square and HubSpot).
      Delivery = Struct.new(:provider, :body, :headers, :url, :method, keyword_init: true) do
        # A Rack env for the request (headers as HTTP_*, the URL's host as written, path and query), for
        # Verifier#verify, Receiver#receive or a Rack app.
        def rack_env
          uri = URI(url)
          env = { "REQUEST_METHOD" => method, "rack.url_scheme" => uri.scheme, "HTTP_HOST" => url[%r{\A[a-z]+://([^/?#]*)}i, 1],
                  "SCRIPT_NAME" => "", "PATH_INFO" => uri.path, "QUERY_STRING" => uri.query.to_s,
                  "CONTENT_LENGTH" => body.bytesize.to_s }
          headers.each do |k, v|
            key = k.upcase.tr("-", "_")
            env[key == "CONTENT_TYPE" ? key : "HTTP_#{key}"] = v
          end
          env
        end

        def to_a = [body, headers]
      end

      # What a test needs to sign and verify for one provider: signing_key is what the signer
      # takes as secret: (an HMAC secret String, or a private key the kit generated), secrets
      # and options what Verifier.new (or a Receiver, or the app's config) takes.
      #   creds = WebhookInbox::Testing::Signing.keypair(:sendgrid)
      #   delivery = creds.delivery(body)
      #   creds.verifier.verify(delivery.body, delivery.headers)
      Credentials = Struct.new(:provider, :signing_key, :secrets, :options, keyword_init: true) do
        def verifier(**extra) = Verifier.new(provider, secrets: secrets, **options, **extra)

        def delivery(body, **signer_options)
          Signing.delivery(provider, body, secret: signing_key, **options, **signer_options)
        end

        def headers(body, **signer_options) = delivery(body, **signer_options).headers

        def inspect = "#<#{self.class.name} #{provider} secrets=#{secrets.size}>" # never the keys
        alias_method :to_s, :inspect
      end
    end
  end
end
