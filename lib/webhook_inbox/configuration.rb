# frozen_string_literal: true

module WebhookInbox
  # Configuration - server-side endpoint settings (the trusted source_scope lives here,
  # never in the payload) and the shared Inbox:
  #
  #   WebhookInbox.configure do |c|
  #     c.database_url = ENV["DATABASE_URL"]   # optional in Rails: ActiveRecord's database by default
  #     c.endpoint(:stripe, secrets: [Rails.application.credentials.stripe_webhook_secret],
  #                scope: "stripe:acct_1:live", tolerance: 300)
  #     c.endpoint(:stripe_test, provider: :stripe, secrets: [...], scope: "stripe:acct_1:test")
  #   end
  #
  # Controllers call receive_webhook(:stripe); Rack apps use WebhookInbox.endpoint(:stripe).
  class Configuration
    attr_accessor :database_url, :pool_size, :connect_timeout, :statement_timeout, :logger,
                  :max_body_bytes, :retry_after, :dump_functions, :default_database_url
    # :native (the gem's own libpq pool: durable before 200, fast) or :active_record (the
    # app's ActiveRecord connection: the Railtie's default in the test environment, so a
    # receipt joins the test's transaction and rolls back with it).
    attr_reader :store

    def initialize
      @store = :native
      @dump_functions = true # db/schema.rb also keeps the app's SQL functions (false: fx does it)
      @pool_size = 5
      @connect_timeout = 5
      @statement_timeout = 5
      @max_body_bytes = Receiver::DEFAULT_MAX_BODY_BYTES
      @retry_after = 5
      @endpoints = {}
      @receivers = {}
      @mutex = Mutex.new
    end

    # Declares endpoint name. provider defaults to name; other options go to the Verifier.
    def endpoint(name, secrets:, scope:, provider: name, **options)
      @mutex.synchronize do
        @endpoints[name.to_sym] = options.merge(provider: provider.to_sym, secrets: Array(secrets), source_scope: scope)
        @receivers.clear
      end
      name.to_sym
    end

    def endpoint_names
      @endpoints.keys
    end

    def store=(kind)
      raise ConfigurationError, "store must be :native or :active_record" unless %i[native active_record].include?(kind)

      @mutex.synchronize do
        @store = kind
        @receivers.clear
      end
    end

    # database_url when set, else default_database_url (in Rails: ActiveRecord's database,
    # DATABASE_URL included), else ENV["DATABASE_URL"]; nil when none is known.
    def effective_database_url
      url = database_url.to_s
      url = default_database_url&.call.to_s if url.empty?
      url = ENV["DATABASE_URL"].to_s if url.empty?
      url.empty? ? nil : url
    end

    # The shared native Inbox on database_url (one pool per process; fork-safe).
    def inbox
      @mutex.synchronize { @inbox ||= build_inbox }
    end

    # The Receiver for a configured endpoint name, or for explicit settings (memoized by
    # their value, so a controller action building one per request reuses it).
    def receiver(name, scope: nil, secrets: nil, transactional: false, **options)
      key = [name.to_sym, scope, secrets, transactional, options].hash
      cached = @receivers[key]
      return cached if cached

      settings = @endpoints[name.to_sym] || {}
      settings = settings.merge(options)
      settings[:provider] ||= name.to_sym
      settings[:secrets] = Array(secrets) if secrets
      settings[:source_scope] = scope if scope
      raise ConfigurationError, "no endpoint #{name.inspect}: configure it or pass scope: and secrets:" unless settings[:source_scope] && settings[:secrets]

      store = transactional || @store == :active_record ? ActiveRecordStore.new : inbox
      built = Receiver.new(inbox: store, logger: logger, max_body_bytes: max_body_bytes, retry_after: retry_after, **settings)
      @mutex.synchronize { @receivers[key] ||= built }
    end

    def reset!
      @mutex.synchronize do
        @inbox&.close
        @inbox = nil
        @receivers.clear
      end
    end

    def inspect
      "#<#{self.class} database_url=#{Inbox.redact(database_url).inspect} endpoints=#{@endpoints.keys.inspect}>"
    end

    private

    def build_inbox
      url = effective_database_url or
        raise ConfigurationError, "no database: set DATABASE_URL, configure ActiveRecord, or WebhookInbox.configure { |c| c.database_url = ... }"

      Inbox.new(database_url: url, pool_size: pool_size, connect_timeout: connect_timeout,
                statement_timeout: statement_timeout)
    end
  end

  class << self
    def configuration
      @configuration ||= Configuration.new
    end

    def configure
      yield configuration
      configuration
    end

    # A Rack app for a configured endpoint name (resolved on first request, so routes
    # may be drawn before the initializer runs).
    def endpoint(name)
      ->(env) { configuration.receiver(name).call(env).to_rack }
    end
  end
end
