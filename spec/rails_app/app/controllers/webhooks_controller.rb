# frozen_string_literal: true

# Receives webhooks with the gem: verify in C, insert once, answer after the commit.
class WebhooksController < ActionController::API
  include WebhookInbox::Controller

  def stripe
    receive_webhook(:stripe)
  end

  def didit
    receive_webhook(:didit)
  end

  def stripe_inline
    receive_webhook(:stripe, scope: "#{ENV.fetch('STRIPE_SCOPE')}:inline", secrets: [ENV.fetch("STRIPE_WEBHOOK_SECRET")])
  end

  # The inbox row and the business write commit together, or neither does.
  def stripe_tx
    receive_webhook(:stripe, transactional: true) do |receipt, event|
      raise "handler failed for #{event.event_id}" if event.event_type == "test.fail"
      raise ActiveRecord::Rollback if event.event_type == "test.rollback"
      TxEffect.find(-1) if event.event_type == "test.not_found" # ActiveRecord::RecordNotFound

      TxEffect.create!(event_id: receipt.event_id)
    end
  end

  # Adyen: the block runs once per newly accepted notification item, all in one transaction.
  def adyen_tx
    receive_webhook(:adyen, scope: ENV.fetch("ADYEN_SCOPE", "adyen:rails:live"), secrets: [ENV.fetch("ADYEN_HMAC_KEY")],
                            transactional: true) do |receipt, event|
      raise "handler failed for #{event.event_id}" if event.event_type == "TEST_FAIL"

      TxEffect.create!(event_id: receipt.event_id)
    end
  end
end
