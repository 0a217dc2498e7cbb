# frozen_string_literal: true

module WebhookInbox
  # Redactor - a payload as the dashboard may show it: the value of every key matching
  # dashboard_redact_keys (a String: the whole key, case-insensitive; a Regexp: anywhere in
  # it), at any depth, becomes "[REDACTED]". Works on parsed JSON (Hash / Array / scalars).
  class Redactor
    MASK = "[REDACTED]"

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

    def secret_key?(key)
      @strings.include?(key.downcase) || @patterns.any? { |p| p.match?(key) }
    end
  end
end
