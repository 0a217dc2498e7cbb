# frozen_string_literal: true

module WebhookInbox
  # Instrumentation - what the Ruby side publishes where a Rails team already looks:
  # ActiveSupport::Notifications events (their payload keys are KEYS, a contract: documented in
  # docs/operations.md, checked by the specs of each publisher) and reports to
  # Rails.error (Rails 7.0+). Outside Rails, or without a subscriber, each is a no-op. Payloads
  # carry ids, names, counts and the stored error text only: never an event's payload,
  # headers or a secret.
  module Instrumentation
    SOURCE = "webhook_inbox" # Rails.error's source:, for trackers to group and filter on
    KEYS = {
      "run.webhook_inbox" => %i[provider scope event_id event_type handler attempt outcome],
      "handle.webhook_inbox" => %i[provider scope event_id event_type handler attempt outcome duration_ms error_class],
      "quarantine.webhook_inbox" => %i[provider scope event_id event_type handler attempt error],
      "effect.webhook_inbox" => %i[provider scope event_id effect_key destination job_class attempt outcome duration_ms error_class],
      "recover.webhook_inbox" => %i[provider scope event_id event_type how],
      "requeue.webhook_inbox" => %i[kind filter moved action_id actor],
      "reverify.webhook_inbox" => %i[endpoint admitted still_refused expired action_id actor],
      "pause.webhook_inbox" => %i[kind target held action_id actor],
      "resume.webhook_inbox" => %i[kind target rate released action_id actor]
    }.freeze

    module_function

    # Publishes name with payload (exactly KEYS[name]) around the block, when something
    # subscribed to it; returns the block's value (nil without one). payload may be a
    # lambda taking the block's value, for payloads known only once it ran.
    def instrument(name, payload = nil)
      keys = KEYS.fetch(name)
      return block_given? ? yield : nil unless listening?(name)

      ActiveSupport::Notifications.instrument(name, {}) do |p|
        value = yield if block_given?
        given = payload.respond_to?(:call) ? payload.call(value) : payload
        p.merge!(keys.to_h { |k| [k, given.fetch(k)] })
        value
      end
    end

    def listening?(name)
      defined?(::ActiveSupport::Notifications) && ::ActiveSupport::Notifications.notifier.listening?(name)
    end

    # Rails.error.report(error, ...) with source webhook_inbox (Rails 7.1+; 7.0 takes no
    # source:, its context says it); nothing outside Rails or before 7.0 (no Rails.error).
    # ErrorReporter itself rescues and logs a subscriber's own failure.
    def report_error(error, handled:, severity:, context:)
      reporter = error_reporter or return

      if reporter.method(:report).parameters.include?(%i[key source])
        reporter.report(error, handled: handled, severity: severity, context: context, source: SOURCE)
      else
        reporter.report(error, handled: handled, severity: severity, context: context.merge(source: SOURCE))
      end
    end

    def error_reporter
      return nil unless defined?(::Rails) && ::Rails.respond_to?(:error)

      ::Rails.error
    end

    # One line through logger (Rails.logger by default; nil: none) at level, tagged with tags
    # where the logger takes tags (ActiveSupport::TaggedLogging).
    def log(level, line, tags:, logger: rails_logger)
      return unless logger

      if logger.respond_to?(:tagged)
        logger.tagged(*tags) { logger.public_send(level, line) }
      else
        logger.public_send(level, line)
      end
    end

    def rails_logger = defined?(::Rails) && ::Rails.respond_to?(:logger) ? ::Rails.logger : nil

    # The provider part of a scope ("stripe:acct_1:live" -> "stripe"): by convention a scope
    # starts with its provider; the inbox stores no provider column.
    def provider_of(scope) = scope.to_s.split(":", 2).first
  end
end
