# frozen_string_literal: true

require "spec_helper"
require "json"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"

# The Rack Endpoint under a real Puma: concurrent deliveries of one event over HTTP.
RSpec.describe "Endpoint under Puma" do
  include ReceiverHelpers

  PUMA_SECRET = "whsec_puma_spec_secret"

  before(:all) do
    @pg = TestDatabase.cluster
    ReceiverHelpers.apply_schema(@pg)
    @scope = "stripe:acct_puma:#{SecureRandom.hex(4)}"
    @puma = ReceiverHelpers.endpoint_puma(@pg, scope: @scope, secret: PUMA_SECRET, threads: "16:16", pool: 8)
  end
  after(:all) { @puma&.stop }

  def body_for(id)
    %({"id":"#{id}","object":"event","type":"payment_intent.succeeded","data":{"object":{"amount":100}}})
  end

  it "stores 64 simultaneous deliveries of one event exactly once, answering all 200" do
    body = body_for("evt_concurrent_#{SecureRandom.hex(4)}")
    headers = WebhookInbox::TestHelpers.stripe_headers(body, secret: PUMA_SECRET)
    gate = Queue.new
    threads = Array.new(64) do
      Thread.new do
        gate.pop
        status, _, text = @puma.post("/webhooks/stripe", body, headers)
        [status, JSON.parse(text)["status"]]
      end
    end
    64.times { gate << true }
    results = threads.map(&:value)
    expect(results.map(&:first).uniq).to eq([200])
    expect(results.count { |_, s| s == "accepted" }).to eq(1)
    expect(results.count { |_, s| s == "duplicate" }).to eq(63)
    expect(inbox_rows(@pg, @scope).select { |r| r[:event_id] == JSON.parse(body)["id"] }.size).to eq(1)
  end

  it "answers every bad input over HTTP with its status" do
    body = body_for("evt_http_bad")
    good = WebhookInbox::TestHelpers.stripe_headers(body, secret: PUMA_SECRET)
    expect(@puma.request("GET", "/webhooks/stripe").values_at(0, 1).then { |s, h| [s, h["allow"]] }).to eq([405, "POST"])
    expect(@puma.post("/webhooks/stripe", "", good).first).to eq(400)
    expect(@puma.post("/webhooks/stripe", body, good.merge("Content-Type" => "text/plain")).first).to eq(415)
    expect(@puma.post("/webhooks/stripe", body, WebhookInbox::TestHelpers.stripe_headers(body, secret: "whsec_no")).first).to eq(401)
    stale = WebhookInbox::TestHelpers.stripe_headers(body, secret: PUMA_SECRET, timestamp: Time.now.to_i - 86_400)
    expect(@puma.post("/webhooks/stripe", body, stale).first).to eq(401)
    big = "[#{'1,' * 600_000}1]"
    expect(@puma.post("/webhooks/stripe", big, WebhookInbox::TestHelpers.stripe_headers(big, secret: PUMA_SECRET)).first).to eq(413)
    expect(inbox_count(@pg, @scope)).to eq(0).or eq(1) # only the concurrency example's row, if it ran first
    expect(inbox_rows(@pg, @scope).map { |r| r[:event_id] }).not_to include("evt_http_bad")
  end
end
