# frozen_string_literal: true

require_relative "webhook_inbox/version"
require_relative "webhook_inbox/errors"
require_relative "webhook_inbox/instrumentation"
begin
  require_relative "webhook_inbox/webhook_inbox" # the native extension
rescue LoadError => e
  raise e unless e.path.nil? || e.path.end_with?("webhook_inbox/webhook_inbox")

  # A `path:` gem (or a fresh checkout) is not compiled by Bundler: say how to build it.
  raise LoadError, <<~MSG.chomp
    webhook_inbox: the native extension is not built (#{e.message}).
      From a `path:` checkout or a clone (Bundler does not compile path gems): run
        bundle exec rake compile   # in #{File.expand_path("..", __dir__)}
      Installed as a gem: reinstall it (`gem pristine webhook_inbox_pg`). Building needs a C compiler and
      the libpq, OpenSSL and libcurl headers (Debian: apt-get install build-essential pkg-config libpq-dev
      libssl-dev libcurl4-openssl-dev; macOS: brew install pkg-config libpq openssl curl).
  MSG
end
require_relative "webhook_inbox/verifier"
require_relative "webhook_inbox/event"
require_relative "webhook_inbox/request_headers"
require_relative "webhook_inbox/ordering"
require_relative "webhook_inbox/tracing"
require_relative "webhook_inbox/citus_router"
require_relative "webhook_inbox/inbox"
require_relative "webhook_inbox/receiver"
require_relative "webhook_inbox/rejections"
require_relative "webhook_inbox/refused"
require_relative "webhook_inbox/refused_reverify"
require_relative "webhook_inbox/endpoint"
require_relative "webhook_inbox/configuration"
require_relative "webhook_inbox/schema"
require_relative "webhook_inbox/sidecar"
require_relative "webhook_inbox/handlers"
require_relative "webhook_inbox/flow"
require_relative "webhook_inbox/metrics"
require_relative "webhook_inbox/monitoring"
require_relative "webhook_inbox/cleanup_horizon"
require_relative "webhook_inbox/rails/active_record_store"
require_relative "webhook_inbox/rails/effect_receiver"
require_relative "webhook_inbox/rails/controller"
require_relative "webhook_inbox/rails/railtie" if defined?(Rails::Railtie)
require_relative "webhook_inbox/engine" if defined?(Rails::Engine)

# WebhookInbox - verify webhooks in C, store them exactly once in PostgreSQL.
module WebhookInbox
  # The inbox rows as a read-only ActiveRecord model (loaded on first use, with ActiveRecord).
  autoload :InboxEvent, File.expand_path("webhook_inbox/rails/inbox_event", __dir__)
end
