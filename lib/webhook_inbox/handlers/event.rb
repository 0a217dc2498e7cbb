# frozen_string_literal: true

require "json"

module WebhookInbox
  module Handlers
    # Event - what a Ruby handler gets: the verified event as stored (payload parsed from its
    # jsonb, or nil with raw_body for a body that is not JSON), its scope, id, type and
    # received_at, this run's attempt number (1 = first) and operation_id, stable for this
    # event and this handler across duplicates, replays, crashes and redeliveries: pass it to
    # APIs as their idempotency key. #inspect never prints the payload.
    class Event
      attr_reader :scope, :id, :type, :received_at, :attempt, :operation_id, :handler, :raw_body

      def initialize(scope:, id:, type:, received_at:, attempt:, operation_id:, handler:, payload_json: nil, raw_body: nil)
        @scope = scope
        @id = id
        @type = type
        @received_at = received_at
        @attempt = attempt
        @operation_id = operation_id
        @handler = handler
        @payload_json = payload_json
        @raw_body = raw_body
      end

      # The verified payload as a Hash (string keys), nil when the body was not JSON.
      def payload
        return @payload if defined?(@payload)

        @payload = @payload_json && JSON.parse(@payload_json)
      end

      # payload.dig for the common case: event.dig("data", "object", "id").
      def dig(*keys) = payload&.dig(*keys)

      alias source_scope scope
      alias event_id id
      alias event_type type

      def inspect
        "#<WebhookInbox::Handlers::Event handler=#{handler.inspect} scope=#{scope.inspect} id=#{id.inspect} " \
          "type=#{type.inspect} attempt=#{attempt} operation_id=#{operation_id.inspect}>"
      end
      alias to_s inspect
    end
  end
end
