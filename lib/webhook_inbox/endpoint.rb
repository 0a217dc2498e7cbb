# frozen_string_literal: true

require_relative "receiver"

module WebhookInbox
  # Endpoint - a Rack app receiving one provider's webhooks for one source_scope:
  #
  #   # config.ru
  #   map "/webhooks/stripe" do
  #     run WebhookInbox::Endpoint.new(provider: :stripe, secrets: [ENV["STRIPE_WEBHOOK_SECRET"]],
  #                                    source_scope: "stripe:acct_1:live", database_url: ENV["DATABASE_URL"])
  #   end
  #
  # Answers 200 {"status":"accepted"|"duplicate"} only after the event is committed;
  # see Receiver for every other status. Options other than inbox:/database_url: and the
  # Receiver's own (max_body_bytes:, retry_after:, logger:) go to Verifier.new.
  class Endpoint
    attr_reader :receiver

    def initialize(provider:, secrets:, source_scope:, database_url: nil, inbox: nil, **options)
      @receiver = Receiver.new(provider: provider, secrets: secrets, source_scope: source_scope,
                               database_url: database_url, inbox: inbox, **options)
    end

    def call(env)
      @receiver.call(env).to_rack
    end

    def inspect
      "#<#{self.class} #{@receiver.inspect}>"
    end
  end
end
