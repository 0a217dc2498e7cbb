# frozen_string_literal: true

require_relative "lib/webhook_inbox/version"

# Published as webhook_inbox_pg: the name "webhook_inbox" on RubyGems belongs to an unrelated
# gem (Active Job based), so `gem "webhook_inbox"` would install someone else's code. The
# library is still required as "webhook_inbox" (lib/webhook_inbox_pg.rb lets Bundler's
# autorequire find it) and its namespace stays WebhookInbox.
Gem::Specification.new do |spec|
  spec.name = "webhook_inbox_pg"
  spec.version = WebhookInbox::VERSION
  spec.summary = "Verify webhooks in C, store them exactly once in PostgreSQL, process them with a C sidecar."
  spec.description = <<~DESC
    Native signature verification over the raw body (Stripe, Standard Webhooks, GitHub,
    Shopify, Slack, Paddle, Didit, generic HMAC), a durable PostgreSQL inbox written through
    libpq with INSERT ... ON CONFLICT DO NOTHING, a Rack endpoint and Rails controller, and
    webhook-inbox-sidecar, a C worker that runs SQL handlers under FOR UPDATE SKIP LOCKED.
  DESC
  spec.authors = ["webhook_inbox developers"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.0"

  spec.files = Dir[
    "lib/**/*.rb", "lib/**/*.rake", "lib/**/templates/**/*", "lib/**/*.erb",
    "lib/webhook_inbox/monitoring/*.{yml,json}",
    "app/**/*.{rb,erb}", "config/routes.rb",
    "ext/webhook_inbox/*.{c,h,rb}",
    "sidecar/extconf.rb", "sidecar/src/**/*.{c,h}",
    "db/**/*.sql", "exe/*", "README.md", "CHANGELOG.md", "UPGRADING.md", "docs/*.md", "LICENSE"
  ]
  spec.bindir = "exe"
  spec.executables = ["webhook-inbox-sidecar"]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/webhook_inbox/extconf.rb", "sidecar/extconf.rb"]

  spec.add_dependency "rack", ">= 2.2", "< 4"
end
