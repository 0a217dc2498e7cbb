# frozen_string_literal: true

module WebhookInbox
  # Redactor - a payload as the dashboard may show it: the value of every key matching
  # dashboard_redact_keys (a String: the whole key, case-insensitive; a Regexp: anywhere in
  # it), at any depth, becomes "[REDACTED]". Works on parsed JSON (Hash / Array / scalars),
  # and (redact_text) on text that may not parse, such as an answer cut at 1000 characters.
  class Redactor
    MASK = "[REDACTED]"
    # A key and its value in text: "key": "value", key=value, key: value (a quoted value to
    # its closing quote, or to the end of a cut text; else to a separator).
    PAIR = /("?)([A-Za-z0-9_.\-]+)\1(\s*[:=]\s*)("(?:[^"\\]|\\.)*"?|[^\s&,;"'{}\[\]]+)/
    SCHEME = /\b(Bearer|Basic|Token)(\s+)[A-Za-z0-9._~+\/=-]+/i # an Authorization-style credential

    def initialize(keys = WebhookInbox.configuration.dashboard_redact_keys)
      @strings = keys.grep(String).map(&:downcase)
      @patterns = keys.grep(Regexp)
    end

    def redact(value)
      case value
      when Hash then value.to_h { |k, v| [k, secret_key?(k.to_s) ? MASK : redact(v)] }
      when Array then value.map { |v| redact(v) }
      else value
      end
    end

    # text with the value of every secret key in it (JSON, form or "key: value" pairs) and
    # every Bearer/Basic/Token credential masked, by the same keys as redact.
    def redact_text(text)
      text.to_s.gsub(SCHEME) { "#{Regexp.last_match(1)}#{Regexp.last_match(2)}#{MASK}" }.gsub(PAIR) do
        quote, key, sep, value = Regexp.last_match.captures
        secret_key?(key) ? "#{quote}#{key}#{quote}#{sep}#{value.start_with?('"') ? "\"#{MASK}\"" : MASK}" : Regexp.last_match(0)
      end
    end

    def secret_key?(key)
      @strings.include?(key.downcase) || @patterns.any? { |p| p.match?(key) }
    end
  end
end
