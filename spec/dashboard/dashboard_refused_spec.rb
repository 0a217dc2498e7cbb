# frozen_string_literal: true

require "spec_helper"
require "cgi"
require "json"
require "open3"
require "openssl"
require "socket"
require_relative "../support/receiver_helpers"
require_relative "../support/dashboard_client"

# Issue 20 item 2 in spec/rails_app under a real Puma (production, so the Railtie writes the
# kept deliveries): forged deliveries to an endpoint with keep_refused are kept, listed and
# counted on the overview; reverify (the dashboard's button, rake webhook_inbox:reverify)
# admits what verifies with the current secret, records the actor, and leaves the rest; bad
# parameters are 400, never 500.
RSpec.describe "WebhookInbox::Engine, refused deliveries over HTTP" do
  include ReceiverHelpers

  SECRET = "whsec_refused_current"
  REFUSED_SCOPE = "stripe:acct_refused:live"

  def rails_app = File.join(ReceiverHelpers::ROOT, "spec/rails_app")

  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "dash_ref")
    @env = { "DATABASE_URL" => @pg.url(@db), "RAILS_ENV" => "production", "SECRET_KEY_BASE" => "r" * 64,
             "STRIPE_WEBHOOK_SECRET" => SECRET, "STRIPE_SCOPE" => REFUSED_SCOPE, "WI_KEEP_REFUSED" => "1",
             "ADMIN_USER" => "ops", "ADMIN_PASSWORD" => "correct horse" }
    @puma = PumaProcess.new(rackup: File.join(rails_app, "config.ru"), dir: rails_app, threads: "2:2", env: @env).start
  end
  after(:all) { @puma&.stop }

  before { db_psql("TRUNCATE webhook_inbox_refused, webhook_inbox_actions; DELETE FROM webhook_inbox") }

  def db_psql(sql) = @pg.psql(sql, db: @db)

  let(:admin) { DashboardClient.new(@puma.port, user: "ops", password: "correct horse") }

  def signed(id, secret, at: Time.now.to_i)
    body = JSON.generate(id: id, type: "invoice.paid", data: { object: { id: "in_#{id}" } })
    [body, "t=#{at},v1=#{OpenSSL::HMAC.hexdigest('SHA256', secret, "#{at}.#{body}")}"]
  end

  def post_webhook(body, signature)
    Net::HTTP.start("127.0.0.1", @puma.port) do |http|
      http.post("/webhooks/stripe", body, "Content-Type" => "application/json", "Stripe-Signature" => signature).code.to_i
    end
  end

  # A kept row as the receiver writes it, for a delivery signed with secret (as if the app
  # had had another secret when it arrived).
  def keep_row(id, secret, reason: "signature_mismatch")
    body, sig = signed(id, secret)
    headers = JSON.generate("content-type" => "application/json", "stripe-signature" => sig)
    db_psql(<<~SQL)
      INSERT INTO webhook_inbox_refused (endpoint, source_scope, provider, reason, body, request_headers, received_at)
      VALUES ('stripe', '#{REFUSED_SCOPE}', 'stripe', '#{reason}', convert_to('#{body}', 'UTF8'), '#{headers}', now())
    SQL
  end

  def kept_count = db_psql("SELECT count(*) FROM webhook_inbox_refused").to_i

  def in_app(script, env = {})
    Open3.capture3(@env.merge("RUBYLIB" => File.join(ReceiverHelpers::ROOT, "lib")).merge(env), RbConfig.ruby, "-e",
                   %(require "./config/environment"\n#{script}), chdir: rails_app)
  end

  it "keeps forged deliveries, lists and counts them, and reverify admits only what the current secret signs" do
    3.times { |i| expect(post_webhook(*signed("evt_forged_#{i}", "whsec_wrong"))).to eq(401) }
    expect(post_webhook(signed("evt_nosig", SECRET)[0], "")).to eq(401) # no signature: not kept
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
    sleep 0.1 until kept_count >= 3 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    expect(kept_count).to eq(3)
    expect(db_psql("SELECT count(*) FROM webhook_inbox").to_i).to eq(0)

    _, _, overview = admin.get("/webhook_inbox")
    expect(overview).to match(%r{<table id="refused-kept">.*>stripe</a></td><td class="num">3</td>}m)
    status, _, list = admin.get("/webhook_inbox/refused?endpoint=stripe")
    expect(status).to eq(200)
    expect(list.scan(%r{<a href="/webhook_inbox/refused/delivery\?id=(\d+)">}).size).to eq(3)
    id = db_psql("SELECT min(id) FROM webhook_inbox_refused").strip
    status, _, page = admin.get("/webhook_inbox/refused/delivery?id=#{id}")
    expect([status, page]).to match([200, /stripe-signature.*evt_forged_0/m])

    keep_row("evt_kept_ok", SECRET) # refused while the app had another secret; the current one signs it
    admin.get("/webhook_inbox/refused?endpoint=stripe")
    expect(admin.post("/webhook_inbox/refused/reverify", { "endpoint" => "stripe" }, token: false).first).to eq(422)
    expect(kept_count).to eq(4)
    admin.get("/webhook_inbox/refused?endpoint=stripe")
    status, headers, = admin.post("/webhook_inbox/refused/reverify", { "endpoint" => "stripe" })
    expect([status, headers["location"]]).to match([302, %r{/webhook_inbox/refused\?endpoint=stripe\z}])
    _, _, after = admin.get(headers["location"])
    expect(after).to match(/Reverified stripe: 1 admitted to the inbox, 3 still refused \(action #\d+\)/)
    expect(db_psql("SELECT event_id, status FROM webhook_inbox WHERE source_scope = '#{REFUSED_SCOPE}'").strip)
      .to eq("evt_kept_ok|pending")
    expect(kept_count).to eq(3)
    expect(db_psql("SELECT actor, action, filter->>'endpoint', count FROM webhook_inbox_actions").strip)
      .to eq("ops|reverify|stripe|1")
  end

  # db/020: a PayPal certificate that could not be fetched is kept under its own reason,
  # explained on the list, and reverified like every other kept delivery.
  it "lists certificate_unavailable with what it means, and reverify admits what verifies as for any reason" do
    keep_row("evt_cert_ok", SECRET, reason: "certificate_unavailable")
    keep_row("evt_cert_forged", "whsec_wrong", reason: "certificate_unavailable")
    status, _, list = admin.get("/webhook_inbox/refused?endpoint=stripe")
    expect(status).to eq(200)
    expect(list.scan(%r{<td title="[^"]*could not be fetched[^"]*">certificate_unavailable</td>}).size).to eq(2)
    expect(list).to match(%r{id="reasons">Reasons:.*<code>certificate_unavailable</code> PayPal&#39;s certificate could not be fetched}m)
    status, headers, = admin.post("/webhook_inbox/refused/reverify", { "endpoint" => "stripe" })
    expect(status).to eq(302)
    _, _, after = admin.get(headers["location"])
    expect(after).to match(/Reverified stripe: 1 admitted to the inbox, 1 still refused/)
    expect(db_psql("SELECT event_id FROM webhook_inbox WHERE source_scope = '#{REFUSED_SCOPE}'").strip).to eq("evt_cert_ok")
    expect(db_psql("SELECT reason FROM webhook_inbox_refused").strip).to eq("certificate_unavailable")
  end

  it "answers 400 or 422 to parameters it cannot use, never 500" do
    expect(admin.get("/webhook_inbox/refused?endpoint=a%20b").first).to eq(400)
    expect(admin.get("/webhook_inbox/refused?endpoint[]=x").first).to eq(400)
    expect(admin.get("/webhook_inbox/refused?before=abc").first).to eq(400)
    expect(admin.get("/webhook_inbox/refused/delivery?id=x").first).to eq(400)
    expect(admin.get("/webhook_inbox/refused/delivery?id=999999").first).to eq(404)
    admin.get("/webhook_inbox/refused")
    expect(admin.post("/webhook_inbox/refused/reverify", { "endpoint" => "nope" }).first).to eq(422)
    admin.get("/webhook_inbox/refused")
    expect(admin.post("/webhook_inbox/refused/reverify", {}).first).to eq(422)
    expect(db_psql("SELECT count(*) FROM webhook_inbox_actions").to_i).to eq(0)
  end

  it "rake webhook_inbox:reverify ENDPOINT= admits what verifies, with ACTOR=, and refuses a missing or unknown endpoint" do
    keep_row("evt_rake_ok", SECRET)
    keep_row("evt_rake_forged", "whsec_wrong")
    task = ->(env) { in_app(%(Rails.application.load_tasks; Rake::Task["webhook_inbox:reverify"].invoke), env) }
    out, err, st = task.({ "ENDPOINT" => "stripe", "ACTOR" => "ops@example.com" })
    expect([out.strip, st.success?]).to match([/\Areverified stripe: 1 admitted, 1 still refused, 0 expired \(action #\d+\)\z/, true]), err
    _, err, st = task.({})
    expect([st.success?, err]).to match([false, /needs ENDPOINT=/])
    _, err, st = task.({ "ENDPOINT" => "nope" })
    expect([st.success?, err]).to match([false, /no endpoint "nope"/])
    expect(db_psql("SELECT actor || ' ' || count FROM webhook_inbox_actions").strip).to eq("ops@example.com 1")
    expect(db_psql("SELECT event_id FROM webhook_inbox").strip).to eq("evt_rake_ok")
  end
end
