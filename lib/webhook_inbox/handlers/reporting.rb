# frozen_string_literal: true

require_relative "../instrumentation"

module WebhookInbox
  module Handlers
    # Reporting - tells the app what became of one Ruby handler run, once its batch committed
    # (the Runner's on_result: a rolled-back batch reports nothing, its runs are due again and
    # report then): the handle.webhook_inbox notification (and quarantine.webhook_inbox for a
    # quarantine), Rails.error (a failed attempt that will be retried: handled, warning; a
    # quarantine, Permanent's or the last attempt's: unhandled, error; one report each) and one
    # line through Rails.logger tagged with the event id, type and attempt. Never the payload.
    module Reporting
      OUTCOMES = { "delivered" => "done", "pending" => "retry", "quarantined" => "quarantined" }.freeze

      # A failure that raised nothing in the handler (no such handler, ActiveRecord::Rollback,
      # a worker killed during the last attempt): what Rails.error gets, with the stored text.
      class Failure < Error; end

      module_function

      def outcome(result) = OUTCOMES.fetch(result.status.to_s, "skipped")

      # The run's log fields: handler=... event_id=... type=... outcome=... attempt=... duration_ms=... [error="..."]
      def fields(result)
        err = result.error ? %( error="#{result.error.lines.first.to_s.strip[0, 200].delete('"')}") : ""
        "handler=#{result.handler} event_id=#{result.event_id} type=#{result.event_type} outcome=#{outcome(result)} " \
          "attempt=#{result.attempt} duration_ms=#{result.duration_ms.round(1)}#{err}"
      end

      # Everything above for one committed Result. logger: Rails.logger by default (nil: none).
      def call(result, logger: Instrumentation.rails_logger)
        context = context(result)
        out = outcome(result)
        error = result.exception || (result.error && Failure.new(result.error))
        Instrumentation.instrument("handle.webhook_inbox",
                                   context.merge(outcome: out, duration_ms: result.duration_ms.round(3),
                                                 error_class: error&.class&.name))
        if out == "quarantined"
          Instrumentation.instrument("quarantine.webhook_inbox", context.merge(error: result.error))
          Instrumentation.report_error(error, handled: false, severity: :error, context: context)
        elsif out == "retry"
          Instrumentation.report_error(error, handled: true, severity: :warning, context: context)
        end
        log(logger, result, out)
      end

      # What a report or a notification says of the run (ids and names only).
      def context(result)
        { provider: Instrumentation.provider_of(result.source_scope), scope: result.source_scope,
          event_id: result.event_id, event_type: result.event_type, handler: result.handler, attempt: result.attempt }
      end

      def log(logger, result, out)
        level = { "retry" => :warn, "quarantined" => :error }.fetch(out, :info)
        tags = ["event_id=#{result.event_id}", "type=#{result.event_type}", "attempt=#{result.attempt}"]
        Instrumentation.log(level, "webhook_inbox event=handler #{fields(result)}", tags: tags, logger: logger)
      end
    end
  end
end
