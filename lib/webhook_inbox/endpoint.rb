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

    # A store that is never called: problems builds a Receiver only to check its settings.
    UNUSED_STORE = Object.new.freeze

    # What would stop endpoint name (Configuration#endpoint's settings: provider, secrets,
    # source_scope, verifier options) from receiving, one line each, [] when nothing: each
    # secret entry that is nil, not a String, empty or padded, an empty secrets list, an
    # empty scope or one past Inbox::MAX_TEXT_BYTES, and whatever the Receiver and Verifier refuse (an unknown provider, a bad
    # option). Names the endpoint and the entry, never a secret's value.
    def self.problems(name, settings)
      label = "endpoint #{name.to_sym.inspect}"
      secrets = Array(settings[:secrets])
      found = []
      found << "#{label}: no secrets (secrets: is empty or nil)" if secrets.empty?
      secrets.each_with_index do |secret, i|
        problem = secret_problem(secret)
        found << "#{label}: secrets[#{i}] #{problem}" if problem
      end
      scope = settings[:source_scope].to_s
      found << "#{label}: scope is empty" if scope.strip.empty?
      if scope.bytesize > Inbox::MAX_TEXT_BYTES[:source_scope]
        found << "#{label}: scope is #{scope.bytesize} bytes, over the #{Inbox::MAX_TEXT_BYTES[:source_scope]}-byte " \
                 "bound (every delivery would be refused 400 source_scope_too_long)"
      end
      return found unless found.empty?

      Receiver.new(inbox: UNUSED_STORE, **settings)
      found
    rescue ConfigurationError => e
      found << "#{label}: #{e.message}"
    end

    def self.secret_problem(secret)
      return "is nil (a credential or environment variable that is not set?)" if secret.nil?
      return "is a #{secret.class}, not a String" unless secret.is_a?(String)
      return "is empty" if secret.strip.empty?

      "has surrounding whitespace" if secret != secret.strip
    end
    private_class_method :secret_problem

    def call(env)
      @receiver.call(env).to_rack
    end

    def inspect
      "#<#{self.class} #{@receiver.inspect}>"
    end
  end
end
