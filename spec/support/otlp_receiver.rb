# frozen_string_literal: true

require "webrick"
require "json"
require "zlib"

# OtlpReceiver - a local OTLP/HTTP trace receiver (POST /v1/traces) for the trace specs: takes
# the OpenTelemetry Ruby SDK's protobuf (decoded with the google-protobuf classes that
# opentelemetry-exporter-otlp ships; only those are loaded, never the OpenTelemetry API, so
# this process traces nothing itself) and the sidecar's JSON. #spans: every span received, as
# { service:, name:, kind:, trace_id:, span_id:, parent_id:, attributes: {key => value} } with
# hex ids. hang: true accepts requests and never answers (an exporter's full queue).
class OtlpReceiver
  attr_reader :requests

  def initialize(hang: false)
    @spans = []
    @requests = []
    @lock = Mutex.new
    @hang = hang
    @release = Queue.new # a hanging handler waits on it until #stop
    @server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, Logger: WEBrick::Log.new(File::NULL), AccessLog: [])
    @server.mount_proc("/v1/traces") { |req, res| receive(req, res) }
    @thread = Thread.new { @server.start }
  end

  def url = "http://127.0.0.1:#{@server.config[:Port]}"

  def spans = @lock.synchronize { @spans.dup }

  # Lets a hanging handler answer, stops the server, and ends WEBrick's timeout watcher: left
  # watching a request that never finished, it deadlocked Ruby's exit (the process printed its
  # summary and never exited).
  def stop
    @release.close
    @server.shutdown
    @thread.join(5)
    WEBrick::Utils::TimeoutHandler.terminate
  end

  private

  def receive(req, res)
    @release.pop if @hang # until #stop (closed: nil)
    @lock.synchronize { @requests << req.content_type.to_s }
    body = req["Content-Encoding"] == "gzip" ? Zlib.gunzip(req.body) : req.body # the Ruby SDK's default
    got = req.content_type.to_s.start_with?("application/json") ? from_json(JSON.parse(body)) : from_protobuf(body)
    @lock.synchronize { @spans.concat(got) }
    res.status = 200
    res["Content-Type"] = req.content_type
    res.body = req.content_type.to_s.start_with?("application/json") ? "{}" : ""
  end

  def from_json(doc)
    doc.fetch("resourceSpans").flat_map do |rs|
      service = rs.dig("resource", "attributes").find { |a| a["key"] == "service.name" }&.dig("value", "stringValue")
      rs.fetch("scopeSpans").flat_map do |ss|
        ss.fetch("spans").map do |s|
          { service: service, name: s["name"], kind: s["kind"], trace_id: s["traceId"], span_id: s["spanId"],
            parent_id: s["parentSpanId"].to_s, start: Integer(s["startTimeUnixNano"]), end: Integer(s["endTimeUnixNano"]),
            attributes: s["attributes"].to_h { |a| [a["key"], a["value"].values.first] } }
        end
      end
    end
  end

  def from_protobuf(body)
    require "opentelemetry/proto/collector/trace/v1/trace_service_pb"
    request = Opentelemetry::Proto::Collector::Trace::V1::ExportTraceServiceRequest.decode(body)
    request.resource_spans.flat_map do |rs|
      service = rs.resource.attributes.find { |a| a.key == "service.name" }&.value&.string_value
      rs.scope_spans.flat_map do |ss|
        ss.spans.map do |s|
          { service: service, name: s.name, kind: s.kind.to_s.sub("SPAN_KIND_", "").downcase, trace_id: s.trace_id.unpack1("H*"),
            span_id: s.span_id.unpack1("H*"), parent_id: s.parent_span_id.unpack1("H*"), start: s.start_time_unix_nano,
            end: s.end_time_unix_nano, attributes: s.attributes.to_h { |a| [a.key, value(a.value)] } }
        end
      end
    end
  end

  def value(v)
    case v.value
    when :string_value then v.string_value
    when :int_value then v.int_value.to_s
    when :bool_value then v.bool_value.to_s
    when :double_value then v.double_value.to_s
    else v.to_s
    end
  end
end
