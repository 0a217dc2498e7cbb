# frozen_string_literal: true

require "spec_helper"
require "fileutils"
require "net/http"
require_relative "../support/receiver_helpers"
require_relative "../support/webdriver"
require_relative "../sidecar/sidecar_helper"

# Issue 10, done when: in a real browser (Debian's headless Chromium), sign in through the
# app's own authentication, see a quarantined event with its attempts, requeue it (with the
# confirmation step) and, with a real sidecar running, see it done.
RSpec.describe "the dashboard in a real browser", :browser do
  include SidecarHelper

  before(:all) do
    skip "chromium and chromedriver are not installed (bin/setup installs them)" unless WebDriver.available?
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    app = File.join(ReceiverHelpers::ROOT, "spec/rails_app")
    @puma = PumaProcess.new(rackup: File.join(app, "config.ru"), dir: app, threads: "2:2",
                            env: { "DATABASE_URL" => @db.url, "RAILS_ENV" => "production", "SECRET_KEY_BASE" => "b" * 64,
                                   "STRIPE_WEBHOOK_SECRET" => "whsec_browser", "STRIPE_SCOPE" => "stripe:acct_b:live",
                                   "ADMIN_USER" => "ops", "ADMIN_PASSWORD" => "s3cret-pass" }).start
    @browser = WebDriver.new
  end

  after(:all) do
    @browser&.quit
    @puma&.stop
  end

  before { @db.psql("DELETE FROM webhook_inbox; TRUNCATE webhook_inbox_outbox, webhook_inbox_actions") } # each example counts its own
  after { kill_spawned }

  it "signs in, sees a quarantined event with its attempts, requeues it after confirming, and sees it done" do
    @db.psql(<<~SQL)
      CREATE FUNCTION shop_on_paid(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'shop API unavailable' USING ERRCODE = 'WIR01'; END $$;
      INSERT INTO webhook_inbox_routes VALUES ('invoice.paid', 'shop_on_paid');
    SQL
    @db.insert_event("evt_browser_1", "invoice.paid", { "id" => "evt_browser_1", "api_key" => "sk_live_hidden" })
    2.times do
      status, _, log = sidecar("run", "--once", "--database-url", @db.url, "--max-attempts", "2",
                               "--backoff-base", "1ms", "--backoff-cap", "1ms")
      expect(status.exitstatus).to eq(0), log
    end
    expect(@db.event("evt_browser_1")).to include(status: "quarantined", attempts: 2)

    base = "http://127.0.0.1:#{@puma.port}/webhook_inbox"
    # Not signed in: the app's basic auth answers 401 (asked without the browser, which keeps
    # the credentials an earlier example signed in with for this origin).
    unsigned = Net::HTTP.get_response(URI(base))
    expect([unsigned.code, unsigned.body.to_s]).to match(["401", satisfy { |b| !b.include?("Overview") }])
    @browser.visit("http://ops:s3cret-pass@127.0.0.1:#{@puma.port}/webhook_inbox") # signing in
    expect(@browser.text("h1")).to eq("Overview")
    expect(@browser.text("#stat-quarantined")).to eq("1")

    @browser.click("#stat-quarantined a")
    expect(@browser.text("#events")).to include("evt_browser_1", "quarantined", "shop API unavailable")
    @browser.click("#events a[href*='evt_browser_1']")
    attempts = @browser.text("#attempts")
    expect(attempts).to include("retry", "quarantined", "WIR01: shop API unavailable")
    payload = @browser.text("#payload")
    expect(payload).to include("[REDACTED]")
    expect(payload).not_to include("sk_live_hidden")

    @db.psql("CREATE OR REPLACE FUNCTION shop_on_paid(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'shipped' $$")
    @browser.click("#requeue-link")
    expect(@browser.text("#bulk-count")).to include("1 quarantined event matches now")
    @browser.click("#confirm")
    expect(@browser.text("#notice")).to match(/Requeued 1 event \(action #\d+\)/)
    expect(@db.value("SELECT actor, action, count FROM webhook_inbox_actions")).to eq("ops|requeue|1")

    pid, = spawn_sidecar("run", "--database-url", @db.url, "--poll-interval", "100ms")
    wait_for(20, 0.1, "the requeued event done") { @db.event("evt_browser_1")[:status] == "done" }
    @browser.visit(@browser.current_url)
    expect(@browser.text("#event-status")).to eq("done")
    expect(@browser.text("#event-outcome")).to eq("shipped")
    expect(@browser.text("#attempts")).to include("requeued", "from quarantined", "done")
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  # Issue 18 item 4: a Ruby handler's quarantined run, found from the navigation, requeued
  # after confirming, and its event's page listing it.
  it "finds a quarantined Ruby handler run under Quarantined effects, requeues it after confirming, and sees it on its event" do
    @db.insert_event("evt_browser_fx", "invoice.paid", { "id" => "evt_browser_fx" })
    @db.psql(<<~SQL)
      UPDATE webhook_inbox SET status = 'quarantined', processed_at = now() WHERE event_id = 'evt_browser_fx';
      INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, attempts, last_error, source_scope, source_event_id, processed_at)
      VALUES ('handler_browser_fx', 'ruby', '{"handler": "SendReceiptHandler"}', 'quarantined', 1,
              'WebhookInbox::Permanent: no email on file', '#{SidecarHelper::SCOPE}', 'evt_browser_fx', now());
    SQL
    @browser.visit("http://ops:s3cret-pass@127.0.0.1:#{@puma.port}/webhook_inbox")
    @browser.click("header a[href$='effects?status=quarantined']")
    expect(@browser.text("#effects")).to include("Ruby handler SendReceiptHandler", "quarantined", "no email on file")
    @browser.click("#effects a[href*='handler_browser_fx']")
    expect(@browser.text("#effect-destination")).to eq("Ruby handler SendReceiptHandler")
    expect(@browser.text("#effect-error")).to include("no email on file")
    @browser.click("#requeue-link")
    expect(@browser.text("#bulk-count")).to include("1 quarantined effect matches now")
    @browser.click("#confirm")
    expect(@browser.text("#notice")).to match(/Requeued 1 effect \(action #\d+\)/)
    expect(@browser.text("#effect-status")).to eq("pending")
    expect(@db.value("SELECT actor, action, filter->'effects'->>'operation_id', count FROM webhook_inbox_actions WHERE filter ? 'effects'"))
      .to eq("ops|requeue|handler_browser_fx|1")
    @browser.click("#effect-event a")
    expect(@browser.text("#event-runs")).to include("handler_browser_fx", "Ruby handler SendReceiptHandler", "pending")
  end
end
