# frozen_string_literal: true

# The app as an outbox destination: effects the sidecar signs (Standard Webhooks) and POSTs,
# run in Ruby once per operation id.
class EffectsController < ActionController::API
  include WebhookInbox::Controller

  def send_receipt
    receive_effect(:send_receipt) do |effect|
      EffectRun.connection.select_value("SELECT nextval('effect_block_calls')") # counts every call
      raise WebhookInbox::EffectRejected, "no payment id" unless effect.payload["payment_id"]

      EffectRun.create!(operation_id: effect.operation_id, payment_id: effect.payload["payment_id"])
      sleep Float(effect.payload["sleep"]) if effect.payload["sleep"]
      raise "transient failure" if effect.payload["fail"] # rolls the row above back: retried
    end
  end

  # An event type routed straight here (webhook_inbox_deliver, no SQL handler): the effect's
  # payload is the event, its operation id derived from (source_scope, event_id).
  def identity_event
    receive_effect(:identity_event) do |effect|
      EffectRun.connection.select_value("SELECT nextval('effect_block_calls')")
      EffectRun.create!(operation_id: effect.operation_id, payment_id: effect.payload.fetch("event_id"))
    end
  end
end
