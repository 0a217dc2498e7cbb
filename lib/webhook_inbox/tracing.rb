# frozen_string_literal: true

module WebhookInbox
  # Tracing - the receipt's OpenTelemetry span (webhook_inbox.receive) and the W3C trace
  # context the receipt stores with its event (trace_context, schema v30), which the sidecar
  # and the Ruby worker continue (docs/operations.md, "Traces").
  # The gem depends on no OpenTelemetry gem: it uses the API only when the app has loaded it
  # (opentelemetry-api, usually through opentelemetry-sdk); otherwise every method here is a
  # constant check that allocates nothing. Span attributes name the provider, scope, event
  # type, event id and outcome, never a payload, a header or a secret.
  module Tracing
    TRACEPARENT_BYTES = 55 # "00-" 32 hex "-" 16 hex "-" 2 hex
    RECEIVE = "webhook_inbox.receive"
    HANDLE = "webhook_inbox.handle"
    EFFECT = "webhook_inbox.effect"

    # Whether the outbox has trace_context (schema v30): callers ask once and keep the answer.
    OUTBOX_COLUMN_SQL = "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('webhook_inbox_outbox') " \
                        "AND attname = 'trace_context' AND NOT attisdropped"

    module_function

    # true when an ActiveRecord connection's outbox has trace_context (schema v30).
    def outbox_column?(connection) = connection.select_value(OUTBOX_COLUMN_SQL, "webhook_inbox traced") == 1

    # true when the app loaded the OpenTelemetry API (spans go to its SDK, or nowhere).
    def on?
      defined?(::OpenTelemetry::Trace) && ::OpenTelemetry.respond_to?(:tracer_provider) ? true : false
    end

    def tracer
      ::OpenTelemetry.tracer_provider.tracer("webhook_inbox", WebhookInbox::VERSION)
    end

    # Yields the receipt span: kind internal under a span the app already has (its Rack
    # instrumentation's), server otherwise. A traceparent sent by the webhook's sender is not
    # followed here (anyone can send one); an app that trusts it propagates it itself.
    def receive(attributes, &block)
      kind = ::OpenTelemetry::Trace.current_span.context.valid? ? :internal : :server
      tracer.in_span(RECEIVE, attributes: attributes, kind: kind, &block)
    end

    # The current span's context as a version-00 traceparent, or nil when tracing is off or
    # there is no valid span (the API without an SDK).
    def traceparent
      return nil unless on?

      c = ::OpenTelemetry::Trace.current_span.context
      return nil unless c.valid?

      "00-#{c.hex_trace_id}-#{c.hex_span_id}-#{c.trace_flags.sampled? ? '01' : '00'}"
    end

    # The context stored as trace_context (a traceparent) as a parent for a span, or nil when
    # tracing is off or the text is not one.
    def parent_context(traceparent)
      return nil unless on? && traceparent.is_a?(String) && traceparent.bytesize == TRACEPARENT_BYTES

      tp = ::OpenTelemetry::Trace::Propagation::TraceContext::TraceParent.from_string(traceparent)
      span_context = ::OpenTelemetry::Trace::SpanContext.new(trace_id: tp.trace_id, span_id: tp.span_id,
                                                             trace_flags: tp.flags, remote: true)
      ::OpenTelemetry::Trace.context_with_span(::OpenTelemetry::Trace.non_recording_span(span_context))
    rescue StandardError # a malformed context: the span starts a trace of its own
      nil
    end

    # Runs the block in span name (kind internal), the child of the stored traceparent when
    # there is one; yields the span, or nil when tracing is off.
    def continue(name, traceparent, attributes)
      return yield(nil) unless on?

      parent = parent_context(traceparent)
      run = proc { tracer.in_span(name, attributes: attributes, kind: :internal) { |span| yield span } }
      parent ? ::OpenTelemetry::Context.with_current(parent, &run) : run.call
    end
  end
end
