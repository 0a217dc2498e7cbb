# frozen_string_literal: true

# require "webhook_inbox/testing/rspec" in spec/rails_helper.rb: every example gets
# webhook_headers, webhook_delivery, webhook_keypair, store_webhook_event and drain_webhook_inbox
# (see WebhookInbox::Testing).
require "webhook_inbox/testing"

RSpec.configure do |config|
  config.include WebhookInbox::Testing
end
