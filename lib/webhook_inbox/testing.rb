# frozen_string_literal: true

require "json"
require_relative "testing/signing"
require_relative "testing/drain"
require_relative "testing/effects"

module WebhookInbox
  # Testing - helpers for an app's own tests (RSpec: require "webhook_inbox/testing/rspec";
  # Minitest: require "webhook_inbox/testing/minitest"). In the test environment receipts go
  # through ActiveRecord's connection, so rows written by a request roll back with the test.
  #
  #   post "/webhooks/stripe", params: body, headers: webhook_headers(:stripe, body, secret: "whsec_test")
  #   keys = webhook_keypair(:sendgrid)   # configure the endpoint with keys.secrets
  #   post "/webhooks/sendgrid", params: body, headers: keys.headers(body)
  #   store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_1", ... })
  #   drain_webhook_inbox   # => [#<Outcome event_id="evt_1" result="done" detail="paid">]
  #   deliver_webhook_inbox_effects(:app_identity, to: "/effects/identity")  # integration tests
  module Testing
    # Signed headers for body as provider would send them (see Signing for each provider's options).
    def webhook_headers(provider, body, secret:, **options)
      Signing.headers(provider, body, secret: secret, **options)
    end

    # The signed request (Signing::Delivery: body, headers, url, method, #rack_env), for every
    # provider, including those that sign inside the body (Mailgun, Paddle Classic, Braintree, Adyen).
    def webhook_delivery(provider, body, secret:, **options)
      Signing.delivery(provider, body, secret: secret, **options)
    end

    # Fresh credentials for provider (Signing::Credentials): #secrets for the app's Verifier or
    # endpoint configuration, #delivery(body) / #headers(body) signed with the matching key.
    def webhook_keypair(provider, **options) = Signing.keypair(provider, **options)

    # Inserts an event as the receiver would after verifying it (through ActiveRecord's
    # connection, so inside the test's transaction). payload: a String body or a Hash.
    # Returns the Receipt (accepted or duplicate).
    def store_webhook_event(event_type:, payload:, event_id: nil, scope: "test")
      body = payload.is_a?(String) ? payload : JSON.generate(payload)
      event_id ||= (payload.is_a?(Hash) && (payload["id"] || payload[:id])) || "evt_#{Process.clock_gettime(Process::CLOCK_REALTIME, :nanosecond)}"
      WebhookInbox::ActiveRecordStore.new.insert(source_scope: scope, event_id: event_id.to_s, event_type: event_type,
                                                 payload: body)
    end

    # Runs the handlers of every due pending event now, through the sidecar's own dispatch SQL,
    # in the current transaction, and returns their outcomes (see Drain).
    def drain_webhook_inbox(**options)
      Drain.run(::ActiveRecord::Base.connection, **options)
    end

    # In an integration test (or a request spec): POSTs every pending effect of destination
    # to the path to: of this app, signed as the sidecar signs it, once each, and saves the
    # answers as the sidecar would (see Effects). Returns the Deliveries (operation_id,
    # status, body). secret: defaults to the one receive_effect checks.
    def deliver_webhook_inbox_effects(destination, to:, secret: nil)
      connection = ::ActiveRecord::Base.connection
      key = Effects.secret(secret)
      Effects.pending(connection, destination).map do |operation_id, payload, scope|
        webhook_id = "#{Effects.path(to)} #{operation_id}" # as the sidecar signs it: the endpoint, then the operation
        post(to, params: payload, headers: Signing.standard_webhooks_headers(payload, secret: key, id: webhook_id))
        Effects.save(connection, operation_id, response.status, response.body, source_scope: scope)
        Effects::Delivery.new(operation_id: operation_id, status: response.status, body: response.body)
      end
    end
  end
end
