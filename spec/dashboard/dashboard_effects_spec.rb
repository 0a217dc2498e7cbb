# frozen_string_literal: true

require "spec_helper"
require "cgi"
require "json"
require "open3"
require_relative "../support/receiver_helpers"
require_relative "../support/dashboard_client"

# Issue 18 item 4: the outbox on the dashboard, through the engine mounted in spec/rails_app
# under a real Puma (as dashboard_requests_spec.rb): the effects list (destination, Ruby
# handler, status, time; keyset pages), one effect (attempts, answer, error, its event), the
# event page's effects and Ruby handler runs, the confirmed and audited requeue of one effect
# or a filter, and rake webhook_inbox:requeue_effects; bad parameters are 400, never 500.
RSpec.describe "WebhookInbox::Engine, effects (the outbox) over HTTP" do
  def rails_app = File.join(ReceiverHelpers::ROOT, "spec/rails_app")

  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "dash_fx")
    @env = { "DATABASE_URL" => @pg.url(@db), "RAILS_ENV" => "production", "SECRET_KEY_BASE" => "f" * 64,
             "STRIPE_WEBHOOK_SECRET" => "whsec_dash_fx", "STRIPE_SCOPE" => "stripe:acct_fx:live",
             "ADMIN_USER" => "ops", "ADMIN_PASSWORD" => "correct horse", "WI_DASHBOARD_PAGE_SIZE" => "3" }
    @puma = PumaProcess.new(rackup: File.join(rails_app, "config.ru"), dir: rails_app, threads: "2:2", env: @env).start
  end
  after(:all) { @puma&.stop }

  before do
    db_psql("TRUNCATE webhook_inbox_outbox, webhook_inbox_actions, webhook_inbox_ruby_handlers; DELETE FROM webhook_inbox")
  end

  def db_psql(sql) = @pg.psql(sql, db: @db)

  let(:admin) { DashboardClient.new(@puma.port, user: "ops", password: "correct horse") }

  def effect(op, destination: "receipts", status: "pending", handler: nil, created: "now()", event: nil, error: nil,
             response_status: nil, excerpt: nil, payload: { "amount" => 100 })
    payload = { "handler" => handler } if handler
    scope, id = event
    db_psql(<<~SQL)
      INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, attempts, last_error, response_status,
                                        response_excerpt, source_scope, source_event_id, created_at, processed_at)
      VALUES ('#{op}', '#{handler ? 'ruby' : destination}', '#{JSON.generate(payload)}', '#{status}',
              #{status == 'pending' ? 0 : 3}, #{error ? "'#{error}'" : 'NULL'}, #{response_status || 'NULL'},
              #{excerpt ? "'#{excerpt}'" : 'NULL'}, #{scope ? "'#{scope}'" : "''"}, #{id ? "'#{id}'" : 'NULL'},
              #{created}, CASE WHEN '#{status}' <> 'pending' THEN now() END)
    SQL
  end

  def insert_event(id, status: "done", type: "invoice.paid", scope: "dash:fx")
    db_psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status) " \
            "VALUES ('#{scope}', '#{id}', '#{type}', '{\"id\": \"#{id}\"}', '#{status}')")
  end

  it "serves the list's keyset pages and an event's other effects through indexes (013), not a scan of the outbox" do
    plan = lambda do |sql|
      db_psql("SET enable_seqscan = off; SET enable_bitmapscan = off; EXPLAIN #{sql}")
    end
    expect(plan.("SELECT operation_id FROM webhook_inbox_outbox o WHERE (o.created_at, o.operation_id) < (now(), 'x' ) " \
                 "ORDER BY o.created_at DESC, o.operation_id DESC LIMIT 51")).to match(/Scan Backward using webhook_inbox_outbox_created_idx/)
    expect(plan.("SELECT operation_id FROM webhook_inbox_outbox o WHERE o.destination <> 'ruby' AND o.source_scope = 's' " \
                 "AND o.source_event_id = 'e' ORDER BY o.created_at, o.operation_id LIMIT 101")).to include("webhook_inbox_outbox_event_idx")
    expect(plan.("SELECT 1 FROM webhook_inbox_outbox o WHERE o.source_scope = 's' AND o.source_event_id = 'e' AND o.destination = 'ruby'"))
      .to include("webhook_inbox_outbox_ruby_event_idx")
  end

  def op_ids(body)
    body.scan(%r{<a href="/webhook_inbox/effect\?id=([^"]+)">}).flatten.map { |s| CGI.unescape(CGI.unescapeHTML(s)) }
  end

  def query(pairs) = pairs.map { |k, v| "#{k}=#{CGI.escape(v)}" }.join("&")

  # A Ruby script in spec/rails_app's environment (as `bin/rails runner` would run it).
  def in_app(script, env = {})
    Open3.capture3(@env.merge("RUBYLIB" => File.join(ReceiverHelpers::ROOT, "lib")).merge(env), RbConfig.ruby, "-e",
                   %(require "./config/environment"\n#{script}), chdir: rails_app)
  end

  it "lists effects newest first, filtered by destination, Ruby handler, status and time, in keyset pages" do
    effect("receipt:1", status: "delivered", created: "now() - interval '3 hours'", response_status: 200)
    effect("receipt:2", status: "quarantined", error: "HTTP 422: card declined", response_status: 422)
    effect("crm:1", destination: "crm", created: "now() - interval '2 minutes'")
    effect("handler_a", handler: "SendReceiptHandler", status: "quarantined", error: "WebhookInbox::Permanent: no email")
    effect("handler_b", handler: "MarkPaidHandler", status: "delivered", created: "now() - interval '1 minute'")
    get = ->(q) { op_ids(admin.get("/webhook_inbox/effects?#{q}").last).sort }
    expect(get.("destination=receipts")).to eq(%w[receipt:1 receipt:2])
    expect(get.("destination=ruby")).to eq(%w[handler_a handler_b])
    expect(get.("handler=SendReceiptHandler")).to eq(%w[handler_a])
    expect(get.("status=quarantined")).to eq(%w[handler_a receipt:2])
    expect(get.("status=delivered&destination=ruby")).to eq(%w[handler_b])
    expect(get.("error=DECLINED")).to eq(%w[receipt:2])
    from = (Time.now.utc - 3600).strftime("%Y-%m-%dT%H:%M")
    expect(get.("to=#{from}")).to eq(%w[receipt:1])
    expect(get.("from=#{from}&destination=receipts")).to eq(%w[receipt:2])
    body = admin.get("/webhook_inbox/effects?handler=SendReceiptHandler").last
    expect(body).to include("Ruby handler SendReceiptHandler", "quarantined", "no email")
    # the overview: per destination (webhook_inbox_outbox_stats), quarantined ones linked to their list
    outbox = admin.get("/webhook_inbox").last[%r{<table id="outbox">.*?</table>}m]
    rows = outbox.scan(%r{<tr><td><a href="[^"]+">([^<]+)</a></td>(.*?)</tr>}m).to_h { |d, rest| [d, rest.scan(%r{<td class="num">(?:<a[^>]*>)?([^<]*)}).flatten.values_at(0, 3, 4)] }
    expect(rows).to eq("crm" => %w[1 0 0], "receipts" => %w[0 1 1], "ruby (Ruby handlers)" => %w[0 1 1])
    expect(outbox).to include(%(href="/webhook_inbox/effects?destination=receipts&amp;status=quarantined"))

    # pages of 3 (WI_DASHBOARD_PAGE_SIZE): newest first, no gap or repeat, ties broken by operation id
    effect("tie_b", created: "'2020-01-01T00:00:00Z'")
    effect("tie_a", created: "'2020-01-01T00:00:00Z'")
    seen = []
    path = "/webhook_inbox/effects"
    pages = 0
    while path
      page = admin.get(path).last
      seen.concat(op_ids(page))
      pages += 1
      path = page[%r{<a id="next-page" rel="next" href="([^"]+)"}, 1]&.then { |p| CGI.unescapeHTML(p) }
    end
    expect(pages).to eq(3)
    expect(seen).to eq(%w[handler_a receipt:2 handler_b crm:1 receipt:1 tie_b tie_a])
  end

  it "answers 200 or 400, never 500, to nasty parameters, cursors and operation ids" do
    effect("receipt:n", status: "quarantined")
    cursor = ->(text) { [text].pack("m0").tr("+/", "-_").delete("=") }
    nasty = ["\0", "a\0b", "\xFF\xFE".b, "0000-01-01T00:00:00Z", "-0001-01-01T00:00:00Z", "2026-01-01T00:00:00+24:00",
             "infinity", "x" * 4000, "A-Z", "a b", "'; SELECT 1 --", "\u{1F600}", "*"]
    got = Hash.new { |h, k| h[k] = [] }
    try = ->(path) { got[admin.get(path).first] << path }
    nasty.each do |v|
      %w[status destination handler operation_id scope event_id from to error].each do |k|
        try.("/webhook_inbox/effects?#{query(k => v)}")
        try.("/webhook_inbox/effects/requeue?#{query('destination' => 'receipts', k => v)}")
      end
      try.("/webhook_inbox/effect?#{query('id' => v)}")
      try.("/webhook_inbox/effects?#{query('cursor' => v)}")
      try.("/webhook_inbox/effects?#{query('cursor' => cursor.(JSON.generate([v.dup.force_encoding('UTF-8').scrub, v.dup.force_encoding('UTF-8').scrub])))}")
    end
    %w[destination[]=x handler[a]=b id[]=x cursor[]=x].each do |q|
      try.("/webhook_inbox/effects?#{q}")
      try.("/webhook_inbox/effect?#{q}")
    end
    expect(got.keys - [200, 400, 404]).to eq([]), got.except(200, 400, 404).transform_values { |v| v.first(3) }.inspect
    expect(got[404].grep_v(%r{\A/webhook_inbox/effect\?})).to eq([])
    expect(got[400]).to include("/webhook_inbox/effects?#{query('destination' => 'A-Z')}",
                                "/webhook_inbox/effects?#{query('from' => '0000-01-01T00:00:00Z')}",
                                "/webhook_inbox/effects?#{query('status' => '*')}")
    status, _, body = admin.get("/webhook_inbox/effects?destination=crm&handler=X")
    expect([status, body]).to eq([400, "handler: only Ruby handler runs (destination ruby) have one"])
  end

  it "shows one effect: attempts, last answer and error, its payload and answer redacted, and the event that emitted it" do
    insert_event("evt_fx1")
    effect("receipt:r1", status: "quarantined", event: %w[dash:fx evt_fx1], error: "HTTP 422: rejected", response_status: 422,
                         excerpt: '{"error": "card declined", "client_secret": "pi_1_secret_zz", "id": "re_1"}',
                         payload: { "email" => "a@example.com", "api_key" => "sk_live_payload" })
    effect("receipt:r2", status: "pending", excerpt: %({"note": "cut", "access_token": "tok_cut_1), response_status: 500)
    effect("receipt:r3", status: "pending", excerpt: "upstream said token=tok_form_2&ok=1 Authorization: Bearer abc.def", response_status: 502)
    status, _, body = admin.get("/webhook_inbox/effect?id=receipt:r1")
    expect(status).to eq(200)
    expect(body[%r{<td id="effect-attempts">(\d+)</td>}, 1]).to eq("3")
    expect(body).to include("HTTP 422", "HTTP 422: rejected", "card declined", "a@example.com", "[REDACTED]", "Requeue…")
    expect(body).not_to include("pi_1_secret_zz", "sk_live_payload")
    expect(body[%r{<td id="effect-event">.*?</td>}m]).to include(%(href="/webhook_inbox/event?id=evt_fx1&amp;scope=dash%3Afx"))
    %w[receipt:r2 receipt:r3].each do |op|
      status, _, body = admin.get("/webhook_inbox/effect?id=#{op}")
      answer = CGI.unescapeHTML(body[%r{<pre id="effect-answer">(.*?)</pre>}m, 1])
      expect([status, answer.scan("[REDACTED]").size]).to eq([200, op == "receipt:r2" ? 1 : 3]) # r3: token=, Authorization: and Bearer
      expect(answer).not_to include("tok_cut_1", "tok_form_2", "abc.def")
      expect(answer).to include(op == "receipt:r2" ? '"note": "cut"' : "ok=1")
    end
    expect(admin.get("/webhook_inbox/effect?id=nope").first).to eq(404)
  end

  it "lists an event's Ruby handler runs and the effects it emitted on its page" do
    insert_event("evt_fx2", status: "quarantined")
    effect("handler_x", handler: "SendReceiptHandler", status: "quarantined", event: %w[dash:fx evt_fx2], error: "Permanent: no email")
    effect("handler_y", handler: "MarkPaidHandler", status: "delivered", event: %w[dash:fx evt_fx2])
    effect("receipt:e2", event: %w[dash:fx evt_fx2])
    effect("receipt:other", event: %w[dash:fx evt_other])
    _, _, body = admin.get("/webhook_inbox/event?scope=dash:fx&id=evt_fx2")
    runs = body[%r{<table id="event-runs">.*?</table>}m]
    effects = body[%r{<table id="event-effects">.*?</table>}m]
    expect(op_ids(runs)).to eq(%w[handler_y handler_x]) # by handler name
    expect(runs).to include("Ruby handler MarkPaidHandler", "Ruby handler SendReceiptHandler", "Permanent: no email")
    expect(op_ids(effects)).to eq(%w[receipt:e2])
    insert_event("evt_fx3")
    _, _, body = admin.get("/webhook_inbox/event?scope=dash:fx&id=evt_fx3")
    expect(body).to include("Ruby handler runs (0)", "none: no Ruby handler matched")
  end

  it "stops listing an event's other effects at the timeout on a large outbox, still lists its Ruby runs, and leaves the connection usable" do
    effect("handler_big", handler: "SendReceiptHandler", event: %w[dash:fx evt_big])
    # Without 013's index (an inbox not yet migrated) the query scans the outbox; with it the
    # lookup is too quick for a 1 ms timeout to show anything.
    db_psql("DROP INDEX webhook_inbox_outbox_event_idx")
    db_psql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, source_scope, source_event_id) " \
            "SELECT 'bulk:' || i, 'receipts', '{}', 'dash:fx', 'evt_bulk_' || i FROM generate_series(1, 100000) i; ANALYZE webhook_inbox_outbox")
    out, err, st = in_app(<<~RUBY)
      list = WebhookInbox::EffectList
      c = ActiveRecord::Base.connection
      full = list.for_event(c, "dash:fx", "evt_big")
      list.send(:remove_const, :EVENT_EFFECTS_TIMEOUT_MS)
      list.const_set(:EVENT_EFFECTS_TIMEOUT_MS, 1) # a scan of 100,000 rows takes longer
      cut = list.for_event(c, "dash:fx", "evt_big")
      puts [full, cut].map { |runs, others, more| [runs.map { |r| r["operation_id"] }, others, more].inspect }, c.select_value("SELECT 42")
    RUBY
    expect([out.lines.map(&:strip), st.success?]).to eq([['[["handler_big"], [], false]', '[["handler_big"], nil, false]', "42"], true]), err
  ensure
    db_psql(File.read(Dir[File.join(TestDatabase::ROOT, "db/013_*.sql")].first)[/^CREATE INDEX[^;]*webhook_inbox_outbox_event_idx[^;]*;/m])
  end

  it "requeues one effect after confirming (CSRF-checked), recorded as an action with the dashboard's actor" do
    effect("receipt:q1", status: "quarantined", error: "HTTP 422")
    admin.get("/webhook_inbox/effects/requeue?operation_id=receipt:q1")
    expect(admin.post("/webhook_inbox/effects/requeue", { "operation_id" => "receipt:q1" }, token: false).first).to eq(422)
    expect(db_psql("SELECT status FROM webhook_inbox_outbox WHERE operation_id = 'receipt:q1'").strip).to eq("quarantined")
    expect(db_psql("SELECT count(*) FROM webhook_inbox_actions").to_i).to eq(0)

    status, _, body = admin.get("/webhook_inbox/effects/requeue?operation_id=receipt:q1")
    expect(status).to eq(200)
    expect(body).to match(%r{<strong>1</strong> quarantined effect\s+matches now})
    status, headers, = admin.post("/webhook_inbox/effects/requeue", { "operation_id" => "receipt:q1", "expected" => "1" })
    expect(status).to eq(302)
    expect(headers["location"]).to end_with("/webhook_inbox/effect?id=receipt%3Aq1")
    expect(db_psql("SELECT status, attempts, last_error IS NULL FROM webhook_inbox_outbox WHERE operation_id = 'receipt:q1'").strip)
      .to eq("pending|0|t")
    expect(db_psql("SELECT actor, action, filter::text, count FROM webhook_inbox_actions").strip)
      .to eq(%(ops|requeue|{"effects": {"operation_id": "receipt:q1"}}|1))
    _, _, body = admin.get(headers["location"].sub(%r{\Ahttp://[^/]+}, ""))
    expect(body).to include("Requeued 1 effect (action #")
    expect(body[%r{<td id="effect-status">.*?</td>}]).to include("pending")
  end

  it "requeues a filtered set (a Ruby handler's quarantined runs), and refuses a filter holding every quarantined effect" do
    effect("handler_1", handler: "SendReceiptHandler", status: "quarantined", created: "now() - interval '1 day'")
    effect("handler_2", handler: "SendReceiptHandler", status: "quarantined")
    effect("handler_3", handler: "SendReceiptHandler", status: "delivered")
    effect("handler_4", handler: "MarkPaidHandler", status: "quarantined")
    body = admin.get("/webhook_inbox/effects?status=quarantined&handler=SendReceiptHandler").last
    expect(body).to include("Requeue every quarantined effect matching this filter")
    oldest = db_psql("SELECT to_char(min(created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM webhook_inbox_outbox").strip
    [{}, { "status" => "quarantined" }, { "from" => oldest }, { "to" => "9999-01-01T00:00" }].each do |f|
      expect([f, admin.get("/webhook_inbox/effects/requeue?#{query(f)}").first]).to eq([f, 422])
    end
    confirm = -> { admin.get("/webhook_inbox/effects/requeue?handler=SendReceiptHandler").last }
    expect(confirm.call).to match(%r{<strong>2</strong> quarantined effects})
    expect(admin.post("/webhook_inbox/effects/requeue", {}).first).to eq(422) # every one: refused on POST too
    confirm.call
    handler_4 = "SELECT status FROM webhook_inbox_outbox WHERE operation_id = 'handler_4'"
    expect(db_psql(handler_4).strip).to eq("quarantined")
    status, headers, = admin.post("/webhook_inbox/effects/requeue", { "handler" => "SendReceiptHandler", "expected" => "3" })
    expect([status, headers["location"]]).to match([302, %r{/webhook_inbox/actions\z}])
    expect(db_psql("SELECT string_agg(operation_id || ':' || status, ' ' ORDER BY operation_id) FROM webhook_inbox_outbox").strip)
      .to eq("handler_1:pending handler_2:pending handler_3:delivered handler_4:quarantined")
    expect(db_psql("SELECT filter::text, count FROM webhook_inbox_actions").strip).to eq(%({"effects": {"handler": "SendReceiptHandler"}}|2))
    body = admin.get("/webhook_inbox/actions").last
    expect(body).to include("Requeued 2 effects (action #", "3 were shown when you confirmed")
  end

  it "lists a pending event whose Ruby handler run was charged an attempt under status=retrying, as its badge says" do
    retrying = -> { db_psql("SELECT retrying FROM webhook_inbox_stats()").strip.to_i }
    insert_event("evt_fx_retry", status: "pending")
    insert_event("evt_fx_fresh", status: "pending")
    effect("ruby:evt_fx_retry", handler: "dash_receipt", event: ["dash:fx", "evt_fx_retry"])
    before = retrying.call
    db_psql("UPDATE webhook_inbox_outbox SET attempts = 1 WHERE operation_id = 'ruby:evt_fx_retry'")
    body = admin.get("/webhook_inbox/events?status=retrying&scope=dash:fx").last
    expect(body).to include("evt_fx_retry")
    expect(body).not_to include("evt_fx_fresh")
    expect(body[%r{<tr>(?:(?!</tr>).)*evt_fx_retry.*?</tr>}m]).to include('badge retrying">retrying')
    # and the overview's retrying card (webhook_inbox_stats, also the metric) counts it, once
    # however many of its runs were charged
    effect("ruby:evt_fx_retry:2", handler: "dash_other", event: ["dash:fx", "evt_fx_retry"])
    db_psql("UPDATE webhook_inbox_outbox SET attempts = 2 WHERE operation_id = 'ruby:evt_fx_retry:2'")
    expect(retrying.call).to eq(before + 1)
  end

  it "a Ruby handler's permanent failure shows as a quarantined run; requeued from the dashboard, it runs and its event is done" do
    db_psql("INSERT INTO webhook_inbox_ruby_handlers VALUES ('invoice.paid', 'dash_receipt')")
    insert_event("evt_fx_ruby", status: "pending")
    dispatch = "SELECT result FROM webhook_inbox_dispatch_batch(10, 'wait', 10, 1, 1, 60000)"
    expect(db_psql(dispatch).strip).to eq("handed")
    round = <<~RUBY
      WebhookInbox.subscribe("invoice.paid", as: "dash_receipt") { |_e| raise WebhookInbox::Permanent, "no email on file" if ENV["FAIL"] }
      r = ActiveRecord::Base.transaction { WebhookInbox::Handlers::Runner.new(WebhookInbox::Handlers.registry).run_batch(ActiveRecord::Base.connection, 10) }
      puts r.map(&:status).join(",")
    RUBY
    out, err, st = in_app(round, "FAIL" => "1")
    expect([out.strip, st.success?]).to eq(["quarantined", true]), err
    # Issue 28.6: its one attempt is charged on the run, and the event's page counts it (not 0).
    body = admin.get("/webhook_inbox/event?scope=dash:fx&id=evt_fx_ruby").last
    expect(body[%r{<th>attempts charged</th><td[^>]*>([^<]*)</td>}, 1]).to eq("1 (Ruby handler dash_receipt: 1)")
    # and the events list shows it too (the event's own attempts are 0)
    row = admin.get("/webhook_inbox/events?scope=dash:fx&event_id=evt_fx_ruby").last[%r{<tr>(?:(?!</tr>).)*evt_fx_ruby.*?</tr>}m]
    expect(row.scan(%r{<td class="num">(\d+)</td>}).flatten).to eq(["1"])
    body = admin.get("/webhook_inbox/effects?status=quarantined").last
    expect(body).to include("Ruby handler dash_receipt", "no email on file")
    op = op_ids(body).first
    admin.get("/webhook_inbox/effects/requeue?#{query('operation_id' => op)}")
    expect(admin.post("/webhook_inbox/effects/requeue", { "operation_id" => op, "expected" => "1" }).first).to eq(302)
    out, err, st = in_app(round)
    expect([out.strip, st.success?]).to eq(["delivered", true]), err
    expect(db_psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_fx_ruby'").strip).to eq("done")
    body = admin.get("/webhook_inbox/effect?#{query('id' => op)}").last
    log = body[%r{<table id="effect-log">.*?</table>}m]
    expect(log).to include("quarantined", "no email on file", "Ruby handler dash_receipt done")
  end

  it "rake webhook_inbox:requeue_effects requeues a filter with ACTOR=, refuses no filter, and fails closed on a bad one" do
    effect("receipt:k1", status: "quarantined")
    effect("receipt:k2", status: "quarantined", destination: "crm")
    task = ->(env) { in_app(%(Rails.application.load_tasks; Rake::Task["webhook_inbox:requeue_effects"].invoke), env) }
    out, err, st = task.({ "DESTINATION" => "receipts", "ACTOR" => "ops@example.com" })
    expect([out.strip, st.success?]).to match([/\Arequeued 1 effect \(action #\d+\)\z/, true]), err
    _, err, st = task.({})
    expect([st.success?, err]).to match([false, /needs OPERATION_ID=/])
    _, err, st = task.({ "DESTINATION" => "Not A Name" })
    expect([st.success?, err]).to match([false, /destination: not a well-formed destination/])
    _, err, st = task.({ "ALL" => "1", "USER" => "deploy" })
    expect(st.success?).to be(true), err
    expect(db_psql("SELECT string_agg(concat_ws(' ', actor, filter::text, count), ',' ORDER BY id) FROM webhook_inbox_actions").strip)
      .to eq(%(ops@example.com {"effects": {"destination": "receipts"}} 1,deploy@#{Socket.gethostname} {"effects": {}} 1))
    expect(db_psql("SELECT count(*) FROM webhook_inbox_outbox WHERE status = 'pending'").to_i).to eq(2)
  end
end
