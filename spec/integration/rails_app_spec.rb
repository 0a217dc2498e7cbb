# frozen_string_literal: true

require "spec_helper"
require "json"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"
require_relative "../support/verifier_helpers"

# spec/rails_app under a real Puma: the gem's controller, the transactional inbox, the
# Rack endpoint mounted in Rails' router, notifications and logs.
RSpec.describe "Rails app with WebhookInbox::Controller" do
  include ReceiverHelpers
  include VerifierHelpers

  RAILS_SECRET = "whsec_rails_spec_secret"
  DIDIT_SECRET = "didit_rails_spec_secret"

  before(:all) do
    @pg = TestDatabase.cluster
    ReceiverHelpers.apply_schema(@pg)
    @pg.psql(File.read(File.join(ReceiverHelpers::ROOT, "spec/rails_app/db/app_schema.sql")))
    @scope = "stripe:acct_rails:#{SecureRandom.hex(4)}"
    @didit_scope = "didit:app_rails:#{SecureRandom.hex(4)}"
    @adyen_scope = "adyen:app_rails:#{SecureRandom.hex(4)}"
    app = File.join(ReceiverHelpers::ROOT, "spec/rails_app")
    @puma = PumaProcess.new(rackup: File.join(app, "config.ru"), dir: app, threads: "8:8",
                            env: { "DATABASE_URL" => @pg.url, "RAILS_ENV" => "production",
                                   "SECRET_KEY_BASE" => "s" * 64, "STRIPE_WEBHOOK_SECRET" => RAILS_SECRET,
                                   "STRIPE_SCOPE" => @scope, "DIDIT_WEBHOOK_SECRET" => DIDIT_SECRET,
                                   "DIDIT_SCOPE" => @didit_scope, "RAILS_LOG" => "1",
                                   "ADYEN_HMAC_KEY" => VerifierHelpers::ADYEN_KEY, "ADYEN_SCOPE" => @adyen_scope,
                                   "WI_LOG_NOTIFICATIONS" => "1" }).start
  end
  after(:all) { @puma&.stop }

  def stripe_body(id, type: "invoice.paid")
    %({"id":"#{id}","object":"event","type":"#{type}","data":{"object":{"email":"pii@example.com"}}})
  end

  def post_stripe(path, body, secret: RAILS_SECRET, **opts)
    @puma.post(path, body, WebhookInbox::TestHelpers.stripe_headers(body, secret: secret, **opts))
  end

  it "accepts a signed Stripe webhook once, then answers duplicate" do
    body = stripe_body("evt_rails_1")
    expect(post_stripe("/webhooks/stripe", body).values_at(0, 2)).to eq([200, %({"status":"accepted"})])
    expect(JSON.parse(@pg.psql("SELECT request_headers::text FROM webhook_inbox WHERE event_id = 'evt_rails_1'")))
      .to include("stripe-signature", "content-type" => "application/json")
    expect(post_stripe("/webhooks/stripe", body).values_at(0, 2)).to eq([200, %({"status":"duplicate"})])
    expect(inbox_rows(@pg, @scope).select { |r| r[:event_id] == "evt_rails_1" })
      .to match([include(event_type: "invoice.paid", status: "pending")])
  end

  it "renders the Endpoint's statuses for bad input" do
    body = stripe_body("evt_rails_bad")
    expect(post_stripe("/webhooks/stripe", body, secret: "whsec_wrong").first).to eq(401)
    expect(post_stripe("/webhooks/stripe", body, timestamp: Time.now.to_i - 3600).first).to eq(401)
    expect(@puma.post("/webhooks/stripe", "", WebhookInbox::TestHelpers.stripe_headers("", secret: RAILS_SECRET)).first).to eq(400)
    status, headers, = @puma.request("GET", "/webhooks/stripe")
    expect([status, headers["allow"]]).to eq([405, "POST"])
    expect(@puma.post("/webhooks/stripe", body, WebhookInbox::TestHelpers.stripe_headers(body, secret: RAILS_SECRET)
                                                   .merge("Content-Type" => "text/plain")).first).to eq(415)
    big = %({"id":"evt_big","pad":"#{'x' * (1024 * 1024)}"})
    expect(post_stripe("/webhooks/stripe", big).first).to eq(413)
    expect(inbox_rows(@pg, @scope).map { |r| r[:event_id] }).not_to include("evt_rails_bad", "evt_big")
  end

  it "receives Didit webhooks signed over the raw body" do
    # Didit signs the body's own timestamp field (X-Timestamp is covered by no signature).
    body = %({"session_id":"sess_1","status":"Approved","webhook_type":"status.updated","timestamp":#{Time.now.to_i}})
    status, _, text = @puma.post("/webhooks/didit", body, WebhookInbox::TestHelpers.didit_headers(body, secret: DIDIT_SECRET))
    expect([status, JSON.parse(text)["status"]]).to eq([200, "accepted"])
    expect(inbox_count(@pg, @didit_scope)).to eq(1)
  end

  it "takes scope and secrets from the action (receive_webhook(:stripe, scope:, secrets:))" do
    expect(post_stripe("/webhooks/stripe_inline", stripe_body("evt_inline")).first).to eq(200)
    expect(inbox_rows(@pg, "#{@scope}:inline").map { |r| r[:event_id] }).to eq(["evt_inline"])
  end

  it "serves the Rack endpoint mounted in Rails' router" do
    expect(post_stripe("/rack/stripe", stripe_body("evt_rack_in_rails")).values_at(0, 2)).to eq([200, %({"status":"accepted"})])
  end

  it "commits the inbox row and the business write together (transactional: true)" do
    expect(post_stripe("/webhooks/stripe_tx", stripe_body("evt_tx_ok")).first).to eq(200)
    # The block is the event's handler: the row is done in the block's transaction, as the
    # sidecar leaves a handled event (outcome, processed_at, one 'done' attempt_log entry).
    expect(@pg.psql(<<~SQL).strip.split("|")).to eq(["done", "handled in transaction", "t", "done", "1"])
      SELECT status, outcome, processed_at IS NOT NULL, attempt_log->0->>'result', jsonb_array_length(attempt_log)
        FROM webhook_inbox WHERE event_id = 'evt_tx_ok'
    SQL
    expect(@pg.psql("SELECT count(*) FROM tx_effects WHERE event_id = 'evt_tx_ok'").to_i).to eq(1)
    headers = JSON.parse(@pg.psql("SELECT request_headers::text FROM webhook_inbox WHERE event_id = 'evt_tx_ok'"))
    expect(headers).to include("stripe-signature", "content-type" => "application/json") # ActiveRecordStore keeps them too
    expect(post_stripe("/webhooks/stripe_tx", stripe_body("evt_tx_ok")).values_at(0, 2)).to eq([200, %({"status":"duplicate"})])
    expect(@pg.psql("SELECT count(*) FROM tx_effects WHERE event_id = 'evt_tx_ok'").to_i).to eq(1)

    # Concurrent deliveries of one event: the second insert waits for the first transaction,
    # then is a duplicate; the block ran once.
    answers = Array.new(4) { Thread.new { post_stripe("/webhooks/stripe_tx", stripe_body("evt_tx_race")) } }.map(&:value)
    expect(answers.map { |a| JSON.parse(a[2])["status"] }.sort).to eq(%w[accepted duplicate duplicate duplicate])
    expect(@pg.psql("SELECT count(*) FROM tx_effects WHERE event_id = 'evt_tx_race'").to_i).to eq(1)

    # A failing block rolls back both and its exception reaches Rails (500; Rails answers
    # RecordNotFound 404): the sender retries. Its own ActiveRecord errors are not a store
    # outage (503), and a Rollback is no 200.
    { "test.fail" => 500, "test.not_found" => 404, "test.rollback" => 500 }.each_with_index do |(type, status), i|
      expect(post_stripe("/webhooks/stripe_tx", stripe_body("evt_tx_fail_#{i}", type: type)).first).to eq(status), type
    end
    expect(inbox_rows(@pg, @scope).map { |r| r[:event_id] }).not_to include("evt_tx_fail_0", "evt_tx_fail_1", "evt_tx_fail_2")
    expect(@pg.psql("SELECT count(*) FROM tx_effects WHERE event_id LIKE 'evt_tx_fail%'").to_i).to eq(0)
  end

  it "runs the transactional block once per newly accepted Adyen item, all items in one transaction" do
    post_adyen = ->(*items) { @puma.post("/webhooks/adyen_tx", adyen_body(*items), "Content-Type" => "application/json") }
    a = adyen_item("psp_tx_a")
    b = adyen_item("psp_tx_b")
    effects = -> { @pg.psql("SELECT event_id FROM tx_effects WHERE event_id LIKE 'psp_tx_%' ORDER BY 1").split("\n") }
    expect(post_adyen.call(a, b, a).values_at(0, 2)).to eq([200, %({"status":"accepted"})])
    expect(post_adyen.call(b, adyen_item("psp_tx_c")).first).to eq(200) # B: a duplicate, its block does not run again
    expect(effects.call).to eq(%w[psp_tx_a:AUTHORISATION:true psp_tx_b:AUTHORISATION:true psp_tx_c:AUTHORISATION:true])
    expect(inbox_rows(@pg, @adyen_scope).map { |r| [r[:event_id], r[:status]] })
      .to eq(%w[psp_tx_a psp_tx_b psp_tx_c].map { |p| ["#{p}:AUTHORISATION:true", "done"] })
    # the block fails on the second item: neither item, nor the first one's effect, is kept
    expect(post_adyen.call(adyen_item("psp_tx_d"), adyen_item("psp_tx_e", code: "TEST_FAIL")).first).to eq(500)
    expect(inbox_count(@pg, @adyen_scope)).to eq(3)
    expect(effects.call.size).to eq(3)
  end

  it "quarantines a non-JSON body in the transactional store without aborting the transaction" do
    body = "not json at all"
    expect(post_stripe("/webhooks/stripe_tx", body).first).to eq(200)
    row = inbox_rows(@pg, @scope).find { |r| r[:raw_body] == body }
    expect(row).to include(status: "quarantined", last_error: "payload is not valid JSON")
  end

  it "publishes notifications and logs without payloads or secrets" do
    post_stripe("/webhooks/stripe", stripe_body("evt_rails_note"))
    sleep 0.2
    log = @puma.log_text
    expect(log).to match(/notification receive\.webhook_inbox .*event_id=evt_rails_note .*provider=stripe .*status=accepted/)
    expect(log).to include("webhook_inbox provider=stripe scope=#{@scope} event_id=evt_rails_note status=accepted http=200")
    expect(log).not_to include("pii@example.com")
    expect(log).not_to include(RAILS_SECRET)
    expect(log).not_to include(DIDIT_SECRET)
  end
end
