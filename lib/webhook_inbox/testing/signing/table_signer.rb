# frozen_string_literal: true

require "openssl"
require "base64"
require "uri"

module WebhookInbox
  module Testing
    module Signing
      # TableSigner - signs for every provider whose entry in the provider table
      # (Verifier::PROVIDERS, ext/webhook_inbox/providers.c) says all of its scheme: the
      # template's {timestamp}, {id}, {body}, {url}, {method} and {params} filled in, the
      # version's algorithm (HMAC, Ed25519, ECDSA P-256) under the key, the signature encoded
      # and laid out in the entry's header (one, "t=..,v1=.." or "v1,.."), with its timestamp,
      # id and type headers. A provider added to the table as data is signed without new code.
      module TableSigner
        DEFAULT_URL = "https://example.com/webhooks/%s"
        FORM = "application/x-www-form-urlencoded"

        module_function

        # secret: the HMAC secret (as configured for the Verifier) or a private key (Ed25519,
        # EC P-256) for the entry's asymmetric version. id:/type: fill the id and type headers
        # (delivery:, event:, topic: are their names for GitHub and Shopify); url:/method:
        # what a URL-signed provider was called with. Returns a Delivery.
        def sign(provider, body, secret:, timestamp: Time.now.to_i, id: nil, type: nil, url: nil, method: "POST",
                 content_type: nil, delivery: nil, event: nil, topic: nil)
          entry = Verifier::PROVIDERS.fetch(provider)
          version = pick_version(entry, secret)
          ts = entry[:ts_ms] ? timestamp.to_i * 1000 : timestamp.to_i
          id ||= delivery || "msg_#{OpenSSL::Digest::SHA256.hexdigest(body)[0, 24]}"
          url = signed_url(entry, body, url || format(DEFAULT_URL, provider))
          fields = { "timestamp" => ts.to_s, "id" => id.to_s, "body" => body, "url" => url, "method" => method,
                     "params" => (params(body) if entry[:template].include?("{params}") && !url.include?("#{entry[:url_hash_param]}=")) }
          signature = encode(entry, mac(version, secret, entry[:template].gsub(/\{(\w+)\}/) { fields.fetch($1).to_s }))
          headers = header_values(entry, version, signature, ts, id, type || event || topic)
          headers["Content-Type"] = content_type || (body.start_with?("{", "[") || !entry[:template].include?("{params}") ? "application/json" : FORM)
          Delivery.new(provider: provider, body: body, headers: headers, url: url, method: method)
        end

        # An asymmetric key picks the entry's asymmetric version (Standard Webhooks v1a), a String the HMAC one.
        def pick_version(entry, secret)
          asym = secret.is_a?(OpenSSL::PKey::PKey)
          entry[:versions].find { |v| v[:algorithm].to_s.start_with?("hmac") != asym } or
            raise ArgumentError, "#{entry[:name]} signs with #{entry[:versions].map { |v| v[:algorithm] }.join(" or ")}: " \
                                 "give #{asym ? "its secret String" : "the private key Signing.keypair generates"}"
        end

        def mac(version, secret, data)
          case version[:algorithm]
          when :ed25519 then secret.sign(nil, data)
          when :ecdsa_p256 then secret.sign("SHA256", data)
          else OpenSSL::HMAC.digest(version[:algorithm].to_s.delete_prefix("hmac_").upcase, hmac_key(version, secret), data)
          end
        end

        def hmac_key(version, secret)
          case version[:key]
          when :whsec then Base64.decode64(secret.delete_prefix("whsec_"))
          when :hex then [secret].pack("H*")
          else secret
          end
        end

        def encode(entry, raw) = entry[:encoding] == :base64 ? Base64.strict_encode64(raw) : raw.unpack1("H*")

        # Header names as providers spell them ("X-GitHub-Delivery"); the table keeps them lowercase.
        SPELLINGS = { "github" => "GitHub", "hubspot" => "HubSpot", "docusign" => "DocuSign", "cc" => "CC", "zm" => "ZM" }.freeze

        def spelled(name) = name&.split("-")&.map { |w| SPELLINGS.fetch(w) { w.capitalize } }&.join("-")

        def header_values(entry, version, signature, ts, id, type)
          names = entry[:headers].map { |n| spelled(n) }
          raise ArgumentError, "#{entry[:name]} has no signature header: it needs its own signer" unless names[entry[:sig_slot]]

          h = { names[entry[:sig_slot]] => case entry[:layout]
                                            when :kv then "#{entry[:kv_ts]}=#{ts}#{entry[:kv_sep]}#{version[:tag]}=#{signature}"
                                            when :list then "#{version[:tag]},#{signature}"
                                            else "#{entry[:prefix]}#{signature}"
                                            end }
          h[names[entry[:ts_slot]]] = ts.to_s if entry[:ts_slot]
          h[names[entry[:id_slots][0]]] = id.to_s if entry[:id_slots][0]
          h[names[entry[:type_slot]]] = type.to_s if entry[:type_slot] && type
          h
        end

        # Twilio signs a JSON body through the URL's bodySHA256: added here when the body is not a form.
        def signed_url(entry, body, url)
          param = entry[:url_hash_param]
          return url unless param && body.start_with?("{", "[") && !url.include?("#{param}=")

          "#{url}#{url.include?("?") ? "&" : "?"}#{param}=#{OpenSSL::Digest::SHA256.hexdigest(body)}"
        end

        # Twilio's {params}: the form's pairs decoded, sorted by name (then value), name + value.
        def params(body) = URI.decode_www_form(body).sort.map(&:join).join
      end
    end
  end
end
