# frozen_string_literal: true

require "spec_helper"
require "rack/mock"
require "active_support"
require "active_support/notifications"
require "webhook_inbox/endpoint"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"
require_relative "../support/prometheus_text"

# WebhookInbox::Metrics: the receiver's notifications counted by provider, status and
# reason, rendered as valid Prometheus text, with bounded labels and no scope or payload.
RSpec.describe WebhookInbox::Metrics do
  include ReceiverHelpers

  METRICS_SPEC_SECRET = "whsec_metrics_spec_secret"

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("metrics") }
  let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url, pool_size: 2) }
  let(:endpoint) do
    WebhookInbox::Endpoint.new(provider: :stripe, secrets: [METRICS_SPEC_SECRET], source_scope: scope, inbox: inbox, tolerance: 300)
  end

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }
  before { described_class.reset! }
  after do
    described_class.uninstall
    inbox.close
  end

  def body(id)
    %({"id":"#{id}","object":"event","type":"charge.succeeded","data":{"object":{"note":"secret-customer-data"}}})
  end

  def post(raw, headers = WebhookInbox::TestHelpers.stripe_headers(raw, secret: METRICS_SPEC_SECRET))
    env = Rack::MockRequest.env_for("/webhooks/stripe", method: "POST", input: raw,
                                                        "CONTENT_TYPE" => "application/json")
    headers.each { |k, v| env["HTTP_#{k.upcase.tr('-', '_')}"] = v }
    endpoint.call(env)
  end

  def count(fams, provider, status, reason)
    PrometheusText.value(fams, "webhook_inbox_received_total",
                         { "provider" => provider, "status" => status, "reason" => reason })
  end

  it "counts accepted, duplicate and rejected deliveries by reason once installed, as valid Prometheus text" do
    post(body("evt_before")) # not installed yet: not counted
    expect(described_class.install).to equal(described_class)
    described_class.install # idempotent: one subscription
    post(body("evt_m1"))
    post(body("evt_m1"))
    post(body("evt_m2"))
    post(body("evt_m3"), { "Stripe-Signature" => "t=#{Time.now.to_i},v1=#{'0' * 64}" })
    post(body("evt_m4"), {})
    post(body("evt_m5"), WebhookInbox::TestHelpers.stripe_headers(body("evt_m5"), secret: METRICS_SPEC_SECRET,
                                                                                   timestamp: Time.now.to_i - 3600))
    text = described_class.to_prometheus
    fams = PrometheusText.parse(text)
    expect(fams["webhook_inbox_received_total"].type).to eq("counter")
    expect(count(fams, "stripe", "accepted", "none")).to eq(2)
    expect(count(fams, "stripe", "duplicate", "none")).to eq(1)
    expect(count(fams, "stripe", "rejected", "signature_mismatch")).to eq(1)
    expect(count(fams, "stripe", "rejected", "missing_signature")).to eq(1)
    expect(count(fams, "stripe", "rejected", "timestamp_out_of_tolerance")).to eq(1)
    expect(text).not_to include(scope)
    expect(text).not_to include("secret-customer-data")
    expect(text).not_to include("evt_m1")
  end

  it "counts a store outage as unavailable" do
    described_class.install
    ActiveSupport::Notifications.instrument("receive.webhook_inbox", provider: :github, scope: "s", status: :unavailable,
                                                                      http_status: 503, reason: :store_unavailable)
    expect(described_class.snapshot).to eq({ %w[github unavailable store_unavailable] => 1 })
  end

  it "stops counting after uninstall, keeping the counts" do
    described_class.install
    post(body("evt_u1"))
    described_class.uninstall
    post(body("evt_u2"))
    expect(described_class.snapshot.values.sum).to eq(1)
  end

  it "bounds label values (at most 50 providers and reasons, odd values as other) and escapes nothing unsafe" do
    60.times { |i| described_class.record(provider: "p#{i}", status: :rejected, reason: "r#{i}") }
    described_class.record(provider: "bad\"\nprovider", status: :weird, reason: :x)
    described_class.record(provider: :p1, status: :accepted, reason: :ignored_for_accepted)
    described_class.record(provider: :stripe, status: :accepted) # a 51st provider
    snap = described_class.snapshot
    expect(snap.keys.map(&:first).uniq.size).to eq(51) # p0..p49, other
    expect(snap[%w[other rejected other]]).to eq(10)
    expect(snap[%w[other other none]]).to eq(1)
    expect(snap[%w[p1 accepted none]]).to eq(1)
    expect(snap[%w[other accepted none]]).to eq(1)
    PrometheusText.parse(described_class.to_prometheus)
  end

  it "counts from many threads without losing increments" do
    8.times.map { Thread.new { 1000.times { described_class.record(provider: :stripe, status: :accepted) } } }.each(&:join)
    expect(described_class.snapshot).to eq({ %w[stripe accepted none] => 8000 })
  end

  it "renders HELP and TYPE with no deliveries yet" do
    fams = PrometheusText.parse(described_class.to_prometheus)
    expect(fams["webhook_inbox_received_total"].samples).to eq([])
  end
end
