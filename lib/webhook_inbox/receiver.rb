# frozen_string_literal: true

require "json"

module WebhookInbox
  # Receiver - the one code path from a raw request to an answer, shared by the Rack
  # Endpoint and the Rails Controller: check method, content type and size, verify the
  # signature over the raw bytes, insert into the inbox, map the outcome to a status.
  #
  #   200 accepted / duplicate (the row is committed before we answer)
  #   400 malformed request (empty body, malformed payload)
  #   401 signature or timestamp failures (missing, malformed, mismatch, stale, no secret)
  #   405 not a POST (Allow: POST)     413 body larger than max_body_bytes
  #   415 a JSON provider's request without a JSON Content-Type
  #   503 + Retry-After: the inbox is unavailable; nothing was stored, the sender retries
  #
  # A verified JSON-provider body that PostgreSQL refuses as jsonb is stored raw and
  # quarantined (reason "payload is not valid JSON") and answered 200: the sender must
  # not retry it forever, and a human can look at the row. Form bodies
  # (application/x-www-form-urlencoded, e.g. Slack slash commands) are stored raw, pending.
  #
  # Logs and notifications carry provider, scope, event id and outcome only: never the
  # payload, headers or secrets.
  class Receiver
    DEFAULT_MAX_BODY_BYTES = 1024 * 1024
    FORM_TYPE = "application/x-www-form-urlencoded"
    # Providers whose deliveries are always JSON (415 otherwise). Slack also posts forms.
    FORM_PROVIDERS = %i[slack].freeze
    UNAUTHORIZED = %i[missing_signature malformed_signature signature_mismatch timestamp_out_of_tolerance
                      missing_timestamp malformed_timestamp no_secret unknown_key].freeze

    # The outcome of one delivery. http_status and body are what the sender gets.
    # error: the StoreError message (logs only; it holds no secrets or payload).
    Result = Struct.new(:http_status, :status, :reason, :receipt, :event, :headers, :error, keyword_init: true) do
      def body
        h = { status: status.to_s }
        h[:reason] = reason.to_s if reason
        JSON.generate(h)
      end

      def to_rack
        b = body
        [http_status, { "Content-Type" => "application/json", "Content-Length" => b.bytesize.to_s,
                        "Cache-Control" => "no-store" }.merge(headers || {}), [b]]
      end
    end

    attr_reader :provider, :source_scope, :max_body_bytes, :inbox

    # provider, secrets and verifier options (tolerance:, ...) go to Verifier.new.
    # The store is inbox: (an Inbox, or anything with Inbox#insert's signature, e.g.
    # ActiveRecordStore) or a new Inbox on database_url:.
    def initialize(provider:, secrets:, source_scope:, inbox: nil, database_url: nil, max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                   retry_after: 5, logger: nil, verifier: nil, **verifier_options)
      raise ConfigurationError, "source_scope is required (e.g. \"stripe:acct_123:live\")" if source_scope.to_s.empty?
      raise ConfigurationError, "max_body_bytes must be a positive Integer" unless max_body_bytes.is_a?(Integer) && max_body_bytes.positive?

      @provider = provider.to_sym
      @source_scope = source_scope.to_s.dup.freeze
      @max_body_bytes = max_body_bytes
      @retry_after = retry_after.to_i.to_s
      @logger = logger
      @verifier = verifier || Verifier.new(@provider, secrets: Array(secrets), max_body_bytes: max_body_bytes, **verifier_options)
      @inbox = inbox || (database_url && Inbox.new(database_url: database_url)) or
        raise ConfigurationError, "give inbox: or database_url:"
    end

    # Receives a Rack request (reads rack.input with the size limit).
    def call(env)
      finish(env) do
        early = precheck(env["REQUEST_METHOD"], env["CONTENT_TYPE"], env["CONTENT_LENGTH"])
        next early if early

        body = read_limited(env["rack.input"])
        next reject(413, :payload_too_large) if body.bytesize > @max_body_bytes

        deliver(body, env)
      end
    end

    # Receives a body already read (e.g. Rails' raw_post) with its Rack env for headers.
    def receive(body, env)
      finish(env) do
        early = precheck(env["REQUEST_METHOD"] || "POST", env["CONTENT_TYPE"], body.bytesize.to_s)
        early || deliver(body, env)
      end
    end

    # Reads at most max_body_bytes + 1 bytes: enough to know the body is too large.
    def read_limited(input)
      return +"" unless input

      input.rewind if input.respond_to?(:rewind)
      data = input.read(@max_body_bytes + 1) || +""
      input.rewind if input.respond_to?(:rewind)
      data.force_encoding(Encoding::BINARY)
    end

    def inspect
      "#<#{self.class} provider=#{@provider} source_scope=#{@source_scope.inspect} max_body_bytes=#{@max_body_bytes}>"
    end

    private

    def precheck(method, content_type, content_length)
      return reject(405, :method_not_allowed, "Allow" => "POST") unless method == "POST"
      return reject(415, :unsupported_media_type) unless acceptable_type?(content_type)
      return reject(413, :payload_too_large) if content_length.to_s =~ /\A\d+\z/ && content_length.to_i > @max_body_bytes

      nil
    end

    def acceptable_type?(content_type)
      media = content_type.to_s.split(";", 2).first.to_s.strip.downcase
      json = media == "application/json" || (media.start_with?("application/") && media.end_with?("+json"))
      json || (FORM_PROVIDERS.include?(@provider) && media == FORM_TYPE)
    end

    def form?(env)
      env["CONTENT_TYPE"].to_s.split(";", 2).first.to_s.strip.casecmp?(FORM_TYPE)
    end

    def deliver(body, env)
      return reject(400, :empty_body) if body.empty?

      event = @verifier.verify(body, env, now: Time.now)
      receipt = @inbox.insert(source_scope: @source_scope, event_id: event.event_id, event_type: event.event_type.to_s,
                              payload: body, raw: form?(env))
      Result.new(http_status: 200, status: receipt.status, receipt: receipt, event: event)
    rescue VerificationError => e
      status = if e.reason == :payload_too_large then 413
               elsif UNAUTHORIZED.include?(e.reason) then 401
               else 400
               end
      reject(status, e.reason)
    rescue StoreError => e
      Result.new(http_status: 503, status: :unavailable, reason: :store_unavailable,
                 headers: { "Retry-After" => @retry_after }, event: event, error: e.message)
    end

    def reject(http_status, reason, headers = nil)
      Result.new(http_status: http_status, status: :rejected, reason: reason, headers: headers)
    end

    def finish(env)
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      result = yield
      log(result, ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000).round(2))
      instrument(result)
      result
    end

    def log(result, ms)
      return unless @logger

      line = +"webhook_inbox provider=#{@provider} scope=#{@source_scope} event_id=#{result.event&.event_id || '-'} " \
              "status=#{result.status} http=#{result.http_status} ms=#{ms}"
      line << " reason=#{result.reason}" if result.reason
      line << " quarantined=true" if result.receipt&.quarantined
      line << " error=#{result.error.inspect}" if result.error
      result.http_status >= 500 ? @logger.error(line) : @logger.info(line)
    end

    def instrument(result)
      return unless defined?(ActiveSupport::Notifications)

      ActiveSupport::Notifications.instrument(
        "receive.webhook_inbox",
        provider: @provider, scope: @source_scope, event_id: result.event&.event_id,
        status: result.status, http_status: result.http_status, reason: result.reason,
        quarantined: result.receipt&.quarantined || false
      )
    end
  end
end
