# frozen_string_literal: true

require_relative "webhook_inbox/version"
require_relative "webhook_inbox/errors"
require_relative "webhook_inbox/webhook_inbox" # the native extension
require_relative "webhook_inbox/verifier"
require_relative "webhook_inbox/event"
require_relative "webhook_inbox/inbox"

# WebhookInbox - verify webhooks in C, store them exactly once in PostgreSQL.
module WebhookInbox
end
