# frozen_string_literal: true

require "net/http"
require_relative "sidecar_helper"
require_relative "../support/fake_receipt_api"
require_relative "../support/prometheus_text"

# Issue 20 item 4 (db/015_pause.sql): pause a route, a scope or a destination; resume,
# optionally at a rate enforced in the database (a GCRA row per rule, advanced in the
# claiming transaction, whichever sidecar claims). Done when: a paused route holds 1,000
# events (none charged, all pending, shown as paused in stats and metrics) and after resume at
# a set rate drains them at that rate at most, and a paused destination holds its effects.
# Rates are checked against the database's own recorded times (the resume action's `at`,
# each event's processed_at), as a lower bound the rate implies: the k-th event done (from 0)
# is done no earlier than resume + k / rate. No wall-clock upper bound anywhere.
RSpec.describe "webhook-inbox-sidecar pause and resume", :sidecar do
  before(:all) do
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    @db.psql(<<~SQL)
      CREATE FUNCTION t_bulk(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'bulk ok' $$;
    SQL
  end

  let(:db) { @db }

  before do
    db.reset!
    db.psql(<<~SQL)
      TRUNCATE webhook_inbox_flow, webhook_inbox_outbox;
      INSERT INTO webhook_inbox_routes VALUES ('bulk.*', 't_bulk'), ('free.*', 't_bulk');
    SQL
  end

  def insert_bulk(n, type: "bulk.created", scope: SidecarHelper::SCOPE, prefix: "ev")
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload)
      SELECT #{db.q(scope)}, #{db.q(prefix)} || '_' || i, #{db.q(type)}, '{}'::jsonb FROM generate_series(1, #{n}) i
    SQL
  end

  def counts(where = "true")
    db.value("SELECT count(*) FILTER (WHERE status = 'pending') || '|' || count(*) FILTER (WHERE status = 'done') || '|' || " \
             "coalesce(sum(attempts), 0) FROM webhook_inbox WHERE #{where}").split("|").map(&:to_i)
  end

  def cli(*args)
    sidecar(*args, "--database-url", db.url, "--actor", "ops@example.com")
  end

  def start(*extra)
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--metrics-listen", "127.0.0.1:0", "--poll-interval", "200ms",
                             "--concurrency", "2", *extra)
    addr = wait_for(20, 0.05, "metrics_listening") { File.read(log)[/msg=metrics_listening address=(\S+)/, 1] }
    host, port = addr.split(":")
    [pid, log, host, port.to_i]
  end

  def scrape(host, port)
    PrometheusText.parse(Net::HTTP.start(host, port, open_timeout: 5, read_timeout: 10) { |h| h.get("/metrics") }.body)
  end

  def sample(families, name, labels = {})
    PrometheusText.value(families, name, labels.transform_keys(&:to_s))
  end

  # Lower bound from the rate: sorted done times t_k >= resumed_at + k / rate (1 ms for rounding).
  def expect_rate_bound(times, resumed_at, rate)
    early = times.sort.each_with_index.reject { |t, k| t >= resumed_at + k / rate - 0.001 }
    expect(early.first(3)).to eq([])
  end

  def epochs(sql)
    db.psql(sql).split("\n").map(&:to_f)
  end

  it "a paused route holds 1,000 events (pending, uncharged, shown paused), and resume --rate drains them at that rate at most" do
    status, out, = cli("pause", "--type", "bulk.*")
    expect([status.exitstatus, out]).to eq([0, "paused route bulk.* (0 pending held)\n"])
    insert_bulk(1000)
    insert_bulk(5, type: "free.created", prefix: "other") # not paused: runs meanwhile

    pid, log, host, port = start
    wait_for(60, 0.1, "every bulk event held") { db.int("SELECT count(*) FROM webhook_inbox WHERE held_at IS NOT NULL") == 1000 }
    wait_for(30, 0.1, "the other type done") { counts("event_type = 'free.created'")[1] == 5 }
    expect(counts("event_type = 'bulk.created'")).to eq([1000, 0, 0]) # pending, done, attempts charged
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE event_type = 'bulk.created' AND next_attempt_at < '9999-01-01'")).to eq(0)

    status, out, = sidecar("stats", "--json", "--database-url", db.url)
    expect(status.exitstatus).to eq(0)
    expect(JSON.parse(out)["flow"]).to eq([{ "kind" => "route", "target" => "bulk.*", "paused" => true, "rate" => nil,
                                             "pending" => 1000 }])
    status, out, = sidecar("stats", "--database-url", db.url)
    expect(out).to include("  route=bulk.* paused rate=- pending=1000\n")
    metrics = wait_for(20, 0.2, "paused gauge") do
      m = scrape(host, port)
      m if sample(m, "webhook_inbox_paused_pending", kind: "route", target: "bulk.*") == 1000
    end
    expect(sample(metrics, "webhook_inbox_paused_runs_total")).to eq(1000)
    expect(sample(metrics, "webhook_inbox_throttled_runs_total")).to eq(0)

    rate = 100.0
    status, out, = cli("resume", "--type", "bulk.*", "--rate", "100")
    expect([status.exitstatus, out]).to eq([0, "resumed route bulk.* at 100/s (1000 due now)\n"])
    wait_for(120, 0.2, "the bulk drained") { counts("event_type = 'bulk.created'")[1] == 1000 }
    expect(counts("event_type = 'bulk.created'")).to eq([0, 1000, 0])

    resumed_at = db.value("SELECT extract(epoch FROM at) FROM webhook_inbox_actions WHERE action = 'resume'").to_f
    times = epochs("SELECT extract(epoch FROM processed_at) FROM webhook_inbox WHERE event_type = 'bulk.created'")
    expect_rate_bound(times, resumed_at, rate)
    expect(times.max - resumed_at).to be >= 999 / rate - 0.001
    # Each event was postponed at most once: it came back at its slot and ran, never re-claimed in a loop.
    expect(File.read(log).scan(/outcome=throttled/).size).to be_between(1, 1000)
    expect(wait_for(20, 0.2, "the rule's gauges") do
      m = scrape(host, port)
      m if sample(m, "webhook_inbox_rate_limit_per_second", kind: "route", target: "bulk.*")
    end["webhook_inbox_paused_pending"].samples).to eq([])

    actions = db.psql("SELECT actor, action, filter::text, count FROM webhook_inbox_actions ORDER BY id").split("\n")
    expect(actions).to eq(['ops@example.com|pause|{"kind": "route", "target": "bulk.*"}|0',
                           'ops@example.com|resume|{"kind": "route", "rate": 100, "target": "bulk.*"}|1000'])
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "a rate holds across sidecars: two processes share the route's slots" do
    status, = cli("resume", "--type", "bulk.*", "--rate", "40")
    expect(status.exitstatus).to eq(0)
    insert_bulk(120)
    2.times { start }
    wait_for(60, 0.2, "drained") { counts[1] == 120 }
    resumed_at = db.value("SELECT extract(epoch FROM at) FROM webhook_inbox_actions WHERE action = 'resume'").to_f
    expect_rate_bound(epochs("SELECT extract(epoch FROM processed_at) FROM webhook_inbox"), resumed_at, 40.0)
    expect(counts).to eq([0, 120, 0])
  end

  it "a paused scope holds only its events; resume makes them due at once" do
    insert_bulk(3, scope: "stripe:acct_2:test", prefix: "held")
    insert_bulk(3, prefix: "free")
    status, out, = cli("pause", "--scope", "stripe:acct_2:test")
    expect([status.exitstatus, out]).to eq([0, "paused scope stripe:acct_2:test (3 pending held)\n"])
    pid, _, host, port = start
    wait_for(30, 0.1, "the free events done") { counts("event_id LIKE 'free_%'")[1] == 3 }
    wait_for(30, 0.1, "the scope's events held") { db.int("SELECT count(*) FROM webhook_inbox WHERE held_at IS NOT NULL") == 3 }
    metrics = wait_for(20, 0.2, "paused gauge") { (m = scrape(host, port)) && sample(m, "webhook_inbox_paused_pending", kind: "scope") && m }
    expect(sample(metrics, "webhook_inbox_paused_pending", kind: "scope")).to eq(3)
    expect(metrics["webhook_inbox_paused_pending"].samples.map(&:labels)).to eq([{ "kind" => "scope" }]) # never the scope itself
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
    expect(counts("source_scope = 'stripe:acct_2:test'")).to eq([3, 0, 0])
    expect(counts("event_id LIKE 'free_%'")).to eq([0, 3, 0])
    expect(db.value("SELECT DISTINCT attempt_log -> -1 ->> 'result' FROM webhook_inbox WHERE event_id LIKE 'held_%'")).to eq("paused")

    status, out, = cli("resume", "--scope", "stripe:acct_2:test")
    expect([status.exitstatus, out]).to eq([0, "resumed scope stripe:acct_2:test (3 due now)\n"])
    expect(db.int("SELECT count(*) FROM webhook_inbox_flow")).to eq(0)
    status, = sidecar("run", "--once", "--database-url", db.url)
    expect(status.exitstatus).to eq(0)
    expect(counts).to eq([0, 6, 0])
  end

  it "refuses what it cannot act on, with exit 2 and a clear message" do
    [[%w[pause], "give one of --type PATTERN"],
     [%w[pause --type a --scope b], "one target at a time"],
     [%w[pause --type a*b], "one * at the end"],
     [%w[pause --type a --rate 5], "--rate is resume's"],
     [%w[resume --type a --rate 0], "a number > 0"],
     [%w[resume --type a --rate fast], "a number > 0"],
     [%w[resume --scope s --rate 5], "not per scope"],
     [%w[resume --destination ruby --rate 5], "take no rate"]].each do |args, message|
      status, _, err = cli(*args)
      expect([status.exitstatus, err]).to match([2, a_string_including(message)]), args.join(" ")
    end
    expect(db.int("SELECT count(*) FROM webhook_inbox_flow")).to eq(0)
    expect(db.int("SELECT count(*) FROM webhook_inbox_actions")).to eq(0)
  end

  context "destinations" do
    before(:all) { @api = FakeReceiptApi.new }
    after(:all) { @api&.stop }

    def emit(n, dest)
      db.psql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload) " \
              "SELECT 'op_' || i, #{db.q(dest)}, '{\"n\": 1}' FROM generate_series(1, #{n}) i")
    end

    def deliver_once
      status, = sidecar("run", "--once", "--database-url", db.url, "--destination", "receipts=#{@api.url}/receipts")
      expect(status.exitstatus).to eq(0)
    end

    it "a paused destination holds its effects (pending, never claimed); resume --rate delivers them at that rate at most" do
      status, out, = cli("pause", "--destination", "receipts")
      expect([status.exitstatus, out]).to eq([0, "paused destination receipts (0 pending held)\n"])
      emit(12, "receipts")
      deliver_once
      expect(db.value("SELECT string_agg(DISTINCT status || ':' || attempts, ',') FROM webhook_inbox_outbox")).to eq("pending:0")
      expect(@api.keys).to eq([])
      expect(db.value("SELECT webhook_inbox_outbox_next_due(ARRAY['receipts'])")).to eq("") # nothing to wake for

      status, out, = cli("resume", "--destination", "receipts", "--rate", "20")
      expect([status.exitstatus, out]).to eq([0, "resumed destination receipts at 20/s (12 due now)\n"])
      start("--destination", "receipts=#{@api.url}/receipts") # --once would stop at the first slot ahead
      wait_for(60, 0.1, "delivered") { db.int("SELECT count(*) FROM webhook_inbox_outbox WHERE status = 'delivered'") == 12 }
      expect(db.value("SELECT string_agg(DISTINCT status || ':' || attempts, ',') FROM webhook_inbox_outbox")).to eq("delivered:1")
      resumed_at = db.value("SELECT extract(epoch FROM at) FROM webhook_inbox_actions WHERE action = 'resume'").to_f
      expect_rate_bound(epochs("SELECT extract(epoch FROM last_attempt_at) FROM webhook_inbox_outbox"), resumed_at, 20.0)
    end

    it "a paused 'ruby' destination holds the Ruby handlers' runs" do
      db.psql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload) VALUES ('run_1', 'ruby', '{\"handler\": \"H\"}')")
      cli("pause", "--destination", "ruby")
      start = "SELECT count(*) FROM webhook_inbox_ruby_start(3, 1000, 60000)"
      expect(db.int("SELECT count(*) FROM webhook_inbox_ruby_claim(10)")).to eq(0) # workers before v13
      expect(db.int(start)).to eq(0)
      expect(db.int("SELECT count(*) FROM webhook_inbox_ruby_start_batch(10, 3, 1000, 60000)")).to eq(0) # the batch's (v16)
      expect(db.value("SELECT attempts FROM webhook_inbox_outbox WHERE operation_id = 'run_1'")).to eq("0") # not charged
      cli("resume", "--destination", "ruby")
      expect(db.int(start)).to eq(1)
    end
  end
end
