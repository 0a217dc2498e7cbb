# frozen_string_literal: true

module WebhookInbox
  # Event (a Struct defined by the native extension): what a verified delivery says about
  # itself. provider: Symbol; event_id: String (the provider's id, or the lowercase hex
  # SHA-256 of the body when it has none); event_type: String or nil; timestamp: Integer
  # unix seconds or nil; body: the raw body String as received.
  #
  # items: nil, or (Adyen, whose deliveries carry several signed notification items) the
  # delivery's distinct items, in order, each a frozen Event of its own: event_id
  # "pspReference:eventCode:success" from the item's signed fields, event_type its eventCode,
  # body the JSON document it is stored as ({"live":..,"notificationItems":[<the item>]}),
  # body_signed false. The Receiver stores each item (never the delivery). The delivery's own
  # event_id is then its one item's, or, for several, the SHA-256 of the sorted item ids.
  class Event
    # The events this delivery stores: its items (Adyen), else itself.
    def events = items || [self]

    # Never prints the payload (it may hold personal data): only its size.
    def inspect
      "#<#{self.class.name} provider=#{provider.inspect} event_id=#{event_id.inspect} " \
        "event_type=#{event_type.inspect} timestamp=#{timestamp.inspect} body=(#{body&.bytesize.to_i} bytes)>"
    end
    alias to_s inspect

    # True when the body is valid JSON PostgreSQL jsonb accepts.
    def jsonb_safe?
      Verifier.jsonb_safe?(body)
    end
  end
end
