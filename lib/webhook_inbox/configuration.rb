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
  #     c.endpoint(:github, secrets: [...], scope: "github:org:live", keep_refused: true) # see Refused
  #   end
  #
  # Controllers call receive_webhook(:stripe); Rack apps use WebhookInbox.endpoint(:stripe).
  #
  # Receivers are cached by the value of their settings (name, scope, secrets, options), at
  # most receiver_cache_size of them (default DEFAULT_RECEIVER_CACHE_SIZE), least recently
  # used first out. Each holds a native verifier (a few KB); the multi-tenant pattern
  # receive_webhook(:shopify, scope: "shopify:#{shop_id}:live", ...) builds one per tenant, so
  # size the cache to the tenants that are active at once, not to all of them.
  class Configuration
    DEFAULT_RECEIVER_CACHE_SIZE = 1000
    # Payload keys the dashboard shows as [REDACTED], at any depth: a String matches a key
    # exactly (case-insensitive), a Regexp anywhere in it.
    DEFAULT_DASHBOARD_REDACT_KEYS = [
      /secret/i, /token/i, /passw/i, /api_?key/i, /authorization/i, /card_?number/i, /\Aiban\z/i,
      "cvc", "cvv", "cvc2", "cvv2", "pan", "pin", "ssn", "account_number", "routing_number", "private_key"
    ].freeze

    # The dashboard (WebhookInbox::Engine):
    # - dashboard_base_controller: the class name its controllers inherit from, so the app's
    #   own authentication applies (e.g. "AdminController"); "ActionController::Base" by default;
    # - dashboard_actor: ->(controller) { who is acting }, recorded with every requeue and
    #   replay (nil, or a proc returning nil: "unknown");
    # - dashboard_redact_keys: see DEFAULT_DASHBOARD_REDACT_KEYS;
    # - dashboard_page_size: events per page (50); dashboard_chart_hours: hours charted (12);
    # - dashboard_auth: how the dashboard is protected (see Rails::DashboardAuth): :http_basic,
    #   { before_action: :authenticate_admin! } (a filter of dashboard_base_controller) or
    #   :router_or_proxy (the named opt-out). nil (the default) is no choice: the dashboard
    #   answers 401 to every request outside dashboard_open_environments;
    # - dashboard_open_environments: where no choice leaves it open, with a banner
    #   (%w[development test]).
    # - cleanup_held_seconds, cleanup_held_transactions: the dashboard's notice and the doctor
    #   say VACUUM is held back when the oldest snapshot or transaction that holds back cleanup
    #   has been open this long (300), or its xmin is this many transactions old (1,000,000; a
    #   replica's or slot's, which have no start time) (CleanupHorizon).
    attr_accessor :cleanup_held_seconds, :cleanup_held_transactions
    attr_accessor :dashboard_base_controller, :dashboard_actor, :dashboard_redact_keys, :dashboard_page_size,
                  :dashboard_chart_hours, :dashboard_open_environments
    attr_reader :dashboard_auth

    attr_accessor :database_url, :pool_size, :connect_timeout, :statement_timeout, :logger,
                  :max_body_bytes, :retry_after, :dump_functions, :default_database_url, :group_commit,
                  :group_leaders, :group_by_scope, :citus_nodes, :citus_route_ttl
    # handler_timeout: seconds one Ruby handler may run in the Ruby worker before it is
    # interrupted and charged a failure (retried with backoff, quarantined at max attempts),
    # its batch-mates going on (Handlers::TimeLimit); 30 by default, nil or 0 for none. The
    # worker's --handler-timeout overrides it.
    attr_accessor :handler_timeout
    # Standard Webhooks secrets ("whsec_...") of effects the sidecar delivers to this app
    # (receive_effect); default: ENV["WEBHOOK_INBOX_EFFECT_SECRET"].
    attr_writer :effect_secrets
    # :native (the gem's own libpq pool: durable before 200, fast) or :active_record (the
    # app's ActiveRecord connection: the Railtie's default in the test environment, so a
    # receipt joins the test's transaction and rolls back with it).
    attr_reader :store, :receiver_cache_size

    def initialize
      @store = :native
      @dump_functions = true # db/schema.rb also keeps the app's SQL functions (false: fx does it)
      @group_commit = true   # concurrent receipts of one process share a statement and a commit (Inbox)
      @group_leaders = 2     # group-commit batches in flight at once per process (at most pool_size)
      @group_by_scope = false # true on Citus: one source_scope (one shard) per batch (Inbox)
      @citus_nodes = nil      # Citus: { "host:port" => url }, receipts straight to the shard's node (Inbox)
      @citus_route_ttl = 30   # seconds a scope's node is trusted (CitusRouter)
      @pool_size = 5
      @connect_timeout = 5
      @statement_timeout = 5
      @max_body_bytes = Receiver::DEFAULT_MAX_BODY_BYTES
      @retry_after = 5
      @handler_timeout = 30
      @receiver_cache_size = DEFAULT_RECEIVER_CACHE_SIZE
      @dashboard_base_controller = "ActionController::Base"
      @dashboard_actor = nil
      @dashboard_redact_keys = DEFAULT_DASHBOARD_REDACT_KEYS
      @dashboard_page_size = 50
      @dashboard_chart_hours = 12
      @dashboard_auth = nil
      @dashboard_open_environments = %w[development test]
      @cleanup_held_seconds = 300
      @cleanup_held_transactions = 1_000_000
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

    # Endpoint name's provider and scope and how many of its secrets are set (non-empty
    # Strings) out of how many given, for diagnostics: never the secrets themselves.
    def endpoint_summary(name)
      s = @endpoints.fetch(name.to_sym)
      secrets = Array(s[:secrets])
      { provider: s[:provider], scope: s[:source_scope],
        secrets_present: secrets.count { |v| v.is_a?(String) && !v.strip.empty? }, secrets_given: secrets.size }
    end

    # What is wrong with the configured endpoints, one line each, naming the endpoint (and
    # the secret entry): ["endpoint :stripe: secrets[0] is nil (...)"], [] when every endpoint
    # builds the Receiver a request would. Never prints a secret.
    def endpoint_problems
      @endpoints.flat_map { |name, settings| Endpoint.problems(name, settings) }
    end

    # Raises ConfigurationError listing every endpoint_problems line (the Railtie calls it
    # when the app boots, so a missing credential stops boot instead of answering 500s).
    def validate!
      problems = endpoint_problems
      raise ConfigurationError, "webhook_inbox: #{problems.join('; ')}" unless problems.empty?

      self
    end

    def effect_secrets
      @effect_secrets || [ENV["WEBHOOK_INBOX_EFFECT_SECRET"]].compact
    end

    # The Standard Webhooks verifier for receive_effect (cached per secrets and tolerance).
    def effect_verifier(secrets = nil, tolerance = Verifier::DEFAULT_TOLERANCE)
      secrets = Array(secrets || effect_secrets)
      raise ConfigurationError, "receive_effect: no secret (set WEBHOOK_INBOX_EFFECT_SECRET or c.effect_secrets)" if secrets.empty?

      key = [secrets, tolerance]
      @mutex.synchronize do
        (@effect_verifiers ||= {})[frozen_copy(key)] ||=
          Verifier.new(:standard_webhooks, secrets: secrets, tolerance: tolerance)
      end
    end

    DASHBOARD_AUTH_NAMES = %i[http_basic router_or_proxy].freeze

    # Raises ConfigurationError unless choice is nil, a name in DASHBOARD_AUTH_NAMES or
    # { before_action: Symbol }: the opt-out only by its name, never true, false or :none.
    def dashboard_auth=(choice)
      valid = choice.nil? || DASHBOARD_AUTH_NAMES.include?(choice) ||
              (choice.is_a?(Hash) && choice.keys == [:before_action] && choice[:before_action].is_a?(Symbol))
      unless valid
        raise ConfigurationError, "dashboard_auth must be :http_basic, { before_action: :a_filter_of_the_base_controller } " \
                                  "or :router_or_proxy (got #{choice.inspect})"
      end

      @dashboard_auth = choice.is_a?(Hash) ? choice.dup.freeze : choice
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

    # The Receiver for a configured endpoint name, or for explicit settings (cached by their
    # value, so a controller action building one per request reuses it; see the class note).
    def receiver(name, scope: nil, secrets: nil, transactional: false, **options)
      key = [name.to_sym, scope, secrets, transactional, options]
      cached = @mutex.synchronize { cache_get(key) }
      return cached if cached

      settings = @endpoints[name.to_sym] || {}
      settings = settings.merge(options)
      settings[:provider] ||= name.to_sym
      settings[:secrets] = Array(secrets) if secrets
      settings[:source_scope] = scope if scope
      raise ConfigurationError, "no endpoint #{name.inspect}: configure it or pass scope: and secrets:" unless settings[:source_scope] && settings[:secrets]

      store = transactional || @store == :active_record ? ActiveRecordStore.new : inbox
      built = begin
        Receiver.new(inbox: store, logger: logger, max_body_bytes: max_body_bytes, retry_after: retry_after,
                     endpoint: name.to_sym, **settings)
      rescue ConfigurationError => e
        raise ConfigurationError, "endpoint #{name.to_sym.inspect}: #{e.message}"
      end
      @mutex.synchronize { cache_get(key) || cache_put(frozen_copy(key), built) }
    end

    # At most this many receivers stay cached (Integer >= 1).
    def receiver_cache_size=(size)
      raise ConfigurationError, "receiver_cache_size must be an Integer >= 1" unless size.is_a?(Integer) && size >= 1

      @mutex.synchronize do
        @receiver_cache_size = size
        @receivers.shift while @receivers.size > size
      end
    end

    # How many receivers are cached now (diagnostics, tests).
    def cached_receiver_count
      @mutex.synchronize { @receivers.size }
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

    # @receivers maps a frozen copy of the settings to [that key, receiver]; the Hash keeps
    # insertion order, so the first entry is the least recently used. Lookups compare by
    # value (#hash, then #eql?): settings that merely share a hash never share a receiver.
    # Callers hold @mutex.
    def cache_get(key)
      entry = @receivers.delete(key) or return nil
      @receivers[entry[0]] = entry # now the most recently used
      entry[1]
    end

    def cache_put(key, receiver)
      @receivers[key] = [key, receiver]
      @receivers.shift while @receivers.size > @receiver_cache_size
      receiver
    end

    # A deep copy a caller cannot change under the cache (Arrays, Hashes, Strings).
    def frozen_copy(value)
      case value
      when String then value.frozen? ? value : value.dup.freeze
      when Array then value.map { |v| frozen_copy(v) }.freeze
      when Hash then value.to_h { |k, v| [frozen_copy(k), frozen_copy(v)] }.freeze
      else value
      end
    end

    def build_inbox
      url = effective_database_url or
        raise ConfigurationError, "no database: set DATABASE_URL, configure ActiveRecord, or WebhookInbox.configure { |c| c.database_url = ... }"

      Inbox.new(database_url: url, pool_size: pool_size, connect_timeout: connect_timeout,
                statement_timeout: statement_timeout, group_commit: group_commit, group_leaders: group_leaders,
                group_by_scope: group_by_scope, citus_nodes: citus_nodes, citus_route_ttl: citus_route_ttl)
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
