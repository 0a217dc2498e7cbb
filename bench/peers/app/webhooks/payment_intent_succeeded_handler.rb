# frozen_string_literal: true

# The same transition as a webhook_inbox Ruby handler (bin/webhook-inbox-sidecar ruby): run
# in the worker's transaction with its once-marker, so it applies exactly once.
class PaymentIntentSucceededHandler < WebhookInbox::Handler
  subscribe "payment_intent.succeeded"

  def call(event)
    Order.pay!(event.payload)
  rescue Order::Refused => e
    raise WebhookInbox::Permanent, e.message
  end
end
