# frozen_string_literal: true

# InMemorySpans - for a forked child only (Forked.call): loads the real OpenTelemetry SDK,
# configures it to keep finished spans in memory, and returns them as plain hashes (hex ids,
# attributes as a Hash) that Marshal carries back to the parent, which never loads the API.
module InMemorySpans
  # Configures the SDK; returns a lambda giving the finished spans so far.
  def self.configure
    require "logger"
    require "opentelemetry/sdk"
    exporter = OpenTelemetry::SDK::Trace::Export::InMemorySpanExporter.new
    OpenTelemetry::SDK.configure do |c|
      c.logger = Logger.new(File::NULL)
      c.add_span_processor(OpenTelemetry::SDK::Trace::Export::SimpleSpanProcessor.new(exporter))
    end
    lambda do
      exporter.finished_spans.map do |s|
        { name: s.name, kind: s.kind, trace: s.hex_trace_id, span: s.hex_span_id, parent: s.hex_parent_span_id,
          attrs: s.attributes.to_h }
      end
    end
  end
end
