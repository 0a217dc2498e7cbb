# frozen_string_literal: true

require "json"
require "openssl"
require "uri"

module WebhookInbox
  # Receiver - the one code path from a raw request to an answer, shared by the Rack
  # Endpoint and the Rails Controller: check method, content type and size, verify the
  # signature over the raw bytes, insert into the inbox, map the outcome to a status.
  #
  #   200 accepted / duplicate (the row is committed before we answer); a verified challenge
  #       (Discord PING, Slack url_verification, Zoom endpoint.url_validation) is answered
  #       with what the provider expects (Event#challenge) and never stored
  #   400 malformed request (empty body, malformed payload; an event id, type or scope
  #       longer than Inbox::MAX_TEXT_BYTES: :event_id_too_long, :event_type_too_long,
  #       :source_scope_too_long; a signed id that long is stored as "sha256:<hex>" instead)
  #   401 signature or timestamp failures (missing, malformed, mismatch, stale, no secret)
  #   405 not a POST (Allow: POST), except Braintree's URL check: a GET with one bt_challenge
  #       (20-32 lowercase hex) is answered 200 "public_key|hex" (text/plain, never stored),
  #       400 for another challenge    413 body larger than max_body_bytes
  #   415 a JSON provider's request without a JSON Content-Type
  #   503 + Retry-After: the inbox is unavailable or did not answer in time; the sender
  #                      retries (a row committed after all is then answered duplicate);
  #                      or (:paypal with fetch_certificates:) PayPal's certificate could not
  #                      be fetched: certificate_unavailable, kept by keep_refused (as
  #                      unknown_key on a schema older than v20, see Refused)
  #
  # A verified JSON-provider body that PostgreSQL refuses as jsonb is stored raw and
  # quarantined (reason "payload is not valid JSON") and answered 200: the sender must
  # not retry it forever, and a human can look at the row. Form bodies
  # (application/x-www-form-urlencoded, e.g. Slack slash commands) are stored raw, pending.
  #
  # Logs and notifications carry provider, scope, event id and outcome only: never the
  # payload, headers or secrets. Rejections are also counted per scope and reason in memory
  # (WebhookInbox::Rejections; flushed in the background, never written per request).
  #
  # keep_refused: true (or bounds, see Refused) keeps a delivery refused for a signature or
  # secret mismatch, or a PayPal certificate it could not fetch (Refused::REASONS), aside under the endpoint name (endpoint:, the
  # configured name; default the provider) in webhook_inbox_refused, written in the
  # background; #reverify admits it later if it verifies with the secrets of then.
  class Receiver
    DEFAULT_MAX_BODY_BYTES = 1024 * 1024
    JSON_TYPE = "application/json"
    FORM_TYPE = "application/x-www-form-urlencoded"
    # Providers whose deliveries are always JSON (415 otherwise). Slack, Twilio, Paddle Classic and Braintree also post forms.
    FORM_PROVIDERS = %i[slack twilio paddle_classic braintree].freeze
    UNAUTHORIZED = %i[missing_signature malformed_signature signature_mismatch timestamp_out_of_tolerance
                      missing_timestamp malformed_timestamp no_secret unknown_key].freeze
    # Refusals the sender should retry (503 + Retry-After); keep_refused keeps them too.
    RETRYABLE = %i[certificate_unavailable].freeze
    # The answers to the two common outcomes, built once: [body, Content-Length].
    COMMON_BODIES = %i[accepted duplicate].to_h do |s|
      b = JSON.generate(status: s.to_s).freeze
      [s, [b, b.bytesize.to_s.freeze].freeze]
    end.freeze
    NOTIFICATION = "receive.webhook_inbox"
    DIGITS = /\A\d+\z/.freeze
    MAX_CHALLENGE_QUERY = 256 # bytes of QUERY_STRING read for a bt_challenge
    NO_HEADERS = {}.freeze # for a store whose insert takes no headers: (see takes_headers?)

    # The outcome of one delivery. http_status and body are what the sender gets.
    # error: the StoreError message (logs only; it holds no secrets or payload).
    # A delivery of several events (Adyen's items, Event#items): receipts holds one Receipt per
    # item, in order (receipt is the first); status is :accepted when any item was new.
    Result = Struct.new(:http_status, :status, :reason, :receipt, :event, :headers, :error, :receipts,
                        keyword_init: true) do
      # Yields each stored event's Receipt with its Event: the delivery's, or each item's.
      def each_stored(&block)
        return enum_for(:each_stored) unless block
        return receipts.zip(event.items).each(&block) if receipts

        yield receipt, event if receipt
      end

      def body
        return event.challenge if status == :challenge

        common = !reason && COMMON_BODIES[status]
        return common[0] if common

        h = { status: status.to_s }
        h[:reason] = reason.to_s if reason
        JSON.generate(h)
      end

      def to_rack
        common = !reason && COMMON_BODIES[status]
        b, length = common || [body, nil]
        h = { "Content-Type" => JSON_TYPE, "Content-Length" => length || b.bytesize.to_s, "Cache-Control" => "no-store" }
        h.merge!(headers) if headers
        [http_status, h, [b]]
      end
    end

    attr_reader :provider, :source_scope, :max_body_bytes, :inbox, :endpoint, :keep_refused

    # provider, secrets and verifier options (tolerance:, ...) go to Verifier.new.
    # The store is inbox: (an Inbox, or anything with Inbox#insert's signature, e.g.
    # ActiveRecordStore) or a new Inbox on database_url:.
    def initialize(provider:, secrets:, source_scope:, inbox: nil, database_url: nil, max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                   retry_after: 5, logger: nil, verifier: nil, keep_refused: false, endpoint: nil, refused: nil,
                   ordering: nil, **verifier_options)
      raise ConfigurationError, "source_scope is required (e.g. \"stripe:acct_123:live\")" if source_scope.to_s.empty?
      raise ConfigurationError, "max_body_bytes must be a positive Integer" unless max_body_bytes.is_a?(Integer) && max_body_bytes.positive?

      @provider = provider.to_sym
      @source_scope = source_scope.to_s.dup.freeze
      @max_body_bytes = max_body_bytes
      @retry_after = retry_after.to_i.to_s
      @logger = logger
      @form_ok = FORM_PROVIDERS.include?(@provider)
      @log_levels = logger.respond_to?(:info?) && logger.respond_to?(:error?) # else log every line
      @verifier = verifier || Verifier.new(@provider, secrets: Array(secrets), max_body_bytes: max_body_bytes, **verifier_options)
      @bt_challenge = Verifier::PROVIDERS.dig(@provider, :challenge) == :braintree_get && @verifier.respond_to?(:braintree_challenge)
      @inbox = inbox || (database_url && Inbox.new(database_url: database_url)) or
        raise ConfigurationError, "give inbox: or database_url:"
      @keep_headers = takes_headers?(@inbox)
      rules = Ordering.new(@provider, ordering) # checked even for a store that cannot use it
      @ordering = rules if takes_keyword?(@inbox, :ordering)
      @trace_ok = takes_keyword?(@inbox, :trace) # the receipt span's context (Tracing) stored with the event
      @keep_refused = Refused.bounds(keep_refused)
      @endpoint = (endpoint || @provider).to_s.freeze
      @refused = refused
      # A scope built per request (scope: "shopify:#{params[:shop_id]}:live") is the
      # client's to grow: past the bound every delivery is refused (Rejections bounds how
      # such scopes are counted).
      @scope_too_long = @source_scope.bytesize > Inbox::MAX_TEXT_BYTES[:source_scope]
    end

    # Receives a Rack request (reads rack.input with the size limit).
    def call(env)
      finish do
        kind = media_kind(env["CONTENT_TYPE"])
        length = env["CONTENT_LENGTH"]&.to_s
        length = length.match?(DIGITS) ? length.to_i : nil if length
        next bt_challenge(env) if @bt_challenge && env["REQUEST_METHOD"] == "GET"

        early = precheck(env["REQUEST_METHOD"], kind, length)
        next early if early

        body = read_limited(env["rack.input"])
        next reject(413, :payload_too_large) if body.bytesize > @max_body_bytes

        deliver(body, env, kind == :form)
      end
    end

    # Receives a body already read (e.g. Rails' raw_post) with its Rack env for headers.
    def receive(body, env)
      finish do
        next bt_challenge(env) if @bt_challenge && env["REQUEST_METHOD"] == "GET"

        kind = media_kind(env["CONTENT_TYPE"])
        precheck(env["REQUEST_METHOD"] || "POST", kind, body.bytesize) || deliver(body, env, kind == :form)
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

    # Verifies a kept refused delivery again (Refused::Reverify) with the signed timestamp
    # checked against received_at, and stores it as #call would have then. Returns the Result
    # (200: stored or a duplicate; 401/400: still refused; 503: the inbox is unavailable).
    # Neither counted as a rejection nor kept again.
    def reverify(body, env, received_at:)
      deliver(body.b, env, media_kind(env["CONTENT_TYPE"]) == :form, received_at, keep: false)
    end

    def inspect
      "#<#{self.class} provider=#{@provider} source_scope=#{@source_scope.inspect} max_body_bytes=#{@max_body_bytes}>"
    end

    private

    # Braintree's URL check: GET ?bt_challenge=<hex> answered with Verifier#braintree_challenge
    # (a GET without one is the 405 of any GET). The query is bounded; the challenge is never
    # stored or logged.
    def bt_challenge(env)
      query = env["QUERY_STRING"].to_s
      return reject(400, :malformed_payload) if query.bytesize > MAX_CHALLENGE_QUERY

      values = URI.decode_www_form(query).filter_map { |k, v| v if k == "bt_challenge" }
      return precheck("GET", nil, nil) if values.empty?
      return reject(400, :malformed_payload) unless values.size == 1

      answer = @verifier.braintree_challenge(values[0])
      Result.new(http_status: 200, status: :challenge, event: Event.new(@provider, nil, nil, nil, nil, nil, answer),
                 headers: { "Content-Type" => "text/plain" })
    rescue ArgumentError # not a form-encoded query
      reject(400, :malformed_payload)
    rescue VerificationError => e
      reject(e.reason == :no_secret ? 401 : 400, e.reason)
    end

    # kind: media_kind's answer; length: the declared or actual body size (nil: unknown).
    def precheck(method, kind, length)
      return reject(405, :method_not_allowed, "Allow" => "POST") unless method == "POST"
      return reject(415, :unsupported_media_type) unless kind
      return reject(413, :payload_too_large) if length && length > @max_body_bytes

      nil
    end

    # :json, :form (for a provider that posts forms) or nil (415).
    def media_kind(content_type)
      return :json if content_type == JSON_TYPE # the common case, without allocations

      media = content_type.to_s.split(";", 2).first.to_s.strip.downcase
      return :json if media == JSON_TYPE || (media.start_with?("application/") && media.end_with?("+json"))

      :form if @form_ok && media == FORM_TYPE
    end

    def deliver(body, env, form, now = Time.now, keep: @keep_refused)
      return reject(400, :empty_body) if body.empty?

      event = @verifier.verify(body, env, now: now)
      return Result.new(http_status: 200, status: :challenge, event: event) if event.challenge

      return deliver_items(event, env, form) if event.respond_to?(:items) && event.items

      event = bound_signed_id(event)
      too_long = oversized_key(event)
      return reject(400, too_long) if too_long

      # The stored payload is what the signature covers: the raw body, or (a signature over a
      # few fields only, Didit's X-Signature-Simple) the signed fields alone.
      payload = event.body_signed == false ? event.body : body
      receipt = @inbox.insert(**row(event, payload, form, kept_headers(env)))
      Result.new(http_status: 200, status: receipt.status, receipt: receipt, event: event)
    rescue VerificationError => e
      status = if e.reason == :payload_too_large then 413
               elsif UNAUTHORIZED.include?(e.reason) then 401
               elsif RETRYABLE.include?(e.reason) then 503
               else 400
               end
      keep_aside(body, env, e.reason, now) if keep && Refused::REASONS.include?(e.reason)
      reject(status, e.reason, (status == 503 ? { "Retry-After" => @retry_after } : nil))
    rescue StoreError => e
      Result.new(http_status: 503, status: :unavailable, reason: :store_unavailable,
                 headers: { "Retry-After" => @retry_after }, event: event, error: e.message)
    end

    # A delivery of several signed items (Adyen): each item is its own event, all stored in one
    # transaction (the store's insert_all; a store without it gets one insert per item, each
    # committed before the answer), answered 200 only once every one is stored. One item with
    # an oversized key refuses the delivery. Errors are deliver's.
    def deliver_items(event, env, form)
      items = event.items.map { |item| bound_signed_id(item) }
      too_long = items.lazy.filter_map { |item| oversized_key(item) }.first
      return reject(400, too_long) if too_long

      headers = kept_headers(env)
      rows = items.map { |item| row(item, item.body, form, headers) }
      receipts = @inbox.respond_to?(:insert_all) ? @inbox.insert_all(rows) : rows.map { |row| @inbox.insert(**row) }
      event = event.dup.tap { |e| e.items = items.freeze } if items.each_with_index.any? { |item, i| !item.equal?(event.items[i]) }
      Result.new(http_status: 200, status: receipts.any? { |r| r.status == :accepted } ? :accepted : :duplicate, receipt: receipts.first,
                 receipts: receipts, event: event)
    end

    # { headers: the delivery's headers as kept } when this receiver keeps them, else NO_HEADERS.
    def kept_headers(env) = @keep_headers ? { headers: RequestHeaders.from_env(env) } : NO_HEADERS

    # The insert's arguments for one event: the same for a delivery and for each of its items.
    def row(event, payload, form, headers)
      row = { source_scope: @source_scope, event_id: event.event_id, event_type: event.event_type.to_s,
              payload: payload, raw: form, **headers }
      row[:ordering] = @ordering.for(event.event_type) if @ordering
      row[:trace] = Tracing.traceparent if @trace_ok && Tracing.on?
      row
    end

    # An event id past Inbox::MAX_TEXT_BYTES that the signature covers is stored (and seen by
    # the app, Event#event_id) as "sha256:" + the lowercase hex SHA-256 of its bytes (71 bytes;
    # Inbox.stored_event_id, the rule the sidecar's reconcile shares: ext/webhook_inbox/event_id.h):
    # the provider's retries of it are then duplicates, not lost events. An id no signature
    # covers stays refused (oversized_key): anyone could mint those. Another verifier:
    # answering id_signed? true opts in. Returns the event to store (a copy when changed).
    def bound_signed_id(event)
      id = event.event_id
      return event if id.bytesize <= Inbox::MAX_TEXT_BYTES[:event_id]
      return event unless @verifier.respond_to?(:id_signed?) && @verifier.id_signed?

      event.dup.tap { |e| e.event_id = Inbox.stored_event_id(id) }
    end

    # The rejection reason for a key field past Inbox::MAX_TEXT_BYTES, or nil: checked before
    # the insert, so one oversized id (unsigned, from a header, for some providers) is a 400
    # for its own request and never reaches a batch shared with other deliveries.
    def oversized_key(event)
      return :source_scope_too_long if @scope_too_long
      return :event_id_too_long if event.event_id.bytesize > Inbox::MAX_TEXT_BYTES[:event_id]

      :event_type_too_long if event.event_type.to_s.bytesize > Inbox::MAX_TEXT_BYTES[:event_type]
    end

    def keep_aside(body, env, reason, now)
      (@refused || WebhookInbox.refused).keep(endpoint: @endpoint, source_scope: @source_scope, provider: @provider,
                                              reason: reason, body: body, env: env, received_at: now,
                                              bounds: @keep_refused)
    end

    # A store written against an earlier Inbox#insert (no headers:, no ordering:) keeps
    # working without them.
    def takes_headers?(store) = takes_keyword?(store, :headers)

    def takes_keyword?(store, keyword)
      store.method(:insert).parameters.any? { |kind, name| kind == :keyrest || (kind.to_s.start_with?("key") && name == keyword) }
    rescue NameError
      false
    end

    def reject(http_status, reason, headers = nil)
      Result.new(http_status: http_status, status: :rejected, reason: reason, headers: headers)
    end

    def finish(&block)
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC) if @logger
      result = Tracing.on? ? traced(&block) : yield
      WebhookInbox.rejections.add(@source_scope, result.reason) if result.status == :rejected
      log(result, t0) if @logger
      instrument(result) if notifying?
      result
    end

    # Runs the receipt in a webhook_inbox.receive span (Tracing): row() stores its context with
    # the event; the outcome's attributes are set once it is known.
    def traced
      Tracing.receive("webhook_inbox.provider" => @provider.to_s, "webhook_inbox.source_scope" => @source_scope) do |span|
        result = yield
        attrs = { "webhook_inbox.result" => result.status.to_s, "http.response.status_code" => result.http_status }
        attrs["webhook_inbox.reason"] = result.reason.to_s if result.reason
        if (event = result.event) && event.event_id
          attrs["webhook_inbox.event_id"] = event.event_id.to_s
          attrs["webhook_inbox.event_type"] = event.event_type.to_s
        end
        attrs["webhook_inbox.items"] = result.receipts.size if result.receipts
        span.add_attributes(attrs)
        span.status = ::OpenTelemetry::Trace::Status.error(result.reason.to_s) if result.http_status >= 500
        result
      end
    end

    def log(result, t0)
      error = result.http_status >= 500
      return if @log_levels && !(error ? @logger.error? : @logger.info?)

      ms = ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000).round(2)
      line = +"webhook_inbox provider=#{@provider} scope=#{@source_scope} event_id=#{result.event&.event_id || '-'} " \
              "status=#{result.status} http=#{result.http_status} ms=#{ms}"
      line << " items=#{result.receipts.size}" if result.receipts
      line << " reason=#{result.reason}" if result.reason
      line << " quarantined=true" if result.receipt&.quarantined
      line << " error=#{result.error.inspect}" if result.error
      error ? @logger.error(line) : @logger.info(line)
    end

    # Builds the notification payload only when someone subscribed.
    def notifying?
      defined?(ActiveSupport::Notifications) && ActiveSupport::Notifications.notifier.listening?(NOTIFICATION)
    end

    def instrument(result)
      ActiveSupport::Notifications.instrument(
        NOTIFICATION,
        provider: @provider, scope: @source_scope, event_id: result.event&.event_id,
        status: result.status, http_status: result.http_status, reason: result.reason,
        quarantined: result.receipt&.quarantined || false
      )
    end
  end
end
