# frozen_string_literal: true

Rails.application.routes.draw do
  match "/webhooks/stripe", to: "webhooks#stripe", via: :all       # the gem's controller
  match "/webhooks/didit", to: "webhooks#didit", via: :all
  post "/webhooks/stripe_tx", to: "webhooks#stripe_tx"              # transactional inbox
  post "/webhooks/adyen_tx", to: "webhooks#adyen_tx"                # transactional, one block run per item
  post "/webhooks/stripe_inline", to: "webhooks#stripe_inline"      # scope/secrets in the action
  post "/plain/stripe", to: "plain_webhooks#create"                 # hand-written, bench baseline
  post "/rack/stripe", to: WebhookInbox.endpoint(:stripe)           # the Rack endpoint in Rails' router
  mount WebhookInbox::Engine => "/webhook_inbox"                    # the dashboard, behind AdminController
  post "/effects/send_receipt", to: "effects#send_receipt"          # an outbox destination (receive_effect)
  post "/effects/identity_event", to: "effects#identity_event"      # events routed to a destination
end
