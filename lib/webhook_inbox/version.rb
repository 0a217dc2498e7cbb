# frozen_string_literal: true

module WebhookInbox
  VERSION = "0.1.0"
end
