# frozen_string_literal: true

require "json"
require "time"
require_relative "per_process_thread"
require_relative "schema"

module WebhookInbox
  # Refused - deliveries an endpoint answered 401 for a signature or secret mismatch (or 503
  # for a PayPal certificate it could not fetch), kept aside (webhook_inbox_refused, never
  # webhook_inbox: nothing kept is processed) when the endpoint says keep_refused: true, so a
  # wrong or rotated secret costs no events: after the fix, Refused::Reverify verifies them
  # again and stores the ones that now verify.
  #
  #   c.endpoint(:stripe, secrets: [...], scope: "stripe:acct_1:live", keep_refused: true)
  #   c.endpoint(:github, secrets: [...], scope: "github:org:live",
  #              keep_refused: { count: 5_000, bytes: 64 * 1024 * 1024, age: 3 * 86_400 })
  #
  # Kept: REASONS only. A missing or malformed signature can verify under no secret, and a
  # timestamp refused at receipt (stale, missing, malformed) is refused again by reverify,
  # which checks it against the receipt time: keeping those would store only what a client
  # sends to fill the table. certificate_unavailable (a :paypal endpoint with
  # fetch_certificates: could not fetch the certificate; answered 503) is kept as itself on a
  # schema at v20 or later (db/020 allows it), as unknown_key on an older one
  # (OLDER_SCHEMA_REASONS: the gem works on either; the version is read once per process
  # when it is current, else before each batch).
  #
  # Bounds, per endpoint (DEFAULT_BOUNDS, or keep_refused: { count:, bytes:, age: seconds }):
  # rows older than age go; past count or bytes new deliveries are not kept (the oldest are
  # the ones a provider gives up retrying first, and a flood of forged deliveries cannot push
  # out the real ones kept before it; the newer ones are still being retried by the provider).
  #
  # The 401 costs the request one mutex and an Array push: nothing is written per request.
  # A background thread hands what waits to the database (one statement,
  # webhook_inbox_keep_refused, per batch, enforcing the bounds under a lock per endpoint).
  # At most MAX_QUEUED rows / MAX_QUEUED_BYTES of bodies are held per process
  # (MAX_QUEUED_PER_ENDPOINT of one endpoint), the batch being written included: a database
  # that is stuck holds no more than that, plus the statement text of one batch of at most
  # FLUSH_BYTES of bodies (hex, about twice that). An endpoint the database found full is not
  # queued for full_pause (FULL_PAUSE) seconds; what is not kept is counted in #dropped.
  # A process that dies loses what waits (the sender got its 401 either way).
  #
  # A JWT-signed provider's token (:vonage's Authorization, :plaid's Plaid-Verification) is a
  # credential by its looks, so request_headers never holds it (RequestHeaders); reverify
  # cannot admit such a delivery without it. Its signature header is kept in the row's
  # request_env instead (JWT_SIGNATURE_HEADERS), which nothing shows: the dashboard reads
  # request_headers only, admission goes through RequestHeaders again, and the row - the
  # token with it - is deleted on admission or past the age bound.
  #
  # exec: ->(sql, params) { rows as Hashes of Strings } runs one statement: KEEP_SQL, or
  # Schema::VERSION_SQL (the Railtie sets Refused.active_record_exec outside the test
  # environment; without exec nothing is kept, only counted in #dropped).
  class Refused
    include PerProcessThread

    REASONS = %i[signature_mismatch no_secret unknown_key certificate_unavailable].freeze
    # A reason a schema before version allows is kept as the older reason there:
    # reason => [version, older reason].
    OLDER_SCHEMA_REASONS = { "certificate_unavailable" => [20, "unknown_key"].freeze }.freeze
    NEWEST_REASON_SCHEMA = OLDER_SCHEMA_REASONS.values.map(&:first).max
    DEFAULT_BOUNDS = { count: 1_000, bytes: 16 * 1024 * 1024, age: 7 * 86_400 }.freeze
    MAX_QUEUED = 200
    MAX_QUEUED_PER_ENDPOINT = 100 # a flood on one endpoint leaves room for the others
    MAX_QUEUED_BYTES = 8 * 1024 * 1024
    FLUSH_BYTES = 1024 * 1024 # bodies per statement (one larger row goes alone)
    FULL_PAUSE = 10
    # What a URL-signed provider's signature covers besides the headers (Verifier#request_url).
    ENV_KEYS = %w[REQUEST_METHOD rack.url_scheme SERVER_NAME SERVER_PORT SCRIPT_NAME PATH_INFO QUERY_STRING].freeze
    # provider => the Rack env key of its signature header, for the JWT-signed providers.
    JWT_SIGNATURE_HEADERS = Verifier::PROVIDERS.values.select { |p| p[:jwt_claim] }.to_h do |p|
      [p[:name].to_s, "HTTP_#{p[:headers][p[:sig_slot]].upcase.tr("-", "_")}"]
    end.freeze
    KEEP_SQL = "SELECT endpoint, kept, full_count FROM webhook_inbox_keep_refused($1::jsonb)"

    # Queued row; body and headers are the request's (headers: RequestHeaders.from_env's text).
    Row = Struct.new(:endpoint, :source_scope, :provider, :reason, :body, :headers, :env, :received_at, :bounds)

    attr_accessor :exec, :flush_interval, :full_pause
    attr_reader :dropped, :kept

    # The bounds an endpoint option means: nil (off: false, nil), DEFAULT_BOUNDS (true), or
    # a Hash merged over them. Raises ConfigurationError for anything else.
    def self.bounds(option)
      return nil if option.nil? || option == false
      return DEFAULT_BOUNDS if option == true
      raise ConfigurationError, "keep_refused must be true, false or a Hash of count:, bytes:, age:" unless option.is_a?(Hash)

      unknown = option.keys - DEFAULT_BOUNDS.keys
      raise ConfigurationError, "keep_refused: unknown bound #{unknown.first.inspect} (count:, bytes:, age:)" unless unknown.empty?

      DEFAULT_BOUNDS.merge(option).each do |k, v|
        raise ConfigurationError, "keep_refused #{k}: must be a positive Integer" unless v.is_a?(Integer) && v.positive?
      end.freeze
    end

    # exec for an ActiveRecord connection pool.
    def self.active_record_exec(pool_source = -> { ::ActiveRecord::Base.connection_pool })
      ->(sql, params) { pool_source.call.with_connection { |c| c.exec_query(sql, "WebhookInbox refused", params).to_a } }
    end

    def initialize(exec: nil, flush_interval: 1, full_pause: FULL_PAUSE)
      @exec = exec
      @flush_interval = flush_interval
      @full_pause = full_pause
      @mutex = Mutex.new
      @wake = ConditionVariable.new
      @queue = []
      @queued_bytes = 0 # bodies held: waiting and being written
      @queued_per = Hash.new(0)
      @held = 0 # rows held: waiting and being written
      @full_until = {}
      @dropped = 0
      @kept = 0
      @thread = nil
      @pid = Process.pid
    end

    # Queues one refused delivery (the receiver's hook). Returns true when queued. Cheap;
    # never raises into the request.
    def keep(endpoint:, source_scope:, provider:, reason:, body:, env:, received_at:, bounds:)
      return count_dropped unless @exec && room?(endpoint, body.bytesize)

      env_line = ENV_KEYS.each_with_object({}) { |k, h| h[k] = env[k].to_s if env[k] }
      token = JWT_SIGNATURE_HEADERS[provider.to_s]
      env_line[token] = env[token].to_s if token && env[token]
      row = Row.new(endpoint.to_s, source_scope, provider.to_s, reason.to_s, body, RequestHeaders.from_env(env),
                    env_line, received_at, bounds)
      start_thread # first: in a forked child it drops the parent's queue
      @mutex.synchronize do
        return count_dropped(locked: true) unless fits?(row.endpoint, body.bytesize)

        @queue << row
        @held += 1
        @queued_bytes += body.bytesize
        @queued_per[row.endpoint] += 1
        @wake.signal
      end
      true
    rescue StandardError
      count_dropped
    end

    # Hands what waits to the database now, in batches of at most FLUSH_BYTES of bodies.
    # Returns the rows written (kept or found full). A batch the database fails is dropped (a
    # database that refuses it would refuse it again) and the rest waits for the next flush.
    def flush
      written = 0
      until (rows = take_batch).empty?
        begin
          version = schema_version
          note(@exec.call(KEEP_SQL, [JSON.generate(rows.map { |r| to_json_row(r, version) })]))
          written += rows.size
        rescue StandardError
          @mutex.synchronize { @dropped += rows.size }
          break
        ensure
          release(rows)
        end
      end
      written
    end

    # Rows waiting for the next flush (diagnostics, tests).
    def queued
      @mutex.synchronize { @queue.size }
    end

    private

    # Takes the oldest waiting rows, up to FLUSH_BYTES of bodies (at least one row). They stay
    # counted against the bounds until release: a stuck write holds memory too.
    def take_batch
      @mutex.synchronize do
        bytes = 0
        count = @queue.index { |r| (bytes += r.body.bytesize) > FLUSH_BYTES } || @queue.size
        @queue.shift([count, 1].max)
      end
    end

    def release(rows)
      @mutex.synchronize do
        rows.each do |r|
          @queued_bytes -= r.body.bytesize
          @queued_per[r.endpoint] -= 1
        end
        @queued_per.delete_if { |_, n| n <= 0 }
        @held -= rows.size
      end
    end

    def room?(endpoint, bytes)
      @mutex.synchronize do
        pause = @full_until[endpoint.to_s]
        @full_until.delete(endpoint.to_s) if pause && pause <= monotonic
        (!pause || pause <= monotonic) && fits?(endpoint.to_s, bytes)
      end
    end

    # Whether a row of endpoint with bytes fits the in-memory bounds (under the mutex), the
    # batch being written included.
    def fits?(endpoint, bytes)
      @held < MAX_QUEUED && @queued_bytes + bytes <= MAX_QUEUED_BYTES && @queued_per[endpoint] < MAX_QUEUED_PER_ENDPOINT
    end

    def count_dropped(locked: false)
      locked ? @dropped += 1 : @mutex.synchronize { @dropped += 1 }
      false
    end

    # The database's schema version (webhook_inbox_schema_version(): there since v4, and the
    # table since v11): read again while older than NEWEST_REASON_SCHEMA (a migration may
    # bring it there), then kept.
    def schema_version
      return @schema_version if @schema_version && @schema_version >= NEWEST_REASON_SCHEMA

      @schema_version = Integer(@exec.call(Schema::VERSION_SQL, []).first.values.first)
    end

    # row.reason as the database at schema version can keep it.
    def stored_reason(reason, version)
      since, older = OLDER_SCHEMA_REASONS[reason]
      since && version < since ? older : reason
    end

    def to_json_row(row, version)
      { endpoint: row.endpoint, source_scope: row.source_scope, provider: row.provider,
        reason: stored_reason(row.reason, version),
        body: row.body.unpack1("H*"), request_headers: row.headers && JSON.parse(row.headers),
        request_env: row.env, received_at: row.received_at.utc.iso8601(6),
        max_count: row.bounds[:count], max_bytes: row.bounds[:bytes], max_age_s: row.bounds[:age] }
    end

    # Counts what was kept and pauses the endpoints the database found full.
    def note(answer)
      @mutex.synchronize do
        answer.each do |r|
          @kept += r["kept"].to_i
          full = r["full_count"].to_i
          @dropped += full
          @full_until[r["endpoint"]] = monotonic + @full_pause if full.positive?
        end
      end
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # One writing thread per process (PerProcessThread); it wakes when a row is queued and
    # writes at most every flush_interval seconds.
    def start_thread
      start_per_process_thread("webhook_inbox-refused") do
        @mutex.synchronize { @wake.wait(@mutex) while @queue.empty? }
        flush
        sleep @flush_interval
      end
    end

    # In a forked child: the queued deliveries are the parent's to write (kept twice otherwise).
    def forget_inherited
      @queue.clear
      @queued_bytes = 0
      @queued_per.clear
      @held = 0
    end
  end

  class << self
    # The process's keeper of refused deliveries (see Refused).
    def refused
      @refused ||= Refused.new
    end
  end
end
