# frozen_string_literal: true

require "json"

module WebhookInbox
  # RequestHeaders - a delivery's HTTP headers as the inbox keeps them (the request_headers
  # column), so an operator can see which delivery, which retry and which signature arrived.
  #
  #   RequestHeaders.from_env(env)  # (native) a Rack env -> '{"stripe-signature": "...", ...}' or nil
  #   RequestHeaders.encode(hash)  # {"name" => "value"} given by a caller -> the same text, or nil
  #   RequestHeaders.credential?(name, value = nil)  # (native) true: never kept, masked when shown
  #
  # from_env keeps HTTP_* entries and Content-Type/Content-Length under lower-case names,
  # never a credential (a name holding auth, key, token, secret, pass, jwt, assertion,
  # cookie, session or credential; a value "Bearer ...", "Basic ..." or a JWT), at most
  # MAX_HEADERS headers, each value cut to MAX_VALUE_BYTES; bytes that are not UTF-8 become
  # U+FFFD and NUL is dropped, so jsonb always takes the result. The signature headers are
  # kept. It is in C (ext/webhook_inbox/headers.c, which says why words and not an
  # allow-list): every receipt pays for it.
  module RequestHeaders
    module_function

    # headers - from_env's text, a Hash of Strings, or nil - as a JSON object's text that
    # jsonb accepts, or nil (none, or not storable: headers are never a reason to refuse an
    # event). A Hash loses its credentials as from_env's env does. A String is checked only
    # when check: (the native store checks it in C).
    def encode(headers, check: false)
      return nil if headers.nil? || headers.empty?
      return (!check || storable?(headers) ? headers : nil) if headers.is_a?(String)

      headers = headers.reject { |k, v| credential?(k.to_s, v.is_a?(String) ? v : nil) }
      return nil if headers.empty?

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
