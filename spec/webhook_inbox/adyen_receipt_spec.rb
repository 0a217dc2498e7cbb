# frozen_string_literal: true

require "spec_helper"
require "json"
require "webhook_inbox/endpoint"
require_relative "../support/receiver_helpers"
require_relative "../support/verifier_helpers"

# Adyen deliveries through the Rack Endpoint into a real inbox: each signed notification item
# is stored exactly once under its own signed key, whatever batch, order, repetition or
# spacing carries it; a delivery's items commit together, and 200 comes only after they have.
RSpec.describe "Adyen receipts (one event per signed notification item)" do
  include ReceiverHelpers
  include VerifierHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("adyen") }
  let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url, pool_size: 2) }
  let(:endpoint) do
    WebhookInbox::Endpoint.new(provider: :adyen, secrets: [VerifierHelpers::ADYEN_KEY], source_scope: scope, inbox: inbox)
  end
  let(:a) { adyen_item("psp_a") }
  let(:b) { adyen_item("psp_b") }
  let(:c) { adyen_item("psp_c", code: "REFUND") }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }
  after { inbox.close }

  def post(body)
    status, _, text = endpoint.call(rack_request("/webhooks/adyen", body, { "Content-Type" => "application/json" }))
    [status, JSON.parse(text.join)]
  end

  def stored_ids = inbox_rows(pg, scope).map { |r| r[:event_id] }

  it "stores each item once: [A], [A,A], [A,B], [A] alone, [B,A] re-spaced, [C,C]" do
    expect(post(adyen_body(a))).to eq([200, { "status" => "accepted" }])
    expect(post(adyen_body(a, a))).to eq([200, { "status" => "duplicate" }])
    expect(post(adyen_body(a, b))).to eq([200, { "status" => "accepted" }]) # B is new
    expect(post(adyen_body(a))).to eq([200, { "status" => "duplicate" }])
    expect(post(adyen_body(JSON.pretty_generate(b), a, sep: " ,\n\t"))).to eq([200, { "status" => "duplicate" }])
    expect(stored_ids).to eq(%w[psp_a:AUTHORISATION:true psp_b:AUTHORISATION:true])
    expect(post(adyen_body(c, c))).to eq([200, { "status" => "accepted" }])
    rows = inbox_rows(pg, scope)
    expect(rows.map { |r| [r[:event_id], r[:event_type], r[:status]] })
      .to eq([%w[psp_a:AUTHORISATION:true AUTHORISATION pending], %w[psp_b:AUTHORISATION:true AUTHORISATION pending],
              %w[psp_c:REFUND:true REFUND pending]])
    # each stored as a one-item delivery: what a handler of Adyen's format reads
    expect(JSON.parse(rows[1][:payload])).to eq(JSON.parse(adyen_body(b)))
  end

  it "refuses the whole delivery when one item is forged, or past 64 items, and stores none of it" do
    forged = adyen_item("psp_f", k: "11" * 32)
    expect(post(adyen_body(a, forged))).to eq([401, { "status" => "rejected", "reason" => "signature_mismatch" }])
    many = Array.new(65) { |i| adyen_item("p#{i}", value: i) }
    expect(post(adyen_body(*many))).to eq([400, { "status" => "rejected", "reason" => "too_many_items" }])
    expect(inbox_count(pg, scope)).to eq(0)
    expect(post(adyen_body(*many.first(64)))).to eq([200, { "status" => "accepted" }])
    expect(inbox_count(pg, scope)).to eq(64)
  end

  it "orders each item by a key into its stored document, as docs/adyen.md shows" do
    ordered = WebhookInbox::Endpoint.new(provider: :adyen, secrets: [VerifierHelpers::ADYEN_KEY], source_scope: scope, inbox: inbox,
                                         ordering: "notificationItems.0.NotificationRequestItem.pspReference")
    env = rack_request("/webhooks/adyen", adyen_body(a, c), { "Content-Type" => "application/json" })
    expect(ordered.call(env).first).to eq(200)
    keys = pg.psql("SELECT event_id || '=' || coalesce(ordering_key, 'NULL') FROM webhook_inbox " \
                   "WHERE source_scope = '#{scope}' ORDER BY event_id").split("\n")
    expect(keys).to eq(%w[psp_a:AUTHORISATION:true=psp_a psp_c:REFUND:true=psp_c])
  end

  it "commits a delivery's items together: a failure on one stores none, answers 503, and the retry stores all" do
    # a server error no single row causes (class 53: every row's), raised while inserting B
    refusing_trigger(pg, scope, "NEW.event_id = 'psp_b:AUTHORISATION:true'", "53400")
    begin
      status, answer = post(adyen_body(a, b))
      expect([status, answer["reason"]]).to eq([503, "store_unavailable"])
      expect(inbox_count(pg, scope)).to eq(0) # not A alone either
    ensure
      drop_refusing_trigger(pg)
    end
    expect(post(adyen_body(a, b))).to eq([200, { "status" => "accepted" }])
    expect(stored_ids).to eq(%w[psp_a:AUTHORISATION:true psp_b:AUTHORISATION:true])
  end
end
