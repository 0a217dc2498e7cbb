# frozen_string_literal: true

module WebhookInbox
  # WebhookInbox::Metrics - counters of the receiving side, fed by the receiver's
  # ActiveSupport::Notifications event "receive.webhook_inbox": deliveries by provider, status
  # (accepted, duplicate, rejected, unavailable) and reason (why a delivery was rejected or
  # unavailable, e.g. signature_mismatch; "none" for accepted and duplicate). Rendered as
  # Prometheus text by .to_prometheus for an app route, or mapped by .labels for
  # prometheus_exporter / yabeda. No Rails dependency; thread-safe; labels bounded (at most
  # MAX_VALUES providers and reasons each, then "other"). Never the scope (it can name a
  # tenant), event ids or payloads.
  #
  #   WebhookInbox::Metrics.install          # once, e.g. in an initializer
  #   WebhookInbox::Metrics.to_prometheus    # => "# HELP webhook_inbox_received_total ..."
  #
  # The counts are per process: with several processes (Puma workers) serve them through an
  # exporter that aggregates (prometheus_exporter, yabeda), not from one process's route.
  module Metrics
    NOTIFICATION = "receive.webhook_inbox"
    NAME = "webhook_inbox_received_total"
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
    STATUSES = %w[accepted duplicate rejected unavailable].freeze
    MAX_VALUES = 50
    VALUE = /\A[A-Za-z0-9_.:-]{1,64}\z/.freeze

    @mutex = Mutex.new
    @counts = Hash.new(0)                      # [provider, status, reason] => Integer
    @seen = { provider: {}, reason: {} }       # label values admitted so far
    @subscriber = nil

    class << self
      # Subscribes to receive.webhook_inbox (idempotent). Returns self. Raises LoadError when
      # ActiveSupport is not available.
      def install
        require "active_support/notifications"
        @mutex.synchronize do
          @subscriber ||= ActiveSupport::Notifications.subscribe(NOTIFICATION) do |*, payload|
            record(payload)
          end
        end
        self
      end

      def installed?
        !@subscriber.nil?
      end

      # Unsubscribes (the counts are kept).
      def uninstall
        @mutex.synchronize do
          ActiveSupport::Notifications.unsubscribe(@subscriber) if @subscriber
          @subscriber = nil
        end
      end

      # Counts one delivery from a receive.webhook_inbox payload (provider:, status:, reason:).
      def record(payload)
        key = labels(payload).values_at(:provider, :status, :reason)
        @mutex.synchronize { @counts[key] += 1 }
        nil
      end

      # The bounded label values for one payload: { provider:, status:, reason: } as Strings,
      # for prometheus_exporter or yabeda (see docs/operations.md). Unknown or excess values are "other".
      def labels(payload)
        status = payload[:status].to_s
        status = "other" unless STATUSES.include?(status)
        reason = %w[rejected unavailable].include?(status) ? payload[:reason] : nil
        { provider: bounded(:provider, payload[:provider]), status: status,
          reason: reason.nil? ? "none" : bounded(:reason, reason) }
      end

      # { [provider, status, reason] => count } (a copy).
      def snapshot
        @mutex.synchronize { @counts.dup }
      end

      # Forgets every count and label value (tests).
      def reset!
        @mutex.synchronize do
          @counts.clear
          @seen.each_value(&:clear)
        end
      end

      # The counts in Prometheus text format 0.0.4 (HELP and TYPE even when there are none).
      def to_prometheus
        out = +"# HELP #{NAME} Webhook deliveries received by this process, by provider, status (accepted, " \
               "duplicate, rejected, unavailable) and reason (rejected and unavailable only, else none)\n" \
               "# TYPE #{NAME} counter\n"
        snapshot.sort.each do |(provider, status, reason), n|
          out << "#{NAME}{provider=\"#{escape(provider)}\",status=\"#{escape(status)}\",reason=\"#{escape(reason)}\"} #{n}\n"
        end
        out
      end

      private

      def bounded(kind, value)
        v = value.to_s
        return "other" unless v.match?(VALUE)

        @mutex.synchronize do
          seen = @seen.fetch(kind)
          return v if seen.key?(v)
          return "other" if seen.size >= MAX_VALUES

          seen[v] = true
        end
        v
      end

      def escape(value)
        value.gsub(/[\\"\n]/, "\\" => "\\\\", '"' => '\\"', "\n" => "\\n")
      end
    end
  end
end
