# frozen_string_literal: true

# require "webhook_inbox/testing/minitest" in test/test_helper.rb: model, integration and
# controller tests get webhook_headers, webhook_delivery, webhook_keypair, store_webhook_event
# and drain_webhook_inbox.
require "webhook_inbox/testing"

ActiveSupport.on_load(:active_support_test_case) { include WebhookInbox::Testing }
ActiveSupport.on_load(:action_dispatch_integration_test) { include WebhookInbox::Testing }
