# frozen_string_literal: true

require "json"

module WebhookInbox
  # Rejections - counts of rejected deliveries (401 signature and timestamp failures, 400, 413,
  # 415) per endpoint scope and reason, so a wrong or rotated secret shows on the dashboard
  # before the provider gives up on the endpoint. Never a body, header or address.
  #
  # A rejection costs the request one mutex and one Hash increment: nothing is written per
  # request, so a flood of forged deliveries cannot turn into a flood of database writes.
  # When a flusher is set (the Railtie sets one on ActiveRecord), a background thread hands
  # the counts gathered since the last flush to it at most every flush_interval seconds:
  # one statement (webhook_inbox_record_rejections) per flush, whatever the request rate. A
  # failed flush keeps the counts for the next one. At most MAX_KEYS (scope, reason, minute)
  # keys wait between flushes; beyond that rejections are only counted in #dropped.
  #
  #   WebhookInbox.rejections.totals   # {["stripe:acct_1:live", :signature_mismatch] => 12, ...} since boot
  class Rejections
    MAX_KEYS = 10_000
    # 405 is what crawlers and health checks get: not a sign of a misconfigured secret.
    IGNORED = %i[method_not_allowed].freeze

    attr_accessor :flusher, :flush_interval
    attr_reader :dropped

    # flusher: ->(rows) where rows = [[scope, reason, minute Time, count], ...]; nil counts only.
    def initialize(flusher: nil, flush_interval: 5)
      @flusher = flusher
      @flush_interval = flush_interval
      @mutex = Mutex.new
      @pending = {}
      @totals = Hash.new(0)
      @dropped = 0
      @thread = nil
      @pid = Process.pid
    end

    # Counts one rejection. Cheap; never raises into the request.
    def add(scope, reason, now: Time.now)
      return if IGNORED.include?(reason)

      minute = Time.at(now.to_i - (now.to_i % 60)).utc
      @mutex.synchronize do
        key = [scope, reason.to_s, minute]
        @totals[[scope, reason]] += 1
        if @pending.key?(key) || @pending.size < MAX_KEYS
          @pending[key] = @pending.fetch(key, 0) + 1
        else
          @dropped += 1
        end
      end
      start_thread if @flusher
    end

    # Rejections counted by this process since it started, by [scope, reason].
    def totals
      @mutex.synchronize { @totals.dup }
    end

    # Hands the waiting counts to the flusher now. Returns the rows flushed (0 on failure:
    # they stay for the next flush).
    def flush
      rows = @mutex.synchronize do
        taken = @pending
        @pending = {}
        taken
      end
      return 0 if rows.empty? || !@flusher

      @flusher.call(rows.map { |(scope, reason, minute), n| [scope, reason, minute, n] })
      rows.size
    rescue StandardError
      @mutex.synchronize { rows.each { |k, n| @pending[k] = @pending.fetch(k, 0) + n if @pending.size < MAX_KEYS } }
      0
    end

    # The flusher for an ActiveRecord connection pool: one call of webhook_inbox_record_rejections.
    def self.active_record_flusher(pool_source = -> { ::ActiveRecord::Base.connection_pool })
      lambda do |rows|
        json = JSON.generate(rows.map { |s, r, m, n| [s, r, m.iso8601, n] })
        pool_source.call.with_connection do |c|
          c.exec_query("SELECT webhook_inbox_record_rejections($1::jsonb)", "WebhookInbox rejections", [json])
        end
      end
    end

    private

    # One flushing thread per process (started again in a forked child).
    def start_thread
      return if @thread&.alive? && @pid == Process.pid

      @mutex.synchronize do
        return if @thread&.alive? && @pid == Process.pid

        @pid = Process.pid
        @thread = Thread.new do
          Thread.current.name = "webhook_inbox-rejections"
          loop do
            sleep @flush_interval
            flush
          end
        end
      end
    end
  end

  class << self
    # The process's rejection counters (see Rejections).
    def rejections
      @rejections ||= Rejections.new
    end
  end
end
