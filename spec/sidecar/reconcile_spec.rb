# frozen_string_literal: true

require "openssl"
require "webhook_inbox/testing"
require_relative "sidecar_helper"
require_relative "../support/fake_provider_apis"
require_relative "../support/receiver_helpers"

# `webhook-inbox-sidecar reconcile --endpoint NAME --since 72h` (and `run --reconcile
# NAME=INTERVAL`) against local fake provider APIs: what the provider sent and the inbox
# lacks is inserted once, under the endpoint's scope, with the key its delivery has (so a
# late delivery is a duplicate), marked recovered_at; a walk stopped by a 429 resumes at the
# page it stopped on; GitHub's failed deliveries are redelivered and stored by the receiver.
RSpec.describe "webhook-inbox-sidecar reconcile", :sidecar do
  include ReceiverHelpers

  STRIPE_KEY = "sk_test_reconcile_#{SecureRandom.hex(8)}".freeze
  GITHUB_TOKEN = "ghp_reconcile_#{SecureRandom.hex(8)}".freeze
  PADDLE_KEY = "pdl_sdbx_apikey_#{SecureRandom.hex(12)}".freeze
  SQUARE_TOKEN = "EAAA#{SecureRandom.hex(16)}".freeze
  PADDLE_SECRET = "pdl_ntfset_reconcile_secret"
  SQUARE_KEY = "square-signature-key"
  SQUARE_URL = "https://example.com/webhooks/square"
  WHSEC = "whsec_reconcile_secret"
  GH_SECRET = "github-hook-secret"
  GH_APP_ID = "31337"
  GH_APP_KEY = OpenSSL::PKey::RSA.new(2048) # the App's private key, as GitHub issues it

  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  before do
    @api = FakeProviderApis.new(stripe_key: STRIPE_KEY, github_token: GITHUB_TOKEN, paddle_key: PADDLE_KEY,
                                square_token: SQUARE_TOKEN,
                                github_app: { id: GH_APP_ID, public_key: GH_APP_KEY.public_key })
    db.psql("TRUNCATE webhook_inbox_reconcile_cursors, webhook_inbox_redeliveries")
  end
  after { @api.stop }
  let(:db) { @db }
  let(:api) { @api }
  let(:scope) { "stripe:#{SecureRandom.hex(4)}:test" }
  let(:env) do
    { "WEBHOOK_INBOX_TEST_STRIPE_API" => api.url, "WEBHOOK_INBOX_TEST_GITHUB_API" => api.url,
      "WEBHOOK_INBOX_TEST_PADDLE_API" => api.url, "WEBHOOK_INBOX_TEST_SQUARE_API" => api.url,
      "WEBHOOK_INBOX_BILLING_API_KEY" => STRIPE_KEY, "WEBHOOK_INBOX_GH_API_KEY" => GITHUB_TOKEN,
      "WEBHOOK_INBOX_PAD_API_KEY" => PADDLE_KEY, "WEBHOOK_INBOX_SQ_API_KEY" => SQUARE_TOKEN,
      "WEBHOOK_INBOX_GA_APP_PRIVATE_KEY" => GH_APP_KEY.to_pem }
  end

  def endpoint_flags(name = "billing", spec = "billing=stripe:#{scope}")
    ["--endpoint", spec, "--endpoint", name]
  end

  def reconcile(*extra, e: env, timeout: 60)
    sidecar("reconcile", "--database-url", db.url, *extra, env: e, timeout: timeout)
  end

  # A Stripe event as GET /v1/events lists it and a webhook delivers it.
  def stripe_event(id, created, livemode: false, account: nil)
    e = { "id" => id, "object" => "event", "type" => "payment_intent.succeeded", "created" => created,
          "livemode" => livemode, "api_version" => "2024-06-20", "pending_webhooks" => 1,
          "data" => { "object" => { "id" => "pi_#{id}", "object" => "payment_intent", "amount" => 100 } } }
    e["account"] = account if account
    e
  end

  def deliver_stripe(event)
    body = JSON.generate(event)
    receiver = WebhookInbox::Endpoint.new(provider: :stripe, secrets: [WHSEC], source_scope: scope, database_url: db.url)
    status, _h, out = receiver.call(rack_request("/webhooks/stripe", body, WebhookInbox::Testing::Signing.headers(:stripe, body, secret: WHSEC)))
    [status, JSON.parse(out.join)["status"]]
  end

  def rows(where = "true")
    db.value("SELECT count(*) FROM webhook_inbox WHERE source_scope = #{db.q(scope)} AND #{where}").to_i
  end

  def recovered_ids
    db.value("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox " \
             "WHERE source_scope = #{db.q(scope)} AND recovered_at IS NOT NULL").split(",")
  end

  # n events of one connected-nothing test account, one a minute going back from 1h ago.
  def seed_stripe(n, prefix)
    base = Time.now.to_i - 3600
    Array.new(n) { |i| stripe_event(format("evt_%s_%04d", prefix, i), base - (i * 60)).tap { |e| api.add_event(e) } }
  end

  describe "Stripe" do
    it "recovers a 50-event gap exactly once; the 10 of them that then arrive as deliveries are duplicates" do
      events = seed_stripe(250, "gap#{SecureRandom.hex(3)}")
      gap = events[100, 50]
      (events - gap).each { |e| db.insert_event(e["id"], e["type"], e, scope: scope) } # delivered before
      # not this endpoint's scope: a live event, and one of a connected account
      api.add_event(stripe_event("evt_live_#{SecureRandom.hex(3)}", Time.now.to_i - 4000, livemode: true))

      st, out, err = reconcile(*endpoint_flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/reconcile billing: pages=3 listed=251 recovered=50 skipped=1 /)
      expect(rows).to eq(250)
      expect(recovered_ids).to eq(gap.map { |e| e["id"] }.sort)
      stored = JSON.parse(db.value("SELECT payload FROM webhook_inbox WHERE source_scope = #{db.q(scope)} " \
                                   "AND event_id = #{db.q(gap[0]["id"])}"))
      expect(stored).to eq(gap[0]) # what a delivery stores: the event object
      ordered = db.value("SELECT ordering_key || ' ' || extract(epoch FROM ordering_at)::bigint FROM webhook_inbox " \
                         "WHERE source_scope = #{db.q(scope)} AND event_id = #{db.q(gap[0]["id"])}")
      expect(ordered).to eq("pi_#{gap[0]["id"]} #{gap[0]["created"]}") # ordered as a delivery is (db/014)

      late = gap.first(10).map { |e| deliver_stripe(e) }
      expect(late).to all(eq([200, "duplicate"]))
      expect(deliver_stripe(stripe_event("evt_new_#{SecureRandom.hex(3)}", Time.now.to_i))).to eq([200, "accepted"])

      st, out, err = reconcile(*endpoint_flags, "--since", "72h") # again: nothing is missing
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/recovered=0 /)
      expect(rows).to eq(251)
      expect(rows("recovered_at IS NOT NULL")).to eq(50)
      expect(err).not_to include(STRIPE_KEY)
    end

    # The receiver stores a signed id past 255 bytes as sha256:<hex of its UTF-8 bytes>;
    # reconcile must find and insert it under that key (ext/webhook_inbox/event_id.h).
    it "keys an event id past 255 bytes as the receiver does: one delivered is found, a missing one recovered once" do
      base = Time.now.to_i - 3600
      long = ->(tag) { "evt_#{tag}_#{SecureRandom.hex(3)}_#{"\u00e9" * 150}" } # 300+ bytes, not ASCII
      missing = stripe_event(long.("missing"), base)
      delivered = stripe_event(long.("delivered"), base - 60)
      short = stripe_event("evt_short_#{SecureRandom.hex(3)}", base - 120) # last on the page: the cursor
      [missing, delivered, short].each { |e| api.add_event(e) }
      expect(deliver_stripe(delivered)).to eq([200, "accepted"])
      key = ->(e) { "sha256:#{OpenSSL::Digest.hexdigest("SHA256", e["id"])}" }
      expect(db.value("SELECT event_id FROM webhook_inbox WHERE source_scope = #{db.q(scope)}")).to eq(key.(delivered))

      st, out, err = reconcile(*endpoint_flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/listed=3 recovered=2 skipped=0 /)
      expect(recovered_ids).to eq([key.(missing), short["id"]].sort)
      expect(rows).to eq(3)
      stored = db.value("SELECT payload FROM webhook_inbox WHERE source_scope = #{db.q(scope)} AND event_id = #{db.q(key.(missing))}")
      expect(JSON.parse(stored)).to eq(missing) # the event as listed, its id as sent
      expect(deliver_stripe(missing)).to eq([200, "duplicate"])

      st, out, err = reconcile(*endpoint_flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/listed=3 recovered=0 skipped=0 /)
      expect(rows).to eq(3)
    end

    it "resumes a walk a 429 stopped at the page it stopped on, and waits out a short Retry-After in place" do
      events = seed_stripe(250, "rl#{SecureRandom.hex(3)}")
      page2 = ->(r) { r.path == "/v1/events" && r.params["starting_after"] == events[99]["id"] }
      page3 = ->(r) { r.path == "/v1/events" && r.params["starting_after"] == events[199]["id"] }
      api.fault(status: 429, retry_after: 1, &page2)     # waited out: the same page again
      api.fault(status: 429, retry_after: 3600, &page3)  # beyond 60s: the walk stops, cursor kept
      before = api.requests_to("/v1/events").size

      st, _out, err = reconcile(*endpoint_flags, "--since", "72h")
      expect(st.exitstatus).to eq(1)
      expect(err).to include("rate limited (HTTP 429, Retry-After 3600s)").and include("run it again to resume")
      expect(rows).to eq(200) # pages 1 and 2 committed
      cursor = db.value("SELECT walk_after || '|' || coalesce(last_error, '') FROM webhook_inbox_reconcile_cursors " \
                        "WHERE endpoint = 'billing'")
      expect(cursor).to start_with("#{events[199]["id"]}|rate limited")

      st, out, err = reconcile(*endpoint_flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/pages=1 listed=50 recovered=50 .*resumed a walk stopped before/)
      afters = api.requests_to("/v1/events")[before..].map { |r| r.params["starting_after"] }
      expect(afters).to eq([nil, events[99]["id"], events[99]["id"], events[199]["id"], events[199]["id"]])
      expect(rows).to eq(250)
      expect(rows("recovered_at IS NOT NULL")).to eq(250)
    end

    # Issue 27 item 4: an API that repeats a page (has_more: true, the same last id) made the
    # walk ask for it forever, holding the endpoint's lock.
    it "stops a walk whose API repeats a page after asking once more (exit 3, lock released), then resumes once it is fixed" do
      seed_stripe(250, "loop#{SecureRandom.hex(3)}")
      api.stripe_repeats = true
      flags = endpoint_flags("billing", "billing=stripe:#{scope} rate=100")
      2.times do |run|
        before = api.requests_to("/v1/events").size
        st, _out, err = reconcile(*flags, "--since", "72h", timeout: 20)
        expect(st.exitstatus).to eq(3), err
        expect(err).to include("the provider's API repeated a page").and include("msg=reconcile_loop")
        expect(err).not_to include("run it again to resume")
        expect(api.requests_to("/v1/events").size - before).to eq(run.zero? ? 2 : 1) # resumed: its cursor repeats at once
        expect(db.value("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 73105820").to_i).to eq(0)
      end
      expect(rows).to eq(100)
      expect(db.value("SELECT last_error FROM webhook_inbox_reconcile_cursors WHERE endpoint = 'billing'"))
        .to include("repeated a page")

      api.stripe_repeats = false
      st, out, err = reconcile(*flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/pages=2 listed=150 recovered=150 .*resumed/)
      expect(rows).to eq(250)
    end

    it "stops a walk at its page cap (max_pages=) or deadline (deadline=) with the cursor kept; the next walk resumes" do
      events = seed_stripe(450, "cap#{SecureRandom.hex(3)}") # 5 pages
      st, _out, err = reconcile(*endpoint_flags("billing", "billing=stripe:#{scope} deadline=1 rate=1"), "--since", "72h")
      expect(st.exitstatus).to eq(1), err # page 2 waits a second for the rate: past the deadline
      expect(err).to include("stopped at its deadline (deadline=1s", "run it again to resume", "msg=reconcile_deadline")
      expect(rows).to be_between(100, 300)
      done = rows

      st, _out, err = reconcile(*endpoint_flags("billing", "billing=stripe:#{scope} max_pages=1"), "--since", "72h")
      expect(st.exitstatus).to eq(1), err
      expect(err).to include("stopped after max_pages=1 pages", "run it again to resume", "msg=reconcile_capped")
      expect(rows).to eq(done + 100)

      st, out, err = reconcile(*endpoint_flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to include("resumed a walk stopped before")
      expect(rows).to eq(450)
      expect(recovered_ids).to eq(events.map { |e| e["id"] }.sort)

      ["max_pages=0", "max_pages=1.5", "max_pages=x", "deadline=0", "deadline=86401", "deadline="].each do |bad|
        st, _out, err = reconcile(*endpoint_flags("billing", "billing=stripe:#{scope} #{bad}"))
        expect([bad, st.exitstatus]).to eq([bad, 2]), err
      end
    end

    it "asks again for a page that answered 5xx or was cut off halfway, and inserts each event once" do
      events = seed_stripe(150, "cut#{SecureRandom.hex(3)}")
      page2 = ->(r) { r.path == "/v1/events" && r.params["starting_after"] == events[99]["id"] }
      api.fault(status: 503, &page2)
      api.fault(cut: true, &page2)
      st, out, err = reconcile(*endpoint_flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/pages=2 listed=150 recovered=150 /)
      expect(err).to include("msg=reconcile_retry").and include("status=503")
      expect(rows).to eq(150)
    end

    it "lists a Connect account's events with Stripe-Account and takes only that account's, in its mode" do
      acct = "acct_#{SecureRandom.hex(6)}"
      mine = stripe_event("evt_acct_#{SecureRandom.hex(3)}", Time.now.to_i - 4000, account: acct)
      api.add_event(mine, account: acct)
      api.add_event(stripe_event("evt_other_#{SecureRandom.hex(3)}", Time.now.to_i - 4000, account: "acct_other"),
                    account: acct)
      st, out, err = reconcile(*endpoint_flags("billing", "billing=stripe:#{scope} account=#{acct} mode=test"))
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/listed=2 recovered=1 skipped=1 /)
      expect(recovered_ids).to eq([mine["id"]])
      expect(api.requests_to("/v1/events").last.account).to eq(acct)
    end

    it "refuses a refused key, a key of the other mode, a missing key and a non-loopback test API, never printing a key" do
      st, _o, err = reconcile(*endpoint_flags, e: env.merge("WEBHOOK_INBOX_BILLING_API_KEY" => "sk_test_wrong"))
      expect([st.exitstatus, err]).to match([2, /refused the API key of endpoint billing \(HTTP 401\)/])
      expect(err).not_to include("sk_test_wrong")
      st, _o, err = reconcile(*endpoint_flags("billing", "billing=stripe:#{scope} mode=live"))
      expect([st.exitstatus, err]).to match([2, /mode=live but the API key is a test key/])
      st, _o, err = reconcile(*endpoint_flags, e: env.merge("WEBHOOK_INBOX_BILLING_API_KEY" => nil))
      expect([st.exitstatus, err]).to match([2, /no API key: set WEBHOOK_INBOX_BILLING_API_KEY/])
      st, _o, err = reconcile(*endpoint_flags, e: env.merge("WEBHOOK_INBOX_TEST_STRIPE_API" => "https://api.example.com"))
      expect([st.exitstatus, err]).to match([2, /must be a loopback http:\/\/ URL/])
      expect(err).not_to include(STRIPE_KEY)
    end

    def reconcile_counts(logs)
      fams = logs.map { |l| scrape_sidecar(l) }
      sum = lambda do |name, labels|
        fams.sum { |f| PrometheusText.value(f, name, labels) or raise "#{name}#{labels} not served" }
      end
      { recovered: sum.call("webhook_inbox_reconcile_recovered_total", "endpoint" => "billing"),
        **%w[complete failed locked].to_h do |r|
          [r.to_sym, sum.call("webhook_inbox_reconcile_walks_total", "endpoint" => "billing", "result" => r)]
        end }
    end

    it "runs on a schedule with run --reconcile NAME=INTERVAL, one sidecar of two walking it at a time, counted in /metrics" do
      events = seed_stripe(120, "sch#{SecureRandom.hex(3)}")
      events.drop(20).each { |e| db.insert_event(e["id"], e["type"], e, scope: scope) }
      logs = Array.new(2) do
        spawn_sidecar("run", "--database-url", db.url, "--endpoint", "billing=stripe:#{scope}", "--reconcile", "billing=1m",
                      "--unrouted", "wait", "--metrics-listen", "127.0.0.1:0", env: env)[1]
      end
      # Declared at 0 before the first walk (so the first one is an increase).
      expect(reconcile_counts(logs)).to eq(recovered: 0, complete: 0, failed: 0, locked: 0)
      wait_for(30, 0.2, "the scheduled walk") { logs.any? { |l| File.read(l).include?("msg=reconcile endpoint=billing") } }
      expect(rows("recovered_at IS NOT NULL")).to eq(20)
      expect(rows).to eq(120)
      walks = logs.sum { |l| File.read(l).scan(/msg=reconcile endpoint=billing .*recovered=(\d+)/).flatten.map(&:to_i).sum }
      expect(walks).to eq(20) # whoever walked, each event once
      counts = reconcile_counts(logs)
      expect(counts).to include(recovered: 20, failed: 0)
      expect(counts[:complete]).to be >= 1
    end

    it "counts a scheduled walk the provider refuses as failed in /metrics" do
      log = spawn_sidecar("run", "--database-url", db.url, "--endpoint", "billing=stripe:#{scope}", "--reconcile", "billing=1m",
                          "--unrouted", "wait", "--metrics-listen", "127.0.0.1:0",
                          env: env.merge("WEBHOOK_INBOX_BILLING_API_KEY" => "sk_test_wrong"))[1]
      wait_for(30, 0.2, "the refused walk") { File.read(log).include?("msg=reconcile_failed endpoint=billing") }
      expect(reconcile_counts([log])).to eq(recovered: 0, complete: 0, failed: 1, locked: 0)
    end
  end

  describe "GitHub" do
    let(:scope) { "github:#{SecureRandom.hex(4)}" }
    let(:receiver) do
      WebhookInbox::Endpoint.new(provider: :github, secrets: [GH_SECRET], source_scope: scope, database_url: db.url)
    end

    def github_request(guid, payload)
      body = JSON.generate(payload)
      headers = WebhookInbox::Testing::Signing.headers(:github, body, secret: GH_SECRET, id: guid, type: "issues")
      [body, headers]
    end

    it "asks GitHub to redeliver a failed delivery; the receiver stores it under its body's SHA-256, marked recovered" do
      hook = "repos/acme/app/hooks/#{rand(1..99_999)}"
      ok_body, ok_headers = github_request("g-ok-#{SecureRandom.hex(3)}", { "action" => "opened", "n" => 1 })
      bad_body, bad_headers = github_request("g-bad-#{SecureRandom.hex(3)}", { "action" => "closed", "n" => 2 })
      receiver.call(rack_request("/gh", ok_body, ok_headers))
      api.add_delivery(guid: ok_headers["X-GitHub-Delivery"], event: "issues", body: ok_body, headers: ok_headers,
                       status_code: 200, delivered_at: Time.now - 3600)
      failed_id = api.add_delivery(guid: bad_headers["X-GitHub-Delivery"], event: "issues", body: bad_body,
                                   headers: bad_headers, status_code: 500, delivered_at: Time.now - 3500)
      api.deliver = ->(body, headers) { receiver.call(rack_request("/gh", body, headers))[0] }
      flags = ["--endpoint", "gh=github:#{scope} hook=#{hook}", "--endpoint", "gh"]

      st, out, err = reconcile(*flags)
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/reconcile gh: pages=1 listed=2 recovered=1 /)
      posts = api.requests_to("/#{hook}/deliveries/").select { |r| r.method == "POST" }
      expect(posts.map(&:path)).to eq(["/#{hook}/deliveries/#{failed_id}/attempts"])
      expect(rows).to eq(2)
      expect(recovered_ids).to eq([Digest::SHA256.hexdigest(bad_body)]) # the key its delivery would have had

      st, out, err = reconcile(*flags) # the redelivery succeeded: nothing to ask for
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/recovered=0 /)
      expect(api.requests_to("/#{hook}/deliveries/").count { |r| r.method == "POST" }).to eq(1)
      expect(receiver.call(rack_request("/gh", bad_body, bad_headers))[2].join).to include("duplicate")
    end

    it "marks a redelivery that arrived after its walk at the next walk, never on the receipt path nor the original" do
      trigger = "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'webhook_inbox'::regclass AND NOT tgisinternal " \
                "AND tgname = 'webhook_inbox_mark_redelivered'"
      expect(db.value(trigger)).to eq("0") # db/012: the receipt runs no lookup
      early_body, early_headers = github_request("g-early-#{SecureRandom.hex(3)}", { "action" => "opened", "n" => 3 })
      late_body, late_headers = github_request("g-late-#{SecureRandom.hex(3)}", { "action" => "closed", "n" => 4 })
      receiver.call(rack_request("/gh", early_body, early_headers)) # stored, though GitHub counted it failed
      guids = [early_headers, late_headers].map { |h| h["X-GitHub-Delivery"] }
      db.psql("INSERT INTO webhook_inbox_redeliveries (source_scope, delivery_guid, requested_id, delivery_id) " \
              "VALUES (#{db.q(scope)}, #{db.q(guids[0])}, 1, 1), (#{db.q(scope)}, #{db.q(guids[1])}, 2, 2)")
      receiver.call(rack_request("/gh", late_body, late_headers)) # GitHub's redelivery, after the walk that asked
      expect(rows).to eq(2)
      expect(rows("recovered_at IS NOT NULL")).to eq(0)

      st, out, err = reconcile("--endpoint", "gh=github:#{scope} hook=repos/acme/app/hooks/7", "--endpoint", "gh")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/reconcile gh: pages=1 listed=0 recovered=0 .* marked=1\b/)
      expect(recovered_ids).to eq([Digest::SHA256.hexdigest(late_body)])
      settled = "SELECT coalesce(string_agg(delivery_guid, ','), '') FROM webhook_inbox_redeliveries " \
                "WHERE source_scope = #{db.q(scope)} AND settled_at IS NOT NULL"
      expect(db.value(settled)).to eq(guids[1]) # the original's request is still looked for, for an hour
    end

    # A GitHub App's own webhook: app=APP_ID, GET /app/hook/deliveries with a JWT minted from
    # WEBHOOK_INBOX_GA_APP_PRIVATE_KEY (no API key), which the fake verifies with the public key.
    describe "App webhook (app=)" do
      let(:flags) { ["--endpoint", "ga=github:#{scope} app=#{GH_APP_ID}", "--endpoint", "ga"] }

      def app_posts
        api.requests_to("/app/hook/deliveries/").select { |r| r.method == "POST" }
      end

      def key_lines(key)
        key.to_pem.lines.map(&:strip).reject { |l| l.start_with?("-----") }
      end

      it "redelivers a failed App delivery exactly once, marked recovered like a repository hook's" do
        ok_body, ok_headers = github_request("ga-ok-#{SecureRandom.hex(3)}", { "action" => "created", "n" => 1 })
        bad_body, bad_headers = github_request("ga-bad-#{SecureRandom.hex(3)}", { "action" => "deleted", "n" => 2 })
        receiver.call(rack_request("/gh", ok_body, ok_headers))
        api.add_delivery(guid: ok_headers["X-GitHub-Delivery"], event: "installation", body: ok_body,
                         headers: ok_headers, status_code: 200, delivered_at: Time.now - 3600, app: true)
        failed_id = api.add_delivery(guid: bad_headers["X-GitHub-Delivery"], event: "installation", body: bad_body,
                                     headers: bad_headers, status_code: 502, delivered_at: Time.now - 3500, app: true)
        # a repository hook's failed attempt: not the App's webhook, not listed for it
        api.add_delivery(guid: "g-repo-#{SecureRandom.hex(3)}", event: "issues", body: "{}", headers: {},
                         status_code: 500, delivered_at: Time.now - 3400)
        api.deliver = ->(body, headers) { receiver.call(rack_request("/gh", body, headers))[0] }

        st, out, err = reconcile(*flags)
        expect(st.exitstatus).to eq(0), err
        expect(out).to match(/reconcile ga: pages=1 listed=2 recovered=1 .*marked=1\b/)
        expect(app_posts.map(&:path)).to eq(["/app/hook/deliveries/#{failed_id}/attempts"])
        expect(rows).to eq(2)
        expect(recovered_ids).to eq([Digest::SHA256.hexdigest(bad_body)]) # webhook_inbox_reconcile_mark (db/012)
        claims = api.app_claims
        expect(claims.size).to eq(2) # the list and the redelivery, each verified
        expect(claims).to all(include("iss" => GH_APP_ID))
        expect(claims.map { |c| c["exp"] - c["iat"] }).to all(eq(600))

        st, out, err = reconcile(*flags) # the redelivery succeeded: nothing to ask for
        expect(st.exitstatus).to eq(0), err
        expect(out).to match(/reconcile ga: pages=1 listed=3 recovered=0 /)
        expect(app_posts.size).to eq(1)
        expect(receiver.call(rack_request("/gh", bad_body, bad_headers))[2].join).to include("duplicate")
        expect(out + err).not_to include(*key_lines(GH_APP_KEY))
      end

      it "reports a JWT GitHub refuses (401) and a missing or malformed key, never printing the key" do
        other = OpenSSL::PKey::RSA.new(2048)
        st, _o, err = reconcile(*flags, e: env.merge("WEBHOOK_INBOX_GA_APP_PRIVATE_KEY" => other.to_pem))
        expect([st.exitstatus, err]).to match([2, /refused the App JWT \(app=, its private key\) of endpoint ga \(HTTP 401\)/])
        expect(err).not_to include(*key_lines(other))
        expect(err).not_to include("PRIVATE KEY")
        st, _o, err = reconcile("--endpoint", "ga=github:#{scope} app=999", "--endpoint", "ga") # another App's id
        expect([st.exitstatus, err]).to match([2, /refused the App JWT .* \(HTTP 401\)/])
        expect(api.app_claims).to be_empty

        asked = api.requests_to("/app/").size
        st, _o, err = reconcile(*flags, e: env.merge("WEBHOOK_INBOX_GA_APP_PRIVATE_KEY" => nil))
        expect([st.exitstatus, err]).to match([2, /no App private key: set WEBHOOK_INBOX_GA_APP_PRIVATE_KEY/])
        bad = "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0LWJ1dC1ub3QtYS1rZXk=\n-----END RSA PRIVATE KEY-----\n"
        st, _o, err = reconcile(*flags, e: env.merge("WEBHOOK_INBOX_GA_APP_PRIVATE_KEY" => bad))
        expect([st.exitstatus, err]).to match([2, /WEBHOOK_INBOX_GA_APP_PRIVATE_KEY: the private key is not an unencrypted PEM/])
        expect(err).not_to include("c2VjcmV0")
        big = OpenSSL::PKey::RSA.new(4096) # its JWT does not fit the Authorization line: refused, not cut
        st, _o, err = reconcile(*flags, e: env.merge("WEBHOOK_INBOX_GA_APP_PRIVATE_KEY" => big.to_pem))
        expect([st.exitstatus, err]).to match([2, /the App's JWT is too long for a header/])
        expect(err).not_to include(*key_lines(big))
        st, _o, err = reconcile("--endpoint", "ga=github:#{scope} app=1 hook=repos/a/b/hooks/1", "--endpoint", "ga")
        expect([st.exitstatus, err]).to match([2, /hook= or app=, not both/])
        expect(api.requests_to("/app/").size).to eq(asked) # refused before any request
      end

      it "has a fake that refuses a token living longer than 10 minutes or signed by another key" do
        token = lambda do |key, iat, exp|
          enc = ->(s) { Base64.urlsafe_encode64(s, padding: false) }
          input = "#{enc.(JSON.generate(alg: "RS256", typ: "JWT"))}.#{enc.(JSON.generate(iat: iat, exp: exp, iss: GH_APP_ID))}"
          "#{input}.#{enc.(key.sign("SHA256", input))}"
        end
        get = lambda do |t|
          uri = URI("#{api.url}/app/hook/deliveries")
          Net::HTTP.start(uri.host, uri.port) { |h| h.get(uri.path, "Authorization" => "Bearer #{t}").code }
        end
        now = Time.now.to_i
        expect(get.(token.(GH_APP_KEY, now - 60, now + 540))).to eq("200")
        expect(get.(token.(GH_APP_KEY, now - 60, now + 640))).to eq("401")
        expect(get.(token.(GH_APP_KEY, now - 700, now - 100))).to eq("401")
        expect(get.(token.(OpenSSL::PKey::RSA.new(2048), now - 60, now + 540))).to eq("401")
      end

      it "walks the App's deliveries page by page, waits out a short 429, resumes after a long one, redelivering each once" do
        now = Time.now
        failed = []
        ids = Array.new(250) do |i| # oldest first: ids[249] is listed first, 100 a page
          body, headers = github_request("ga-#{i}-#{SecureRandom.hex(3)}", { "action" => "created", "n" => i })
          code = (i % 50 == 7) ? 500 : 200
          id = api.add_delivery(guid: headers["X-GitHub-Delivery"], event: "installation", body: body,
                                headers: headers, status_code: code, delivered_at: now - 3600 - ((249 - i) * 10),
                                app: true)
          failed << [id, body] if code == 500
          id
        end
        api.deliver = ->(body, headers) { receiver.call(rack_request("/gh", body, headers))[0] }
        page2 = ->(r) { r.method == "GET" && r.params["cursor"] == "v1_#{ids[150]}" }
        page3 = ->(r) { r.method == "GET" && r.params["cursor"] == "v1_#{ids[50]}" }
        api.fault(status: 429, retry_after: 1, &page2)    # waited out: the same page again
        api.fault(status: 429, retry_after: 3600, &page3) # beyond 60s: the walk stops, cursor kept

        st, _out, err = reconcile(*flags)
        expect(st.exitstatus).to eq(1)
        expect(err).to include("rate limited (HTTP 429, Retry-After 3600s)")
        expect(app_posts.size).to eq(4) # pages 1 and 2: i = 157, 207, 57, 107

        st, out, err = reconcile(*flags)
        expect(st.exitstatus).to eq(0), err
        expect(out).to match(/reconcile ga: pages=1 listed=50 recovered=1 .*marked=5\b.*resumed a walk stopped before/)
        gets = api.requests_to("/app/hook/deliveries").select { |r| r.method == "GET" }.map { |r| r.params["cursor"] }
        expect(gets).to eq([nil, "v1_#{ids[150]}", "v1_#{ids[150]}", "v1_#{ids[50]}", "v1_#{ids[50]}"])
        expect(app_posts.map { |r| r.path[%r{/(\d+)/attempts}, 1].to_i }.sort).to eq(failed.map(&:first).sort)
        expect(recovered_ids).to eq(failed.map { |_id, body| Digest::SHA256.hexdigest(body) }.sort)

        st, out, err = reconcile(*flags, "--since", "72h") # a new walk over everything: nothing twice
        expect(st.exitstatus).to eq(0), err
        expect(out).to match(/reconcile ga: pages=3 listed=255 recovered=0 /)
        expect(app_posts.size).to eq(5)
      end
    end
  end

  # The walk of an event-list provider (Paddle, Square): a gap recovered once under the key the
  # receiver gives its delivery, late deliveries answered duplicate; a 429 mid-pagination
  # stops the walk and the next one resumes at that page; 5xx and a page cut off halfway are
  # asked for again; a refused key is refused.
  shared_examples "an event list" do
    def page_request?(r, n)
      r.path == path && page_of(r) == n
    end

    def gap_walk
      events = seed(count)
      gap = events[100, 50]
      (events - gap).each { |e| db.insert_event(e.fetch(id_field), e.fetch(type_field), e, scope: scope) }
      st, out, err = reconcile(*flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      [events, gap, out]
    end

    it "recovers a 50-event gap exactly once, keyed as the receiver keys a delivery; late deliveries are duplicates" do
      _events, gap, out = gap_walk
      expect(out).to match(/reconcile #{name}: pages=3 listed=#{listed} recovered=50 /)
      expect(rows).to eq(count)
      expect(recovered_ids).to eq(gap.map { |e| e[id_field] }.sort)
      stored = db.value("SELECT payload FROM webhook_inbox WHERE source_scope = #{db.q(scope)} " \
                        "AND event_id = #{db.q(gap[0][id_field])}")
      expect(JSON.parse(stored)).to eq(gap[0])

      expect(gap.first(10).map { |e| deliver(e) }).to all(eq([200, "duplicate"]))
      st, out, err = reconcile(*flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/recovered=0 /)
      expect(rows("recovered_at IS NOT NULL")).to eq(50)
      expect(out + err).not_to include(key)
    end

    it "resumes a walk a 429 stopped at that page; a 5xx and a page cut off halfway are asked for again" do
      events = seed(count)
      api.fault(status: 503) { |r| page_request?(r, 2) }
      api.fault(cut: true) { |r| page_request?(r, 2) }
      api.fault(status: 429, retry_after: 3600) { |r| page_request?(r, last_page) }
      before = api.requests_to(path).size

      st, _out, err = reconcile(*flags, "--since", "72h")
      expect(st.exitstatus).to eq(1)
      expect(err).to include("rate limited (HTTP 429, Retry-After 3600s)").and include("msg=reconcile_retry")
      done = rows
      expect(done).to be_between(1, count - 1)

      st, out, err = reconcile(*flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to include("resumed a walk stopped before").and match(/pages=1 listed=\d+ recovered=#{count - done} /)
      expect(rows).to eq(count)
      expect(recovered_ids.size).to eq(events.size)
      tries = api.requests_to(path)[before..].map { |r| page_of(r) }
      expect(tries.count(2)).to eq(3)          # 503, cut off, then read
      expect(tries.count(last_page)).to eq(2)  # 429 (the walk stopped), then the next walk
    end

    it "keys an event id past 255 bytes as the receiver does: recovered once, its delivery then a duplicate" do
      events = seed(2)
      long = events[0].merge(id_field => "#{events[0][id_field]}_#{"\u00e9" * 150}") # 300+ bytes, not ASCII
      add_listed(long)
      st, out, err = reconcile(*flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/recovered=3 /)
      key = "sha256:#{OpenSSL::Digest.hexdigest("SHA256", long[id_field])}"
      expect(recovered_ids).to eq((events.map { |e| e[id_field] } + [key]).sort)
      stored = db.value("SELECT payload FROM webhook_inbox WHERE source_scope = #{db.q(scope)} AND event_id = #{db.q(key)}")
      expect(JSON.parse(stored)).to eq(long)
      expect(deliver(long)).to eq([200, "duplicate"])
      st, out, err = reconcile(*flags, "--since", "72h")
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/recovered=0 /)
      expect(rows).to eq(3)
    end

    it "refuses a key the provider refuses (401), never printing it" do
      st, _o, err = reconcile(*flags, e: env.merge(key_env => "#{key}wrong"))
      expect([st.exitstatus, err]).to match([2, /refused the API key of endpoint #{name} \(HTTP 401\)/])
      expect(err).not_to include(key)
      expect(rows).to eq(0)
    end
  end

  describe "Paddle" do
    let(:scope) { "paddle:#{SecureRandom.hex(4)}:sandbox" }
    let(:name) { "pad" }
    let(:key) { PADDLE_KEY }
    let(:key_env) { "WEBHOOK_INBOX_PAD_API_KEY" }
    let(:id_field) { "event_id" }
    let(:type_field) { "event_type" }
    let(:path) { "/events" }
    let(:count) { 450 } # 200 a page: 3 pages, the young and the old event among them
    let(:listed) { 452 }
    let(:last_page) { 3 }
    let(:flags) { ["--endpoint", "pad=paddle:#{scope}", "--endpoint", "pad"] }

    # n events, one a minute back from 1h ago; ids sort as Paddle's do (by time). Plus one
    # younger than the grace and one older than --since: listed, skipped.
    def seed(n)
      now = Time.now.to_i
      stamp = ->(t) { Time.at(t).utc.iso8601(6) }
      ev = ->(t, i) { { "event_id" => format("evt_%010d%04d%s", t, i, SecureRandom.hex(4)), "event_type" => "transaction.completed",
                        "occurred_at" => stamp.(t), "data" => { "id" => "txn_#{i}", "status" => "completed" } } }
      api.add_paddle_event(ev.(now - 30, 9999))
      api.add_paddle_event(ev.(now - (80 * 3600), 9998))
      Array.new(n) { |i| ev.(now - 3600 - (i * 60), i).tap { |e| api.add_paddle_event(e) } }
    end

    def add_listed(event) = api.add_paddle_event(event)

    def page_of(r)
      ids = api.instance_variable_get(:@paddle).map { |e| e["event_id"] }.sort.reverse
      r.params["after"] ? (ids.index(r.params["after"]) + 1) / 200 + 1 : 1
    end

    def deliver(event)
      body = JSON.generate(event.merge("notification_id" => "ntf_#{SecureRandom.hex(8)}"))
      receiver = WebhookInbox::Endpoint.new(provider: :paddle, secrets: [PADDLE_SECRET], source_scope: scope,
                                            database_url: db.url)
      status, _h, out = receiver.call(rack_request("/webhooks/paddle", body,
                                                   WebhookInbox::Testing::Signing.headers(:paddle, body, secret: PADDLE_SECRET)))
      [status, JSON.parse(out.join)["status"]]
    end

    include_examples "an event list"

    it "lists newest first and refuses mode=live with a sandbox key" do
      seed(3)
      st, _o, err = reconcile(*flags)
      expect(st.exitstatus).to eq(0), err
      expect(api.requests_to("/events").last.params).to include("order_by" => "id[DESC]", "per_page" => "200")
      st, _o, err = reconcile("--endpoint", "pad=paddle:#{scope} mode=live", "--endpoint", "pad")
      expect([st.exitstatus, err]).to match([2, /mode=live but the API key is a sandbox key/])
    end
  end

  describe "Square" do
    let(:scope) { "square:#{SecureRandom.hex(4)}:live" }
    let(:merchant) { "MLSQ#{SecureRandom.hex(4).upcase}" }
    let(:name) { "sq" }
    let(:key) { SQUARE_TOKEN }
    let(:key_env) { "WEBHOOK_INBOX_SQ_API_KEY" }
    let(:id_field) { "event_id" }
    let(:type_field) { "type" }
    let(:path) { "/v2/events/search" }
    let(:count) { 250 } # 100 a page, filtered by time and merchant on Square's side: 3 pages
    let(:listed) { 250 }
    let(:last_page) { 3 }
    let(:flags) { ["--endpoint", "sq=square:#{scope} merchant=#{merchant}", "--endpoint", "sq"] }

    # n events of the merchant, one a minute back from 1h ago, and one of another merchant.
    def seed(n)
      base = Time.now.to_i - 3600
      ev = ->(m, t, i) { { "merchant_id" => m, "type" => "payment.updated", "event_id" => SecureRandom.uuid,
                           "created_at" => Time.at(t).utc.iso8601(3),
                           "data" => { "type" => "payment", "id" => "pay_#{i}", "object" => { "payment" => { "id" => "pay_#{i}" } } } } }
      api.add_square_event(ev.("MOTHER", base, 0))
      Array.new(n) { |i| ev.(merchant, base - (i * 60), i).tap { |e| api.add_square_event(e) } }
    end

    def add_listed(event) = api.add_square_event(event)

    def page_of(r)
      return 1 unless r.params["cursor"]

      mine = api.instance_variable_get(:@square).select { |e| e["merchant_id"] == merchant }
      ids = mine.sort_by { |e| [e["created_at"], e["event_id"]] }.reverse.map { |e| e["event_id"] }
      (ids.index(Base64.strict_decode64(r.params["cursor"])) + 1) / 100 + 1
    end

    def deliver(event)
      body = JSON.generate(event)
      receiver = WebhookInbox::Endpoint.new(provider: :square, secrets: [SQUARE_KEY], source_scope: scope,
                                            database_url: db.url, public_url: SQUARE_URL)
      status, _h, out = receiver.call(rack_request("/webhooks/square", body,
                                                   WebhookInbox::Testing::Signing.headers(:square, body, secret: SQUARE_KEY, url: SQUARE_URL)))
      [status, JSON.parse(out.join)["status"]]
    end

    include_examples "an event list"

    it "asks for the merchant's events of the window, newest first, and starts no earlier than Square keeps (28 days)" do
      seed(2)
      st, out, err = reconcile(*flags, "--since", "900h") # 37.5 days: Square refuses a start older than 28
      expect(st.exitstatus).to eq(0), err
      expect(out).to match(/listed=2 recovered=2 /)
      q = api.requests_to(path).last.params
      expect(q).to include("merchant_ids" => [merchant], "order" => "DESC", "limit" => 100)
      expect(Time.iso8601(q["start_at"])).to be > Time.now - (28 * 86_400)
    end
  end
end
