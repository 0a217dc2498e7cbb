# frozen_string_literal: true

require "json"

module WebhookInbox
  # RequestHeaders - a delivery's HTTP headers as the inbox keeps them (the request_headers
  # column), so an operator can see which delivery, which retry and which signature arrived.
  #
  #   RequestHeaders.from_env(env)  # (native) a Rack env -> '{"stripe-signature": "...", ...}' or nil
  #   RequestHeaders.encode(hash)  # {"name" => "value"} given by a caller -> the same text, or nil
  #
  # from_env keeps HTTP_* entries and Content-Type/Content-Length under lower-case names,
  # never a credential (any name with authorization, cookie, token, secret, passw, session
  # or api key in it), at most MAX_HEADERS headers, each value cut to MAX_VALUE_BYTES; bytes
  # that are not UTF-8 become U+FFFD and NUL is dropped, so jsonb always takes the result.
  # It is in C (ext/webhook_inbox/headers.c): every receipt pays for it.
  module RequestHeaders
    module_function

    # headers - from_env's text, a Hash of Strings, or nil - as a JSON object's text that
    # jsonb accepts, or nil (none, or not storable: headers are never a reason to refuse an
    # event). A String is checked only when check: (the native store checks it in C).
    def encode(headers, check: false)
      return nil if headers.nil? || headers.empty?
      return (!check || storable?(headers) ? headers : nil) if headers.is_a?(String)

      json = JSON.generate(headers)
      json.include?("\\u0000") ? nil : json
    rescue JSON::GeneratorError, EncodingError
      nil
    end

    def storable?(text)
      !text.include?("\\u0000") && JSON.parse(text).is_a?(Hash)
    rescue JSON::ParserError, EncodingError
      false
    end
  end
end
