# frozen_string_literal: true

require_relative "webhook_inbox/version"
require_relative "webhook_inbox/errors"
require_relative "webhook_inbox/webhook_inbox" # the native extension
require_relative "webhook_inbox/verifier"
require_relative "webhook_inbox/event"
require_relative "webhook_inbox/inbox"
require_relative "webhook_inbox/receiver"
require_relative "webhook_inbox/endpoint"
require_relative "webhook_inbox/configuration"
require_relative "webhook_inbox/active_record_store"
require_relative "webhook_inbox/controller"
require_relative "webhook_inbox/railtie" if defined?(Rails::Railtie)

# WebhookInbox - verify webhooks in C, store them exactly once in PostgreSQL.
module WebhookInbox
end
