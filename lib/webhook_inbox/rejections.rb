# frozen_string_literal: true

require "json"
require "time"
require_relative "per_process_thread"

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
  # Scopes can come from the request (scope: "shopify:#{params[:shop_id]}:live"), so a process
  # names at most max_scopes of them (default MAX_SCOPES), the first it sees, each at most
  # MAX_SCOPE_BYTES of UTF-8: every other scope is counted as OTHER_SCOPE, in #totals and in what
  # is flushed. Memory, each flush and the dashboard stay bounded whatever the client sends,
  # and the totals still add up (a restart forgets the names).
  #
  #   WebhookInbox.rejections.totals   # {["stripe:acct_1:live", :signature_mismatch] => 12, ...} since boot
  #   WebhookInbox.rejections.max_scopes = 5_000   # a multi-tenant app with more endpoints
  class Rejections
    include PerProcessThread

    MAX_KEYS = 10_000
    MAX_SCOPES = 1_000
    MAX_SCOPE_BYTES = 200
    OTHER_SCOPE = "(other)"
    # 405 is what crawlers and health checks get: not a sign of a misconfigured secret.
    IGNORED = %i[method_not_allowed].freeze

    attr_accessor :flusher, :flush_interval, :max_scopes
    attr_reader :dropped

    # flusher: ->(rows) where rows = [[scope, reason, minute Time, count], ...]; nil counts only.
    def initialize(flusher: nil, flush_interval: 5, max_scopes: MAX_SCOPES)
      @flusher = flusher
      @flush_interval = flush_interval
      @max_scopes = max_scopes
      @mutex = Mutex.new
      @scopes = {}
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
      start_thread if @flusher # first: in a forked child it drops the parent's counts
      @mutex.synchronize do
        scope = named(scope)
        key = [scope, reason.to_s, minute]
        @totals[[scope, reason]] += 1
        if @pending.key?(key) || @pending.size < MAX_KEYS
          @pending[key] = @pending.fetch(key, 0) + 1
        else
          @dropped += 1
        end
      end
    end

    # Rejections counted by this process since it started, by [scope, reason].
    def totals
      @mutex.synchronize { @totals.dup }
    end

    # The limit largest of #totals, largest first (ties: first counted first), for a page:
    # [[[scope, reason], count], ...].
    def largest(limit)
      @mutex.synchronize { @totals.sort_by.with_index { |(_, n), i| [-n, i] }.first(limit) }
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

    # The scope as counted (under the mutex): its own name if this process names it already,
    # or names fewer than max_scopes and it is short UTF-8 text without NUL (what the flush's
    # jsonb and the table's key accept: one bad name would fail every flush); else OTHER_SCOPE.
    def named(scope)
      scope = scope.to_s
      @scopes.fetch(scope) do
        name = scope.dup.force_encoding(Encoding::UTF_8).freeze # a copy: the caller may change its string
        next OTHER_SCOPE if @scopes.size >= @max_scopes.to_i || name.bytesize > MAX_SCOPE_BYTES ||
                            !name.valid_encoding? || name.include?("\0")

        @scopes[scope] = name
      end
    end

    # One flushing thread per process (PerProcessThread).
    def start_thread
      start_per_process_thread("webhook_inbox-rejections") do
        sleep @flush_interval
        flush
      end
    end

    # In a forked child: the counts waiting to be flushed are the parent's to flush.
    def forget_inherited
      @pending.clear
    end
  end

  class << self
    # The process's rejection counters (see Rejections).
    def rejections
      @rejections ||= Rejections.new
    end
  end
end
