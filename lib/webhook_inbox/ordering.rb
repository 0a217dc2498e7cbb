# frozen_string_literal: true

module WebhookInbox
  # Ordering - which object an endpoint's events are about, so the sidecar runs the events
  # of one object one at a time and in the provider's order (db/014_ordering.sql). A spec
  # names body paths: "data.object.id"; parts joined by "," make one key of several values
  # ("repository.id,issue.number"); "|" gives alternatives, the first present wins
  # ("issue.number|pull_request.number"). PostgreSQL reads them from the stored (signed)
  # payload in the receipt's INSERT; an event whose body lacks a path is unordered.
  #
  #   Ordering.new(:stripe)                                  # the provider entry's key
  #   Ordering.new(:stripe, false)                           # no ordering
  #   Ordering.new(:stripe, "data.object.customer")          # every type
  #   Ordering.new(:stripe, "invoice.paid" => "data.object.subscription", "charge.refunded" => false)
  #
  # A Hash names exact event types; the others keep the provider's key. The event time is
  # always the provider entry's (a number of seconds or milliseconds; else receipt order).
  class Ordering
    PATH = /\A[A-Za-z0-9_$@-]+(?:\.[A-Za-z0-9_$@-]+)*\z/
    SPEC = /\A(?<path>[A-Za-z0-9_$@-]+(?:\.[A-Za-z0-9_$@-]+)*)(?:\|\g<path>)*(?:,\g<path>(?:\|\g<path>)*)*\z/
    MAX_SPEC_BYTES = 500

    # provider: a provider name (Verifier::PROVIDERS); option: nil (the provider's key),
    # false, a spec String, or a Hash of event type => spec String or false. Raises
    # ConfigurationError for anything else or a malformed spec.
    def initialize(provider, option = nil)
      entry = Verifier::PROVIDERS[Verifier::ALIASES.fetch(provider.to_sym, provider.to_sym)] || {}
      @time = entry[:order_time]
      provided = entry[:order_key]
      @types = {}
      case option
      when nil then @default = pair(provided)
      when false then @default = nil
      when String then @default = pair(self.class.check(option))
      when Hash
        @default = pair(provided)
        option.each { |type, spec| @types[type.to_s.dup.freeze] = spec == false ? nil : pair(self.class.check(spec)) }
      else
        raise ConfigurationError, "ordering: must be nil, false, a path String or a Hash of event type => path or false"
      end
      @types.freeze
      freeze
    end

    # The spec String, or raises ConfigurationError naming what is wrong (never a value).
    def self.check(spec)
      unless spec.is_a?(String) && spec.bytesize <= MAX_SPEC_BYTES && SPEC.match?(spec)
        raise ConfigurationError, "ordering: a key is body paths like \"data.object.id\", joined by \",\" " \
                                  "(parts) or \"|\" (alternatives), at most #{MAX_SPEC_BYTES} bytes"
      end
      spec.frozen? ? spec : spec.dup.freeze
    end

    # Inbox#insert's ordering: for an event type: [spec, time path or nil], or nil (unordered).
    def for(event_type)
      @types.fetch(event_type.to_s) { @default }
    end

    private

    def pair(spec)
      spec && [spec, @time].freeze
    end
  end
end
