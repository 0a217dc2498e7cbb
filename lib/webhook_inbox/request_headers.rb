# frozen_string_literal: true

require "json"

module WebhookInbox
  # RequestHeaders - a delivery's HTTP headers as the inbox keeps them (the request_headers
  # column): {"lower-case-name" => "value"} from a Rack env, so an operator can see which
  # delivery, which retry and which signature arrived. Credentials are left out: any name
  # with authorization, cookie, token, secret, passw, api-key or session in it. Bounded: at
  # most MAX_HEADERS headers, each value cut to MAX_VALUE_BYTES; bytes that are not UTF-8
  # become U+FFFD and NUL is dropped (jsonb takes neither).
  module RequestHeaders
    MAX_HEADERS = 64
    MAX_VALUE_BYTES = 1024
    LEFT_OUT = /authorization|cookie|token|secret|passw|api.?key|session/i
    # Rack keys that are headers without the HTTP_ prefix.
    PLAIN = { "CONTENT_TYPE" => "content-type", "CONTENT_LENGTH" => "content-length" }.freeze

    module_function

    # Rack key -> kept header name, or false (not a header, or a credential). Every request
    # carries the same few keys: the cache spares their string work (on the receive path).
    # Bounded, as senders choose header names; MRI's GVL makes each Hash access atomic.
    NAMES = {} # rubocop:disable Style/MutableConstant
    NAMES_MAX = 1024

    # The kept headers of env (a Rack env), in the order Rack gives them.
    def from_env(env)
      kept = {}
      env.each_pair do |key, value|
        name = NAMES[key]
        name = kept_name(key) if name.nil?
        next unless name && value.is_a?(String)

        kept[name] = clean(value)
        break if kept.size == MAX_HEADERS
      end
      kept
    end

    def kept_name(key)
      name = key.is_a?(String) && header_name(key)
      name = false if !name || LEFT_OUT.match?(name)
      NAMES[key.frozen? ? key : key.dup.freeze] = name if NAMES.size < NAMES_MAX
      name
    end

    # headers (a Hash of Strings) as a JSON object's text that jsonb accepts, or nil (none,
    # or not storable: headers are never a reason to refuse an event).
    def to_json(headers)
      return nil if headers.nil? || headers.empty?

      json = JSON.generate(headers)
      json.include?("\\u0000") ? nil : json
    rescue JSON::GeneratorError, EncodingError
      nil
    end

    # "HTTP_X_GITHUB_DELIVERY" -> "x-github-delivery"; nil for what is not a header
    # (HTTP_VERSION is the server's protocol version, not a header).
    def header_name(key)
      return PLAIN[key] unless key.start_with?("HTTP_")
      return nil if key == "HTTP_VERSION"

      key[5..].downcase.tr("_", "-").freeze
    end

    def clean(value)
      return value if value.bytesize <= MAX_VALUE_BYTES && value.ascii_only? && !value.include?("\0")

      v = value.byteslice(0, MAX_VALUE_BYTES).force_encoding(Encoding::UTF_8)
      v = v.scrub("\uFFFD") unless v.valid_encoding?
      v.include?("\0") ? v.delete("\0") : v
    end
  end
end
