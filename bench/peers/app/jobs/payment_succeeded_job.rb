# frozen_string_literal: true

# A job per event, the pattern the peers' documents teach (stripe_event: subscribe, then
# perform_later): the webhook controller enqueues the verified event, the job applies it.
# At least once: a worker killed after the commit and before the job is marked finished runs
# it again (Order.pay! then answers :duplicate).
class PaymentSucceededJob < ApplicationJob
  queue_as :default
  retry_on Order::NotYet, wait: :polynomially_longer
  discard_on Order::Refused

  def perform(event)
    Order.pay!(event)
  end
end
