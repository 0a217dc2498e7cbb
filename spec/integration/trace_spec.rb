# frozen_string_literal: true

require_relative "../sidecar/sidecar_helper"
require_relative "../support/receiver_helpers"
require_relative "../support/fake_receipt_api"
require_relative "../support/otlp_receiver"
require "webhook_inbox/testing"
require "net/http"

# Issue 31 item 1, end to end with real components: a Rack app under Puma with the real
# OpenTelemetry SDK (exporting OTLP protobuf), a real sidecar with --otlp-endpoint (exporting
# OTLP JSON), both to the local receiver here; an SQL handler that records an HTTP effect to a
# local destination. One trace: receive -> handle -> effect (the effect's parent is the handle
# span, whose id the dispatch and the sidecar derive alike; docs/operations.md, "Traces"), the effect's
# request carrying the effect span's traceparent, no payload or secret in any attribute. Also:
# a full export queue drops and counts without holding up the claim loop; tracing off changes
# nothing (no traceparent header, NULL contexts).
RSpec.describe "traces from receipt to effect", :sidecar do
  include SidecarHelper
  include ReceiverHelpers

  TRACE_SECRET = "whsec_trace_spec"
  PAYLOAD_MARK = "card_4242_SECRET_PAYLOAD"

  before(:all) do
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    @db.psql(<<~SQL)
      CREATE FUNCTION traced_receipt(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM webhook_inbox_emit('receipt:' || ev.event_id, 'receipts', jsonb_build_object('event', ev.event_id));
        RETURN 'receipt recorded';
      END $$;
      DELETE FROM webhook_inbox_routes WHERE event_type = 'invoice.paid';
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('invoice.paid', 'traced_receipt');
    SQL
    @api = FakeReceiptApi.new
    @otlp = OtlpReceiver.new
    @scope = "stripe:#{SecureRandom.hex(6)}:live"
    # started here, not in an example: after(:all) sees only what before(:all) set
    @puma = ReceiverHelpers.endpoint_puma(@db, scope: @scope, secret: TRACE_SECRET, threads: "1:2", pool: 1,
                                          env: { "WI_OTEL" => "1", "OTEL_EXPORTER_OTLP_ENDPOINT" => @otlp.url,
                                                 "OTEL_TRACES_EXPORTER" => "otlp", "OTEL_BSP_SCHEDULE_DELAY" => "100" })
  end

  after(:all) do
    @puma&.stop
    @api&.stop
    @otlp&.stop
  end

  after { kill_spawned }

  let(:db) { @db }

  def post_event(port, id)
    body = JSON.generate(id: id, type: "invoice.paid", data: { object: { id: "in_1", note: PAYLOAD_MARK } })
    headers = WebhookInbox::Testing::Signing.headers(:stripe, body, secret: TRACE_SECRET)
    Net::HTTP.start("127.0.0.1", port) do |h|
      h.post("/webhooks/stripe", body, headers.merge("Content-Type" => "application/json"))
    end
  end

  def run_once(*extra)
    run_once_against_db("--concurrency", "1", "--destination", "receipts=#{@api.url}/receipts", *extra)
  end

  it "follows one event from the HTTP request through the handler to the effect's HTTP call" do
    scope = @scope
    port = @puma.port
    expect(post_event(port, "evt_traced_1").code).to eq("200")
    stored = db.value("SELECT trace_context FROM webhook_inbox WHERE event_id = 'evt_traced_1'")
    expect(stored).to match(/\A00-\h{32}-\h{16}-01\z/)

    log = run_once("--otlp-endpoint", @otlp.url)
    spans = wait_for(20, 0.1, "the receive, handle and effect spans (sidecar: #{log})") do
      got = @otlp.spans.select { |s| s[:trace_id] == stored[3, 32] }
      got if %w[webhook_inbox.receive webhook_inbox.handle webhook_inbox.effect].all? { |n| got.any? { |s| s[:name] == n } }
    end
    receive, handle, effect = %w[webhook_inbox.receive webhook_inbox.handle webhook_inbox.effect].map do |n|
      spans.find { |s| s[:name] == n }
    end
    # one trace, parents intact: the stored context is the receipt span's
    expect([receive, handle, effect].map { |s| s[:trace_id] }.uniq).to eq([stored[3, 32]])
    expect(receive[:span_id]).to eq(stored[36, 16])
    expect(receive[:service]).to eq("webhook-inbox-spec-app")
    expect(receive[:kind]).to eq("server")
    expect(handle[:parent_id]).to eq(receive[:span_id])
    expect(effect[:parent_id]).to eq(handle[:span_id])
    expect([handle, effect].map { |s| s[:service] }.uniq).to eq(["webhook-inbox-sidecar"])
    expect([handle[:kind], effect[:kind]]).to eq([1, 3]) # internal, client

    expect(receive[:attributes]).to include("webhook_inbox.provider" => "stripe", "webhook_inbox.source_scope" => scope,
                                            "webhook_inbox.event_id" => "evt_traced_1", "webhook_inbox.event_type" => "invoice.paid",
                                            "webhook_inbox.result" => "accepted")
    expect(handle[:attributes]).to include("webhook_inbox.source_scope" => scope, "webhook_inbox.event_id" => "evt_traced_1",
                                           "webhook_inbox.event_type" => "invoice.paid", "webhook_inbox.result" => "done",
                                           "webhook_inbox.attempt" => "1")
    expect(effect[:attributes]).to include("webhook_inbox.destination" => "receipts", "webhook_inbox.result" => "delivered",
                                           "webhook_inbox.operation_id" => "receipt:evt_traced_1", "webhook_inbox.attempt" => "1",
                                           "http.response.status_code" => "200")
    # the effect's call carried the effect span's context
    call = @api.requests.find { |r| r.key == "receipt:evt_traced_1" }
    expect(call.headers["traceparent"]).to eq("00-#{effect[:trace_id]}-#{effect[:span_id]}-01")
    # the effect inherited the handle span's context (derived in SQL as the sidecar derives it)
    expect(db.value("SELECT trace_context FROM webhook_inbox_outbox WHERE operation_id = 'receipt:evt_traced_1'"))
      .to eq("00-#{handle[:trace_id]}-#{handle[:span_id]}-01")
    # never a payload, a header or a secret
    spans.each do |s|
      s[:attributes].each_value { |v| expect(v.to_s).not_to include(PAYLOAD_MARK, TRACE_SECRET, "whsec", "v1=") }
    end
    expect(@otlp.requests).to include(start_with("application/json"), start_with("application/x-protobuf"))
  end

  it "changes nothing with tracing off: no context stored, no span, no traceparent on the effect's call" do
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload)
      VALUES ('stripe:acct_off:live', 'evt_untraced', 'invoice.paid', '{"id": "evt_untraced"}'),
             ('stripe:acct_off:live', 'evt_stored_only', 'invoice.paid', '{"id": "evt_stored_only"}');
      UPDATE webhook_inbox SET trace_context = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
       WHERE event_id = 'evt_stored_only';
    SQL
    before = @otlp.spans.size
    run_once # no --otlp-endpoint
    %w[evt_untraced evt_stored_only].each do |id|
      call = wait_for(10, 0.1, "the effect of #{id}") { @api.requests.find { |r| r.key == "receipt:#{id}" } }
      expect(call.headers).not_to have_key("traceparent")
    end
    expect(db.value("SELECT coalesce(trace_context, 'NULL') FROM webhook_inbox_outbox WHERE operation_id = 'receipt:evt_untraced'"))
      .to eq("NULL")
    expect(db.value("SELECT status FROM webhook_inbox WHERE event_id = 'evt_untraced'")).to eq("done")
    sleep 0.5
    expect(@otlp.spans.size).to eq(before)
  end

  it "drops and counts spans when the export queue is full, never holding up the claim loop" do
    hanging = OtlpReceiver.new(hang: true)
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, trace_context)
      SELECT 'stripe:acct_full:live', 'evt_full_' || i, 'invoice.paid', '{}',
             '00-' || md5('t' || i) || '-' || left(md5('s' || i), 16) || '-01'
        FROM generate_series(1, 40) i
    SQL
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--batch-size", "5",
                             "--otlp-endpoint", hanging.url, "--otlp-queue", "2", "--metrics-listen", "127.0.0.1:0",
                             "--poll-interval", "200ms")
    wait_for(30, 0.1, "the 40 events handled") do
      db.int("SELECT count(*) FROM webhook_inbox WHERE source_scope = 'stripe:acct_full:live' AND status <> 'pending'") == 40
    end
    metrics = scrape_sidecar(log)
    dropped = metrics.fetch("webhook_inbox_trace_spans_dropped_total").samples.first.value
    expect(dropped).to be >= 36 # kept at most: the queue (2) and what the exporter took before it hung (2)
    expect(metrics.fetch("webhook_inbox_trace_spans_exported_total").samples.first.value).to eq(0)
    Process.kill("TERM", pid)
    expect(wait_exit(pid, 30)&.exitstatus).to eq(0)
  ensure
    hanging&.stop
  end
end
