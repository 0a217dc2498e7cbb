# frozen_string_literal: true

require "spec_helper"
require "rack/mock"
require "stringio"
require "logger"
require "digest"
require "webhook_inbox/endpoint"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"

RSpec.describe WebhookInbox::Endpoint do
  include ReceiverHelpers

  ENDPOINT_SECRET = "whsec_endpoint_spec_secret"

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("endpoint") }
  let(:log) { StringIO.new }
  let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url, pool_size: 2) }
  let(:endpoint) do
    described_class.new(provider: :stripe, secrets: [ENDPOINT_SECRET], source_scope: scope, inbox: inbox,
                        max_body_bytes: 4096, tolerance: 300, logger: Logger.new(log))
  end

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }
  after { inbox.close }

  def event_body(id, type: "charge.succeeded", extra: "secret-customer-data")
    %({"id":"#{id}","object":"event","type":"#{type}","data":{"object":{"note":"#{extra}"}}})
  end

  def rack_env(body, headers = WebhookInbox::TestHelpers.stripe_headers(body, secret: ENDPOINT_SECRET), method: "POST", input: nil)
    rack_request("/webhooks/stripe", body, headers, method: method, input: input)
  end

  def call(env)
    status, headers, body = endpoint.call(env)
    [status, headers, body.join]
  end

  it "answers 200 accepted after the row is committed, then 200 duplicate" do
    body = event_body("evt_a")
    status, headers, text = call(rack_env(body))
    expect([status, JSON.parse(text)]).to eq([200, { "status" => "accepted" }])
    expect(headers["Content-Type"]).to eq("application/json")
    expect(inbox_rows(pg, scope)).to match([include(event_id: "evt_a", event_type: "charge.succeeded", status: "pending")])

    status, _, text = call(rack_env(body))
    expect([status, JSON.parse(text)]).to eq([200, { "status" => "duplicate" }])
    expect(inbox_count(pg, scope)).to eq(1)
  end

  it "keeps the delivery's request headers with the event, never its credentials" do
    body = event_body("evt_headers")
    signed = WebhookInbox::TestHelpers.stripe_headers(body, secret: ENDPOINT_SECRET)
    env = rack_env(body, signed.merge("User-Agent" => "Stripe/1.0", "Authorization" => "Bearer sk_live_x",
                                      "Cookie" => "_session=abc", "X-Request-Id" => "req-1"))
    expect(call(env).first).to eq(200)
    stored = JSON.parse(pg.psql("SELECT request_headers::text FROM webhook_inbox " \
                                "WHERE source_scope = '#{scope}' AND event_id = 'evt_headers'"))
    expect(stored).to include("stripe-signature" => signed.fetch("Stripe-Signature"), "user-agent" => "Stripe/1.0",
                              "x-request-id" => "req-1", "content-type" => "application/json")
    expect(stored.keys).not_to include("authorization", "cookie")
    expect(stored.to_s).not_to include("sk_live_x", "_session")
  end

  it "answers 400 for an empty body" do
    status, _, text = call(rack_env(""))
    expect([status, JSON.parse(text)["reason"]]).to eq([400, "empty_body"])
  end

  it "answers 401 for a bad signature, a tampered body, and a missing signature; stores nothing" do
    body = event_body("evt_bad")
    bad = WebhookInbox::TestHelpers.stripe_headers(body, secret: "whsec_other")
    expect(call(rack_env(body, bad)).first).to eq(401)
    tampered = WebhookInbox::TestHelpers.stripe_headers(body, secret: ENDPOINT_SECRET)
    expect(call(rack_env(body.sub("charge", "refund"), tampered)).first).to eq(401)
    expect(call(rack_env(body, { "Content-Type" => "application/json" })).first).to eq(401)
    expect(inbox_count(pg, scope)).to eq(0)
  end

  it "answers 401 for a stale timestamp" do
    body = event_body("evt_old")
    headers = WebhookInbox::TestHelpers.stripe_headers(body, secret: ENDPOINT_SECRET, timestamp: Time.now.to_i - 3600)
    status, _, text = call(rack_env(body, headers))
    expect([status, JSON.parse(text)["reason"]]).to eq([401, "timestamp_out_of_tolerance"])
    expect(inbox_count(pg, scope)).to eq(0)
  end

  it "answers 401 when no secret is configured (secrets: [])" do
    ep = described_class.new(provider: :stripe, secrets: [], source_scope: scope, inbox: inbox)
    body = event_body("evt_nosecret")
    status, _, text = ep.call(rack_env(body))
    expect([status, JSON.parse(text.join)["reason"]]).to eq([401, "no_secret"])
    expect(inbox_count(pg, scope)).to eq(0)
  end

  it "quarantines a signed Stripe body that is not JSON under the body's SHA-256 (the verifier's id)" do
    body = "{not json"
    status, _, text = call(rack_env(body))
    expect([status, JSON.parse(text)]).to eq([200, { "status" => "accepted" }])
    expect(inbox_rows(pg, scope)).to match([include(event_id: Digest::SHA256.hexdigest(body), status: "quarantined",
                                                    last_error: "payload is not valid JSON")])
  end

  it "stores a verified body that is not JSON raw + quarantined and answers 200 (GitHub: id from the body's SHA-256)" do
    ep = described_class.new(provider: :github, secrets: [ENDPOINT_SECRET], source_scope: scope, inbox: inbox)
    body = "{truncated"
    headers = WebhookInbox::TestHelpers.github_headers(body, secret: ENDPOINT_SECRET, delivery: "d-42", event: "push")
    status, _, text = ep.call(rack_env(body, headers))
    expect([status, JSON.parse(text.join)]).to eq([200, { "status" => "accepted" }])
    expect(inbox_rows(pg, scope)).to match([include(event_id: Digest::SHA256.hexdigest(body), event_type: "push", status: "quarantined",
                                                    raw_body: "{truncated", payload: "",
                                                    last_error: "payload is not valid JSON")])
    expect(ep.call(rack_env(body, headers)).first).to eq(200)
    expect(inbox_count(pg, scope)).to eq(1)
  end

  it "answers 405 with Allow: POST for other methods" do
    status, headers, = call(rack_env("", {}, method: "GET"))
    expect([status, headers["Allow"]]).to eq([405, "POST"])
  end

  it "answers 415 for a wrong Content-Type" do
    body = event_body("evt_type")
    headers = WebhookInbox::TestHelpers.stripe_headers(body, secret: ENDPOINT_SECRET).merge("Content-Type" => "text/plain")
    expect(call(rack_env(body, headers)).first).to eq(415)
    expect(inbox_count(pg, scope)).to eq(0)
  end

  it "answers 413 from Content-Length without reading the body" do
    input = Object.new
    def input.read(*) = raise("must not read")
    def input.rewind = nil
    env = rack_env("", { "Content-Type" => "application/json", "Content-Length" => "10000000" }, input: StringIO.new)
    env["rack.input"] = input
    expect(call(env).first).to eq(413)
  end

  it "answers 413 for a body without Content-Length, reading at most max_body_bytes + 1" do
    big = StringIO.new("x" * 1_000_000)
    reads = []
    big.define_singleton_method(:read) { |n = nil, *rest| reads << n; super(n, *rest) }
    env = rack_env("", { "Content-Type" => "application/json" })
    env.delete("CONTENT_LENGTH")
    env["rack.input"] = big
    expect(call(env).first).to eq(413)
    expect(reads).to eq([4097])
  end

  it "answers 503 with Retry-After when the store is unavailable" do
    down = WebhookInbox::Inbox.new(database_url: "host=127.0.0.1 port=#{ReceiverHelpers.free_port} dbname=x password=pw123",
                                   connect_timeout: 1)
    ep = described_class.new(provider: :stripe, secrets: [ENDPOINT_SECRET], source_scope: scope, inbox: down,
                             retry_after: 7, logger: Logger.new(log))
    body = event_body("evt_down")
    status, headers, text = ep.call(rack_env(body))
    expect([status, headers["Retry-After"], JSON.parse(text.join)["status"]]).to eq([503, "7", "unavailable"])
    expect(log.string).to include("http=503").and include("event_id=evt_down")
    expect(log.string).not_to include("pw123")
  end

  it "never logs secrets or payload bytes" do
    call(rack_env(event_body("evt_log")))
    call(rack_env(event_body("evt_log2"), WebhookInbox::TestHelpers.stripe_headers(event_body("evt_log2"), secret: "whsec_x")))
    expect(log.string).to include("event_id=evt_log status=accepted http=200")
    expect(log.string).to include("status=rejected http=401")
    expect(log.string).not_to include(ENDPOINT_SECRET)
    expect(log.string).not_to include("secret-customer-data")
    expect(log.string).not_to match(/v1=/)
  end

  it "logs at the logger's level, and to a logger without level predicates" do
    quiet = Logger.new(log, level: Logger::WARN)
    ep = described_class.new(provider: :stripe, secrets: [ENDPOINT_SECRET], source_scope: scope, inbox: inbox, logger: quiet)
    expect(ep.call(rack_env(event_body("evt_quiet"))).first).to eq(200)
    expect(log.string).to be_empty

    lines = []
    duck = Object.new
    duck.define_singleton_method(:info) { |line| lines << line }
    duck.define_singleton_method(:error) { |line| lines << line }
    ep = described_class.new(provider: :stripe, secrets: [ENDPOINT_SECRET], source_scope: scope, inbox: inbox, logger: duck)
    expect(ep.call(rack_env(event_body("evt_duck"))).first).to eq(200)
    expect(lines).to match([include("event_id=evt_duck status=accepted http=200")])
  end

  it "answers the common outcomes with prebuilt bodies and a fresh, mutable header Hash" do
    first = endpoint.call(rack_env(event_body("evt_prebuilt")))
    second = endpoint.call(rack_env(event_body("evt_prebuilt")))
    expect([first[0], first[2].join, first[1]["Content-Length"]]).to eq([200, '{"status":"accepted"}', "21"])
    expect([second[0], second[2].join, second[1]["Content-Length"]]).to eq([200, '{"status":"duplicate"}', "22"])
    expect(first[1]).not_to be_frozen
    expect(first[1]).not_to equal(endpoint.call(rack_env(event_body("evt_prebuilt")))[1])
  end

  it "publishes receive.webhook_inbox without payload or secrets" do
    require "active_support"
    require "active_support/notifications"
    events = []
    sub = ActiveSupport::Notifications.subscribe("receive.webhook_inbox") { |*, payload| events << payload }
    call(rack_env(event_body("evt_note")))
    expect(events.last).to include(provider: :stripe, scope: scope, event_id: "evt_note", status: :accepted, http_status: 200)
    expect(events.last.values.map(&:to_s).join).not_to include("secret-customer-data")
  ensure
    ActiveSupport::Notifications.unsubscribe(sub) if sub
  end

  it "refuses configuration without a source_scope or a store" do
    expect { described_class.new(provider: :stripe, secrets: [ENDPOINT_SECRET], source_scope: "", inbox: inbox) }
      .to raise_error(WebhookInbox::ConfigurationError)
    expect { described_class.new(provider: :stripe, secrets: [ENDPOINT_SECRET], source_scope: scope) }
      .to raise_error(WebhookInbox::ConfigurationError)
  end

  it "inspect shows no secret" do
    expect(endpoint.inspect).not_to include(ENDPOINT_SECRET)
  end

  it "stores only what the signature covers: a Didit Simple delivery keeps its four signed fields, never the body's decision" do
    didit = described_class.new(provider: :didit, secrets: [ENDPOINT_SECRET], source_scope: scope, inbox: inbox,
                                allow_simple: true)
    now = Time.now.to_i
    signed = "#{now}:sess_1:Approved:status.updated"
    body = %({"decision":{"status":"Declined"},"event_id":"e1","session_id":"sess_1","status":"Approved",) +
           %("timestamp":#{now},"webhook_type":"status.updated"})
    sig = OpenSSL::HMAC.hexdigest("SHA256", ENDPOINT_SECRET, signed)
    status, = didit.call(rack_env(body, { "Content-Type" => "application/json", "X-Signature-Simple" => sig }))
    expect(status).to eq(200)
    row = inbox_rows(pg, scope).first
    expect(row[:event_id]).to eq(Digest::SHA256.hexdigest(signed))
    expect(JSON.parse(row[:payload])).to eq("session_id" => "sess_1", "status" => "Approved", "timestamp" => now,
                                            "webhook_type" => "status.updated")
  end
end
