# frozen_string_literal: true

require "net/http"
require "socket"
require_relative "sidecar_helper"
require_relative "../support/prometheus_text"
require_relative "../support/fake_receipt_api"

# `run --metrics-listen`: GET /metrics answers valid Prometheus text (checked by a strict
# parser) with the inbox gauges and the process counters; the listener refuses what it does
# not serve, bounds request heads, drops slow ones without holding up scrapes, and keeps
# serving the counters when the database cannot be read.
RSpec.describe "webhook-inbox-sidecar /metrics", :sidecar do
  include SidecarHelper::Payloads

  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  before { db.reset! }

  def start(*extra, url: db.url)
    pid, log = spawn_sidecar("run", "--database-url", url, "--metrics-listen", "127.0.0.1:0", "--poll-interval", "200ms",
                             *extra)
    [pid, log, *metrics_address(log)]
  end

  def get(host, port, path = "/metrics")
    Net::HTTP.start(host, port, open_timeout: 5, read_timeout: 10) { |h| h.get(path) }
  end

  def scrape(host, port)
    res = get(host, port)
    expect(res.code).to eq("200")
    expect(res["Content-Type"]).to eq("text/plain; version=0.0.4; charset=utf-8")
    PrometheusText.parse(res.body)
  end

  def raw(host, port, bytes, read: true)
    s = TCPSocket.new(host, port)
    s.write(bytes)
    return s unless read

    out = s.read
    s.close
    out
  end

  it "serves valid Prometheus text with the inbox gauges, outcomes by event type and histograms" do
    db.add_order("t1", "o1", 2000, "jpy")
    db.psql(<<~SQL)
      CREATE FUNCTION t_flaky(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'flaky'; END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.flaky', 't_flaky');
    SQL
    db.insert_event("m1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    db.insert_event("m2", "payment_intent.succeeded", succeeded("pi_2", "t1", "o1", 1, "jpy")) # amount mismatch: quarantined
    db.insert_event("m3", "test.flaky", { "x" => 1 })
    db.insert_event("m4", "no.route.here", {})
    db.insert_event("m5", "with \"quote\" and \\ backslash", {}) # no route either; its label is escaped if counted
    db.psql("INSERT INTO webhook_inbox_routes VALUES ('with \"quote\" and \\ backslash', 'webhook_inbox_ignore')")
    _pid, _log, host, port = start("--backoff-base", "1h", "--backoff-cap", "1h")

    wait_for(20, 0.1, "events handled") do
      db.event("m1")[:status] == "done" && db.event("m2")[:status] == "quarantined" && db.event("m3")[:attempts] == 1 &&
        db.event("m5")[:status] == "done"
    end
    fams = wait_for(20, 0.3, "gauges read after the events were handled") do
      f = scrape(host, port)
      f if PrometheusText.value(f, "webhook_inbox_events_quarantined") == 1.0 &&
           PrometheusText.value(f, "webhook_inbox_events_pending") == 2.0
    end

    { "webhook_inbox_stats_up" => "gauge", "webhook_inbox_events_pending" => "gauge",
      "webhook_inbox_oldest_pending_age_seconds" => "gauge", "webhook_inbox_events_quarantined" => "gauge",
      "webhook_inbox_events_waiting_for_route" => "gauge", "webhook_inbox_handled_total" => "counter",
      "webhook_inbox_reconnects_total" => "counter", "webhook_inbox_handler_duration_seconds" => "histogram",
      "webhook_inbox_receipt_to_done_seconds" => "histogram" }.each do |name, type|
      expect(fams[name]&.type).to eq(type), "#{name} missing or not a #{type}"
      expect(fams[name].help).not_to be_empty
    end
    v = ->(name, labels = {}) { PrometheusText.value(fams, name, labels) }
    expect(v.call("webhook_inbox_stats_up")).to eq(1)
    expect(v.call("webhook_inbox_events_waiting_for_route")).to eq(1) # m4
    expect(v.call("webhook_inbox_oldest_pending_age_seconds")).to be_between(0, 120)
    handled = ->(type, outcome) { v.call("webhook_inbox_handled_total", { "event_type" => type, "outcome" => outcome }) }
    expect(handled.call("payment_intent.succeeded", "done")).to eq(1)
    expect(handled.call("payment_intent.succeeded", "quarantined")).to eq(1)
    expect(handled.call("test.flaky", "retry")).to eq(1)
    expect(handled.call("with \"quote\" and \\ backslash", "done")).to eq(1)
    expect(fams["webhook_inbox_handled_total"].samples.map { |s| s.labels["event_type"] }).not_to include("no.route.here")
    expect(v.call("webhook_inbox_receipt_to_done_seconds_count")).to eq(2) # m1, m5
    expect(v.call("webhook_inbox_receipt_to_done_seconds_sum")).to be_between(0, 120)
    expect(v.call("webhook_inbox_handler_duration_seconds_count")).to be >= 4
    expect(v.call("webhook_inbox_reconnects_total")).to eq(0)
    body = get(host, port).body
    expect(body).not_to include("stripe:acct_1") # no scope, payload or event id in labels
    expect(body).not_to include("pi_1")
  end

  describe "the outbox" do
    before(:all) { @api = FakeReceiptApi.new }
    after(:all) { @api&.stop }
    before { db.psql("TRUNCATE webhook_inbox_outbox") }
    after { db.psql("TRUNCATE webhook_inbox_outbox") }

    def emit(op, dest)
      db.psql("SELECT webhook_inbox_emit(#{db.q(op)}, #{db.q(dest)}, '{}'::jsonb)")
    end

    it "serves per destination gauges from webhook_inbox_outbox_stats() and the deliverer's outcomes" do
      emit("op_ok", "alpha")
      emit("op_refused", "beta")       # 422: quarantined
      %w[op_w1 op_w2].each { |op| emit(op, "gamma") } # no such destination here: stays pending
      db.psql("UPDATE webhook_inbox_outbox SET created_at = now() - interval '90 seconds' WHERE operation_id = 'op_w1'")
      _pid, _log, host, port = start("--destination", "alpha=#{@api.url}/receipts", "--destination",
                                     "beta=#{@api.url}/status/422", "--destination", "delta=#{@api.url}/receipts")
      fams = wait_for(20, 0.3, "effects settled and read") do
        f = scrape(host, port)
        f if PrometheusText.value(f, "webhook_inbox_effects_quarantined", { "destination" => "beta" }) == 1.0 &&
             PrometheusText.value(f, "webhook_inbox_effects_total", { "destination" => "alpha", "outcome" => "delivered" }) == 1.0
      end
      { "webhook_inbox_effects_stats_up" => "gauge", "webhook_inbox_effects_pending" => "gauge",
        "webhook_inbox_effects_oldest_pending_age_seconds" => "gauge", "webhook_inbox_effects_quarantined" => "gauge",
        "webhook_inbox_effects_total" => "counter" }.each do |name, type|
        expect(fams[name]&.type).to eq(type), "#{name} missing or not a #{type}"
      end
      v = ->(name, labels = {}) { PrometheusText.value(fams, name, labels) }
      expect(v.call("webhook_inbox_effects_stats_up")).to eq(1)
      expect(v.call("webhook_inbox_effects_pending", { "destination" => "gamma" })).to eq(2)
      expect(v.call("webhook_inbox_effects_oldest_pending_age_seconds", { "destination" => "gamma" })).to be_between(89, 200)
      expect(v.call("webhook_inbox_effects_pending", { "destination" => "alpha" })).to eq(0) # delivered in the last hour
      expect(v.call("webhook_inbox_effects_oldest_pending_age_seconds", { "destination" => "beta" })).to eq(0)
      # configured here, no row in the outbox: still a series (at 0), so alerts never see it vanish
      %w[webhook_inbox_effects_pending webhook_inbox_effects_quarantined].each do |name|
        expect(v.call(name, { "destination" => "delta" })).to eq(0)
      end
      # the deliverer's outcomes per configured destination (each at 0 until it counts)
      { "alpha" => "delivered", "beta" => "quarantined", "delta" => nil }.each do |dest, counted|
        %w[delivered retry quarantined lease_lost].each do |outcome|
          expect(v.call("webhook_inbox_effects_total", { "destination" => dest, "outcome" => outcome }))
            .to eq(outcome == counted ? 1 : 0), "#{dest} #{outcome}"
        end
      end
      expect(v.call("webhook_inbox_effects_total", { "destination" => "gamma", "outcome" => "delivered" })).to be_nil
      expect(get(host, port).body).not_to include("op_") # no operation id in labels
    end

    it "serves the inbox gauges with webhook_inbox_effects_stats_up 0 when the outbox cannot be read" do
      db.psql("DROP FUNCTION webhook_inbox_outbox_stats()")
      db.insert_event("m_o1", "no.route.here", {})
      _pid, log, host, port = start
      fams = scrape(host, port)
      expect(PrometheusText.value(fams, "webhook_inbox_stats_up")).to eq(1)
      expect(PrometheusText.value(fams, "webhook_inbox_events_pending")).to eq(1)
      expect(PrometheusText.value(fams, "webhook_inbox_effects_stats_up")).to eq(0)
      expect(fams).not_to have_key("webhook_inbox_effects_pending")
      expect(fams["webhook_inbox_effects_total"]).not_to be_nil
      wait_for(10, 0.1, "the warning") { File.read(log).include?("msg=metrics_outbox_failed") }

      expect(restore_outbox_functions).to be_success # the function is back
      wait_for(15, 0.3, "read again at the next refresh") do
        PrometheusText.value(scrape(host, port), "webhook_inbox_effects_stats_up") == 1.0
      end
    ensure
      restore_outbox_functions
    end

    # migrate applies the files newer than the database's version: saying v5 makes it apply
    # 006 (the outbox's functions) and everything after it again, as for a real upgrade.
    def restore_outbox_functions
      db.psql("CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer LANGUAGE sql STABLE AS $$ SELECT 5 $$")
      sidecar("migrate", "--database-url", db.url)[0]
    end
  end

  it "reads the inbox gauges at most once per refresh interval, whatever the scrape rate" do
    _pid, _log, host, port = start
    ages = Array.new(25) do
      sleep 0.04
      PrometheusText.value(scrape(host, port), "webhook_inbox_stats_age_seconds")
    end
    expect(ages.compact.size).to eq(25)
    refreshes = ages.each_cons(2).count { |a, b| b < a }
    expect(refreshes).to be <= 1 # 25 scrapes in about 1.5 s: at most one read (every 5 s)
  end

  it "answers 404 elsewhere, 405 for other methods, 400 for garbage, 431 for a huge head, HEAD without a body" do
    _pid, _log, host, port = start
    expect(get(host, port, "/").code).to eq("404")
    expect(get(host, port, "/metrics/x").code).to eq("404")
    expect(get(host, port, "/metrics?name[]=x").code).to eq("200")
    post = Net::HTTP.start(host, port) { |h| h.post("/metrics", "x") }
    expect(post.code).to eq("405")
    expect(post["Allow"]).to eq("GET, HEAD")
    head = Net::HTTP.start(host, port) { |h| h.head("/metrics") }
    expect(head.code).to eq("200")
    expect(head.body).to be_nil
    expect(raw(host, port, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n")).to start_with("HTTP/1.1 400 ")
    expect(raw(host, port, "GET /metrics HTTP/1.1\r\nX: #{'a' * 9000}\r\n\r\n")).to start_with("HTTP/1.1 431 ")
  end

  it "drops a slow request head after its deadline and keeps serving scrapes meanwhile, also with every slot taken" do
    _pid, _log, host, port = start
    slow = Array.new(70) { raw(host, port, "GET /metrics HTTP/1.1\r\nHost: x\r\n", read: false) }
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    10.times { scrape(host, port) }
    expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).to be < 3
    # The one still open after the scrapes evicted others is closed by its 5 s deadline.
    last = slow.last
    expect(last.wait_readable(8)).to be_truthy
    expect(last.read).to eq("")
  ensure
    slow&.each(&:close)
  end

  # Issue 16 item 5: 64 connections that each sent a whole GET /metrics and never read their
  # answer made 50 of 50 real scrapes fail (every slot held by a response not taken).
  it "serves real scrapes while one client keeps every slot full of requests whose answers it never reads" do
    _pid, _log, host, port = start
    hog = lambda do
      s = Socket.new(:INET, :STREAM)
      s.setsockopt(:SOCKET, :RCVBUF, 1024)
      s.connect(Socket.sockaddr_in(port, host))
      s.write("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
      expect(s.wait_readable(10)).to be_truthy # answered (never read): past its request
      s
    end
    hogs = Array.new(64) { hog.call }
    codes = Array.new(50) do
      hogs << hog.call # one more for each scrape: the table stays full of them
      get(host, port).code
    rescue EOFError, SystemCallError, Net::ReadTimeout => e
      e.class.name
    end
    expect(codes.tally).to eq("200" => 50)
  ensure
    hogs&.each(&:close)
  end

  # Issue 17 item 6: gauges read minutes earlier were served as current (300 pending while
  # the table had 12). Here the stats read is held up by a lock: a scrape shows gauges no
  # older than the refresh interval, or leaves them out with webhook_inbox_stats_up 0.
  it "never serves gauges older than the refresh interval as current: it leaves them out, then reads them again" do
    3.times { |i| db.insert_event("st#{i}", "no.route.here", {}) }
    _pid, _log, host, port = start
    wait_for(20, 0.2, "the first read") { PrometheusText.value(scrape(host, port), "webhook_inbox_events_pending") == 3.0 }
    inserts = Array.new(9) { |i| "('#{SidecarHelper::SCOPE}', 'st_l#{i}', 'no.route.here', '{}')" }.join(", ")
    locker = Thread.new do
      db.psql("BEGIN; LOCK TABLE webhook_inbox IN ACCESS EXCLUSIVE MODE; " \
              "INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES #{inserts}; " \
              "SELECT pg_sleep(9); COMMIT")
    end
    wait_for(10, 0.05, "the lock") do
      db.psql("SELECT count(*) FROM pg_locks WHERE relation = 'webhook_inbox'::regclass AND mode = 'AccessExclusiveLock' " \
              "AND granted").to_i == 1
    end
    seen = []
    while locker.alive?
      f = scrape(host, port)
      up = PrometheusText.value(f, "webhook_inbox_stats_up")
      if up == 1.0
        expect(PrometheusText.value(f, "webhook_inbox_stats_age_seconds")).to be <= 5.0 # WI_EXPORTER_REFRESH_S
        expect([3.0, 12.0]).to include(PrometheusText.value(f, "webhook_inbox_events_pending")) # before, after the commit
      else
        expect(f).not_to have_key("webhook_inbox_events_pending")
        expect(f).not_to have_key("webhook_inbox_stats_age_seconds")
      end
      seen << up
      sleep 0.3
    end
    locker.join
    expect(seen).to include(0.0) # the read was held up past the interval: left out, not shown old
    wait_for(15, 0.3, "read again once the lock is gone") do
      PrometheusText.value(scrape(host, port), "webhook_inbox_events_pending") == 12.0
    end
  ensure
    locker&.join
  end

  it "reads the gauges again at once over a new connection when the old one was lost (a PostgreSQL restart)" do
    _pid, _log, host, port = start
    wait_for(20, 0.2, "the first read") { PrometheusText.value(scrape(host, port), "webhook_inbox_stats_up") == 1.0 }
    killed = db.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity " \
                     "WHERE query ~ 'FROM webhook_inbox_outbox_stats\\(\\)$|webhook_inbox_unrouted\\(\\) u' AND pid <> pg_backend_pid()").to_i
    expect(killed).to eq(1)
    ups = Array.new(25) do
      sleep 0.3
      PrometheusText.value(scrape(host, port), "webhook_inbox_stats_up")
    end
    expect(ups.uniq).to eq([1.0]) # 7.5 s: past the next read, which found the connection gone
  end

  it "keeps serving the process counters with webhook_inbox_stats_up 0 when the inbox cannot be read" do
    empty = "metrics_empty_#{SecureRandom.hex(3)}"
    TestDatabase.cluster.psql("CREATE DATABASE #{empty}", db: "postgres")
    _pid, log, host, port = start(url: TestDatabase.cluster.url(empty))
    fams = scrape(host, port)
    expect(PrometheusText.value(fams, "webhook_inbox_stats_up")).to eq(0)
    expect(fams).not_to have_key("webhook_inbox_events_pending")
    expect(fams["webhook_inbox_reconnects_total"]).not_to be_nil
    wait_for(10, 0.1, "the warning") { File.read(log).include?("msg=metrics_stats_failed") }
  end

  # Issue 33: a long-open snapshot keeps VACUUM from removing processed rows; the gauge says
  # how far back it holds (in transactions: counted, not timed) and drops when it ends.
  it "reports the cleanup horizon a long-open REPEATABLE READ snapshot holds, and its release" do
    holder = PG.connect(db.url)
    holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.exec("SELECT count(*) FROM webhook_inbox") # takes the snapshot
    5.times { db.psql("SELECT txid_current()") } # five transactions that took an id since
    session = { "holder" => "session" }
    _pid, _log, host, port = start
    fams = wait_for(20, 0.3, "the held horizon") do
      f = scrape(host, port)
      f if PrometheusText.value(f, "webhook_inbox_cleanup_horizon_xid_age", session).to_f >= 5
    end
    expect(PrometheusText.value(fams, "webhook_inbox_cleanup_horizon_up")).to eq(1)
    expect(fams["webhook_inbox_cleanup_horizon_xid_age"].type).to eq("gauge")
    expect(PrometheusText.value(fams, "webhook_inbox_cleanup_horizon_age_seconds")).not_to be_nil
    %w[replica slot prepared].each do |h|
      expect(PrometheusText.value(fams, "webhook_inbox_cleanup_horizon_xid_age", { "holder" => h })).not_to be_nil
    end
    held = PrometheusText.value(fams, "webhook_inbox_cleanup_horizon_xid_age", session)
    holder.exec("COMMIT")
    5.times { db.psql("SELECT txid_current()") }
    wait_for(20, 0.3, "the horizon released") do
      PrometheusText.value(scrape(host, port), "webhook_inbox_cleanup_horizon_xid_age", session).to_f < held
    end
  ensure
    holder&.close
  end

  it "refuses a bad --metrics-listen address, and takes it from the config file" do
    status, _, err = sidecar("run", "--once", "--database-url", db.url, "--metrics-listen", "nonsense")
    expect(status.exitstatus).to eq(2)
    expect(err).to include("metrics-listen must be HOST:PORT")
    conf = File.join(Dir.tmpdir, "wi-metrics-#{SecureRandom.hex(3)}.conf")
    File.write(conf, "metrics-listen = 127.0.0.1:0\n")
    status, out, = sidecar("run", "--print-config", "--config", conf)
    expect(status.exitstatus).to eq(0)
    expect(out).to include("metrics-listen = 127.0.0.1:0  # restart to change")
  end

  it "stops promptly on SIGTERM with scrapers connected" do
    pid, _log, host, port = start
    scrape(host, port)
    idle = raw(host, port, "GET /metr", read: false)
    Process.kill("TERM", pid)
    expect(wait_exit(pid, 15)&.exitstatus).to eq(0)
    idle.close
  end
end
