# frozen_string_literal: true

require "spec_helper"
require "cgi"
require "json"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"
require_relative "../support/dashboard_client"

# Issue 10 items 1 and 5: the engine mounted in spec/rails_app (API-only) under a real Puma,
# behind the app's own basic auth (AdminController): auth, CSRF, filters, keyset pages,
# redaction, confirmed requeue/replay with an audit row, rejected deliveries on the overview.
RSpec.describe "WebhookInbox::Engine (the dashboard) over HTTP" do
  include ReceiverHelpers

  SCOPE = "stripe:acct_dash:live"
  DASHBOARD_SECRET = "whsec_dashboard_spec"

  before(:all) do
    @pg = TestDatabase.cluster
    # A database of its own: other specs use the cluster's default one (same event ids).
    @db = ReceiverHelpers.schema_database(@pg, "dash")
    app = File.join(ReceiverHelpers::ROOT, "spec/rails_app")
    @puma = PumaProcess.new(rackup: File.join(app, "config.ru"), dir: app, threads: "4:4",
                            env: { "DATABASE_URL" => @pg.url(@db), "RAILS_ENV" => "production", "SECRET_KEY_BASE" => "d" * 64,
                                   "STRIPE_WEBHOOK_SECRET" => DASHBOARD_SECRET, "STRIPE_SCOPE" => SCOPE,
                                   "ADMIN_USER" => "ops", "ADMIN_PASSWORD" => "correct horse",
                                   "WI_DASHBOARD_PAGE_SIZE" => "3", "WI_REJECTIONS_FLUSH" => "0.5",
                                   "WI_LOG_NOTIFICATIONS" => "1", "WI_CLEANUP_HELD_TRANSACTIONS" => "3" }).start
  end
  after(:all) { @puma&.stop }

  before do
    db_psql("DELETE FROM webhook_inbox WHERE source_scope LIKE 'dash:%'; TRUNCATE webhook_inbox_actions")
  end

  def db_psql(sql) = @pg.psql(sql, db: @db)

  let(:admin) { DashboardClient.new(@puma.port, user: "ops", password: "correct horse") }

  # payload: a Hash, or JSON text as is (e.g. nested deeper than JSON.generate goes).
  def insert(id, status: "pending", type: "invoice.paid", scope: "dash:a", error: nil, received: "now()", payload: {})
    db_psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, last_error, received_at, processed_at)
      VALUES ('#{scope}', '#{id}', '#{type}', '#{payload.is_a?(String) ? payload : JSON.generate(payload)}', '#{status}', #{error ? "'#{error}'" : 'NULL'},
              #{received}, CASE WHEN '#{status}' <> 'pending' THEN now() END)
    SQL
  end

  def event_ids(body)
    body.scan(%r{<a href="/webhook_inbox/event\?id=([^&"]+)&amp;scope=}).flatten.map { |s| CGI.unescape(s) }
  end

  it "is behind the app's own authentication" do
    expect(DashboardClient.new(@puma.port).get("/webhook_inbox").first).to eq(401)
    expect(DashboardClient.new(@puma.port, user: "ops", password: "wrong").get("/webhook_inbox/events").first).to eq(401)
    status, _, body = admin.get("/webhook_inbox")
    expect(status).to eq(200)
    expect(body).to include("Overview", "<svg", "pending", "latency p50 / p95 / p99")
    expect(body).not_to match(/<script|<link[^>]+stylesheet|https?:\/\/(?!www\.w3\.org)/) # no JS, assets or CDN
  end

  it "refuses a POST without the CSRF token, and records a confirmed requeue with who and when" do
    insert("evt_q", status: "quarantined", error: "WIR02: amount is null")
    admin.get("/webhook_inbox/bulk?kind=requeue&scope=dash:a&event_id=evt_q")
    status, = admin.post("/webhook_inbox/bulk", { "kind" => "requeue", "scope" => "dash:a", "event_id" => "evt_q" }, token: false)
    expect(status).to eq(422)
    expect(db_psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_q'").strip).to eq("quarantined")

    status, _, body = admin.get("/webhook_inbox/bulk?kind=requeue&scope=dash:a&event_id=evt_q")
    expect(status).to eq(200)
    expect(body).to match(%r{<strong>1</strong> quarantined event\s+matches now})
    status, headers, = admin.post("/webhook_inbox/bulk", { "kind" => "requeue", "scope" => "dash:a", "event_id" => "evt_q",
                                                           "expected" => "1" })
    expect(status).to eq(302)
    expect(headers["location"]).to end_with("/webhook_inbox/event?id=evt_q&scope=dash%3Aa")
    expect(db_psql("SELECT status, requeued_at IS NOT NULL FROM webhook_inbox WHERE event_id = 'evt_q'").strip).to eq("pending|t")
    expect(db_psql("SELECT actor, action, count FROM webhook_inbox_actions").strip).to eq("ops|requeue|1")
    # requeue.webhook_inbox in the app: exactly its documented keys, the filter as audited, no payload.
    note = File.readlines(@puma.log).grep(/\Anotification requeue\.webhook_inbox /).last
    expect(note).not_to be_nil
    expect(JSON.parse(note.split(" ", 3).last)).to eq(
      "kind" => "requeue", "filter" => { "scope" => "dash:a", "event_id" => "evt_q" }, "moved" => 1,
      "action_id" => Integer(db_psql("SELECT max(id) FROM webhook_inbox_actions").strip), "actor" => "ops"
    )
    _, _, body = admin.get(headers["location"].sub(%r{\Ahttp://[^/]+}, ""))
    expect(body).to include("Requeued 1 event (action #")
    expect(admin.get("/webhook_inbox/actions").last).to include("ops", "requeue", "{&quot;scope&quot;: &quot;dash:a&quot;")
  end

  it "refuses a bulk action without a filter (every quarantined event) and an unknown kind" do
    expect(admin.get("/webhook_inbox/bulk?kind=requeue").first).to eq(422)
    expect(admin.get("/webhook_inbox/bulk?kind=delete&scope=dash:a").first).to eq(422)
  end

  # Issue 16 item 7: year 0000, a negative year, a +23:59 offset or a NUL in a date or a
  # cursor reached PostgreSQL and answered 500. Each value below, in each place, is 200 or 400
  # (404 for an event page naming no event).
  NASTY_TIMES = ["0000-01-01T00:00:00Z", "-0001-01-01T00:00:00Z", "2026-01-01T00:00:00+23:59", "2026-01-01T00:00:00+24:00",
                 "10000-01-01T00:00:00Z", "294277-01-01T00:00:00Z", "#{'9' * 40}-01-01T00:00:00Z", "2026-13-01T00:00",
                 "2026-02-30T00:00", "2026-01-01T24:00:00Z", "2026-01-01T00:00:00.#{'9' * 30}Z", "2026-01-01", "1e400",
                 "infinity", "-infinity", "epoch", "now", "allballs", "\0", "2026-01-01T00:00\0", " ", "\u00e9", "\u202e",
                 "\xFF".b, "%", "'; SELECT 1 --", "2026-01-01T00:00:00Z" * 200].freeze
  NASTY_TEXTS = ["\0", "a\0b", "\xFF\xFE".b, "\xC0\x80".b, "*", "%", "_", "\\", "'", "\u0000".b, "x" * 4000, "\u{1F600}"].freeze

  def query(pairs) = pairs.map { |k, v| "#{k}=#{CGI.escape(v)}" }.join("&")

  # A cursor as the list writes one (Base64 of a JSON array), of any values; bytes that are
  # not UTF-8 go into the JSON text as they are.
  def cursor(values)
    text = if values.is_a?(String) then values
           elsif values.all? { |v| v.dup.force_encoding("UTF-8").valid_encoding? } then JSON.generate(values.map { |v| v.dup.force_encoding("UTF-8") })
           else "[#{values.map { |v| %("#{v.b.gsub(/["\\]/) { |c| "\\#{c}" }}") }.join(',')}]"
           end
    [text].pack("m0").tr("+/", "-_").delete("=")
  end

  it "answers 200 or 400, never 500, to a nasty date, text or cursor in any parameter" do
    insert("evt_n1", status: "done")
    got = Hash.new { |h, k| h[k] = [] }
    try = ->(path) { got[admin.get(path).first] << path }
    NASTY_TIMES.each do |t|
      %w[from to].each do |k|
        try.("/webhook_inbox/events?#{query(k => t)}")
        try.("/webhook_inbox/bulk?#{query('kind' => 'replay', 'scope' => 'dash:a', k => t)}")
      end
      try.("/webhook_inbox/events?#{query('cursor' => cursor([t, 'dash:a', 'evt_n1']))}")
    end
    NASTY_TEXTS.each do |v|
      %w[scope event_id type error status].each do |k|
        try.("/webhook_inbox/events?#{query(k => v)}")
        try.("/webhook_inbox/bulk?#{query('kind' => 'replay', 'scope' => 'dash:a', k => v)}")
      end
      try.("/webhook_inbox/event?#{query('scope' => v, 'id' => 'evt_n1')}")
      try.("/webhook_inbox/event?#{query('scope' => 'dash:a', 'id' => v)}")
      try.("/webhook_inbox/events?#{query('cursor' => cursor(['2026-01-01T00:00:00.000000Z', v, v]))}")
      try.("/webhook_inbox/events?#{query('cursor' => v)}")
    end
    [%(["2026-01-01T00:00:00Z", "\\ud800", "x"]), "[" * 10_000, %({"a": 1}), "[1, 2, 3]", "\xFF\xFE".b, ""].each do |c|
      try.("/webhook_inbox/events?#{query('cursor' => cursor(c))}")
    end
    %w[from[]=x from[a]=b scope[]=a&scope[]=b cursor[]=x status[]=done].each do |q|
      try.("/webhook_inbox/events?#{q}")
      try.("/webhook_inbox/event?id=evt_n1&#{q.sub(/\A\w+/, 'scope')}")
    end
    expect(got.keys - [200, 400, 404]).to eq([]), got.except(200, 400, 404).transform_values { |v| v.first(3) }.inspect
    expect(got[404].grep_v(%r{\A/webhook_inbox/event\?})).to eq([]) # an event that does not exist
    expect(got[400]).to include("/webhook_inbox/events?#{query('from' => '0000-01-01T00:00:00Z')}",
                                "/webhook_inbox/event?#{query('scope' => "\0", 'id' => 'evt_n1')}")
    # a cursor this list did not write is the first page
    expect(event_ids(admin.get("/webhook_inbox/events?#{query('cursor' => cursor(['0000-01-01T00:00:00Z', 'dash:a', 'x']))}").last))
      .to include("evt_n1")
    expect(admin.get("/webhook_inbox/events?#{query('from' => '0000-01-01T00:00:00Z')}").last).to include("from: not a time")
  end

  # Issue 16 item 7: type=* and from=1970 passed the guard against a bulk action on every event.
  it "refuses a bulk action whose filter leaves out none of the events: type *, or a time range holding them all" do
    insert("evt_g1", status: "done", received: "now() - interval '2 days'")
    insert("evt_g2", status: "done", type: "charge.paid")
    iso = ->(sql) { db_psql("SELECT to_char((#{sql}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')").strip }
    oldest = db_psql("SELECT min(received_at) FROM webhook_inbox WHERE status = 'done'").strip
    newest = db_psql("SELECT max(received_at) FROM webhook_inbox WHERE status = 'done'").strip
    every = [{ "type" => "*" }, { "from" => "1970-01-01T00:00" }, { "to" => "9999-12-31T00:00" },
             { "from" => iso.("'#{oldest}'::timestamptz") }, { "type" => "*", "from" => "0001-01-01T00:00:00Z", "to" => "9999-01-01T00:00" },
             { "to" => iso.("'#{newest}'::timestamptz + interval '1 microsecond'") }]
    every.each do |f|
      expect([f, admin.get("/webhook_inbox/bulk?#{query(f.merge('kind' => 'replay'))}").first]).to eq([f, 422])
    end
    admin.get("/webhook_inbox/bulk?kind=replay&scope=dash:a&event_id=evt_g1") # a page, for the CSRF token
    expect(admin.post("/webhook_inbox/bulk", { "kind" => "replay", "type" => "*" }).first).to eq(422)
    expect(db_psql("SELECT count(*) FROM webhook_inbox WHERE event_id LIKE 'evt_g%' AND status = 'done'").to_i).to eq(2)
    narrow = [{ "type" => "charge.*" }, { "from" => iso.("'#{oldest}'::timestamptz + interval '1 microsecond'") },
              { "to" => iso.("'#{newest}'::timestamptz") }, { "scope" => "dash:a", "type" => "*" }]
    narrow.each do |f|
      status, _, body = admin.get("/webhook_inbox/bulk?#{query(f.merge('kind' => 'replay'))}")
      expect([f, status, body[%r{<strong>(\d+)</strong>}, 1]]).to eq([f, 200, f.key?("scope") ? "2" : "1"])
    end
  end

  it "filters by status, scope, type prefix, time range and error text; bulk replay counts the filter" do
    insert("evt_1", status: "done", type: "invoice.paid", received: "now() - interval '3 hours'")
    insert("evt_2", status: "quarantined", type: "invoice.failed", error: "WIR01: upstream TIMEOUT")
    insert("evt_3", status: "quarantined", type: "charge.failed", error: "WIR02: bad amount")
    insert("evt_4", status: "pending", type: "invoice.paid", scope: "dash:b")
    get = ->(query) { event_ids(admin.get("/webhook_inbox/events?#{query}").last).sort }
    expect(get.("scope=dash:a&status=quarantined")).to eq(%w[evt_2 evt_3])
    expect(get.("scope=dash:a&type=invoice.*")).to eq(%w[evt_1 evt_2])
    expect(get.("scope=dash:a&error=timeout")).to eq(%w[evt_2])
    expect(get.("scope=dash:b")).to eq(%w[evt_4])
    from = (Time.now.utc - 3600).strftime("%Y-%m-%dT%H:%M")
    expect(get.("scope=dash:a&from=#{from}")).to eq(%w[evt_2 evt_3])
    expect(get.("scope=dash:a&to=#{from}")).to eq(%w[evt_1])
    body = admin.get("/webhook_inbox/events?scope=dash:a&status=done").last
    expect(body).to include("Replay every done event matching this filter")
    expect(admin.get("/webhook_inbox/bulk?kind=replay&scope=dash:a").last).to match(%r{<strong>1</strong> done event})
  end

  it "pages with a cursor, newest first, without gaps or repeats (page size 3)" do
    7.times { |i| insert("evt_p#{i}", scope: "dash:p", received: "now() - interval '#{i} minutes'") }
    insert("evt_tie_a", scope: "dash:p", received: "'2020-01-01T00:00:00Z'")
    insert("evt_tie_b", scope: "dash:p", received: "'2020-01-01T00:00:00Z'")
    seen = []
    path = "/webhook_inbox/events?scope=dash:p"
    pages = 0
    while path
      body = admin.get(path).last
      seen.concat(event_ids(body))
      pages += 1
      path = body[%r{<a id="next-page" rel="next" href="([^"]+)"}, 1]&.then { |p| CGI.unescapeHTML(p) }
    end
    expect(pages).to eq(3)
    expect(seen).to eq(%w[evt_p0 evt_p1 evt_p2 evt_p3 evt_p4 evt_p5 evt_p6 evt_tie_b evt_tie_a])
    expect(admin.get("/webhook_inbox/events?cursor=garbage").first).to eq(200) # a bad cursor is the first page
  end

  it "shows one event's payload with secret-like keys redacted, and its runs" do
    payload = { "id" => "evt_r", "client_secret" => "pi_123_secret_abc", "data" => { "object" => {
      "card_number" => "4242424242424242", "cvc" => "123", "api_key" => "sk_live_x", "Authorization" => "Bearer y",
      "email" => "someone@example.com", "items" => [{ "password" => "hunter2" }] } } }
    insert("evt_r", status: "quarantined", error: "boom", payload: payload)
    db_psql(%(UPDATE webhook_inbox SET attempt_log = '[{"at": "2026-01-01T00:00:00.000Z", "result": "quarantined", "detail": "boom", "duration_ms": 12.5}]' WHERE event_id = 'evt_r'))
    status, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_r")
    expect(status).to eq(200)
    expect(body).not_to include("pi_123_secret_abc", "4242424242424242", "sk_live_x", "Bearer y", "hunter2", "&quot;123&quot;")
    expect(body).to include("someone@example.com", "[REDACTED]", "12.5", "boom", "Requeue…")
    expect(admin.get("/webhook_inbox/event?scope=dash:a&id=nope").first).to eq(404)
  end

  # Issue 16 item 6: JSON.parse's 100-level limit answered 500 for a payload that the verifier
  # and jsonb accept (jsonb takes 10,000 levels with the default max_stack_depth, not 20,000).
  it "shows any payload jsonb accepts: nested 150 or 10,000 levels deep (cut at 100, still redacted), numbers as stored" do
    [150, 10_000].each do |depth|
      inner = %({"note": "level 50", "password": "hunter2", "d": #{'[' * depth}{"token": "tok_deep"}#{']' * depth}})
      insert("evt_deep_#{depth}", payload: %({"id": "evt_deep", "api_key": "sk_live_deep", "d": #{'[' * 48}#{inner}#{']' * 48}}))
      status, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_deep_#{depth}")
      expect(status).to eq(200)
      pre = CGI.unescapeHTML(body[%r{<pre id="payload">(.*?)</pre>}m, 1])
      expect(pre).to include('"level 50"', "[nested deeper than 100 levels: not shown]", "[REDACTED]")
      expect(pre).not_to include("sk_live_deep", "hunter2", "tok_deep")
      expect(pre.count("[") - pre.scan("[REDACTED]").size - 1).to eq(100 - 2) # 2 objects above the arrays
      expect(body).to include("Nested deeper than 100 levels")
    end
    # As a Float, "huge" is Infinity (JSON.generate refuses it) and "tiny" 0.0.
    insert("evt_num", payload: %({"amount": 12.50, "huge": 1#{'0' * 400}.5, "tiny": 1e-400, "big": #{'9' * 500}}))
    status, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_num")
    expect(status).to eq(200)
    expect(CGI.unescapeHTML(body)).to include('"amount": 12.50', %("huge": 1#{'0' * 400}.5), %("tiny": 0.#{'0' * 399}1), "9" * 500)
    expect(body).not_to include("Nested deeper")
  end

  it "shows an event whose attempt_log was written by hand as something else than an array of runs" do
    insert("evt_log")
    ['{"at": "2026-01-01"}', '"text"', '[1, "two"]'].each do |log|
      db_psql("UPDATE webhook_inbox SET attempt_log = '#{log}' WHERE event_id = 'evt_log'")
      status, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_log")
      expect([status, body[/Runs \(\d+/]]).to eq([200, "Runs (0"])
    end
  end

  it "says when an event was recovered from the provider's API by reconcile, and nothing for a delivered one" do
    insert("evt_rec")
    insert("evt_del")
    db_psql("UPDATE webhook_inbox SET recovered_at = '2026-02-03 04:05:06+00' WHERE event_id = 'evt_rec'")
    _, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_rec")
    expect(body[%r{<td id="event-recovered">[^<]*</td>}]).to include("reconcile, 2026-02-03 04:05:06.000Z")
    _, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_del")
    expect(body).not_to include("event-recovered")
  end

  it "shows the request headers kept with an event (names sorted, redacted like the payload), or says none were kept" do
    insert("evt_hdr")
    db_psql(%(UPDATE webhook_inbox SET request_headers = '{"user-agent": "Stripe/1.0", "stripe-signature": "t=1,v1=ab", "x-client-secret": "cs_live_q"}' WHERE event_id = 'evt_hdr'))
    _, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_hdr")
    table = body[%r{<table id="headers">.*?</table>}m]
    expect(table).not_to be_nil
    expect(table.scan(%r{<th>([^<]+)</th>}).flatten).to eq(%w[stripe-signature user-agent x-client-secret])
    expect(table).to include("t=1,v1=ab", "Stripe/1.0", "[REDACTED]")
    expect(body).not_to include("cs_live_q")
    # kept before the credential rule was this broad (issue 16 item 4): masked by that same rule
    db_psql(%(UPDATE webhook_inbox SET request_headers = '{"x-auth-key": "ak_live_1", "cf-access-jwt-assertion": "eyJ_2", "x-fwd": "Bearer tok_3", "user-agent": "Stripe/1.0"}' WHERE event_id = 'evt_hdr'))
    _, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_hdr")
    table = body[%r{<table id="headers">.*?</table>}m]
    expect(table.scan("[REDACTED]").size).to eq(3)
    expect(body).not_to include("ak_live_1", "eyJ_2", "tok_3")
    expect(table).to include("Stripe/1.0")
    insert("evt_nohdr")
    _, _, body = admin.get("/webhook_inbox/event?scope=dash:a&id=evt_nohdr")
    expect(body).to include("Not kept for this event")
    expect(body).not_to include('<table id="headers">')
  end

  it "shows signature failures by scope and reason on the overview within seconds, never the body" do
    body = %({"id":"evt_forged","type":"invoice.paid","data":{"object":{"secret_marker":"do-not-store"}}})
    3.times do
      expect(@puma.post("/webhooks/stripe", body, WebhookInbox::TestHelpers.stripe_headers(body, secret: "whsec_wrong")).first)
        .to eq(401)
    end
    deadline = Time.now + 15
    sleep 0.2 until db_psql("SELECT coalesce(sum(count), 0) FROM webhook_inbox_rejections WHERE reason = 'signature_mismatch'").to_i >= 3 || Time.now > deadline
    page = admin.get("/webhook_inbox").last
    expect(page).to match(%r{<td>#{SCOPE}</td><td>signature_mismatch</td><td class="num">3</td>})
    expect(page).to include("Signature or timestamp failures")
    expect(page).to match(%r{<p class="muted" id="process-rejections">This process since it started: #{SCOPE} signature_mismatch: 3</p>})
    expect(db_psql("SELECT count(*) FROM webhook_inbox_rejections WHERE source_scope || reason LIKE '%do-not-store%'").to_i).to eq(0)
  end

  # Issue 33: a real long-open snapshot in the dashboard's database; held back past 3
  # transactions here (WI_CLEANUP_HELD_TRANSACTIONS: counted, no clock), named by pid and
  # application_name, never by its query; gone once it ends.
  it "says on the overview when VACUUM is held back, and by whom" do
    holder = PG.connect(@pg.url(@db))
    holder.exec("SET application_name = 'nightly_export'")
    holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.exec("SELECT 'query-text-never-shown', count(*) FROM webhook_inbox")
    3.times { db_psql("SELECT txid_current()") }
    page = admin.get("/webhook_inbox").last
    expect(page).to match(%r{<p class="warn" id="vacuum-held"><strong>VACUUM is held back</strong> by session pid #{holder.backend_pid} \(application_name &quot;nightly_export&quot;, idle in transaction, open \d+s, xmin \d+ transactions old\)})
    expect(page).not_to include("query-text-never-shown")
    holder.exec("COMMIT")
    expect(admin.get("/webhook_inbox").last).not_to include("vacuum-held")
  ensure
    holder&.close
  end
end
