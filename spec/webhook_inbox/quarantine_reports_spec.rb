# frozen_string_literal: true

require "json"
require "tmpdir"
require "fileutils"
require "stringio"
require "active_record"
require "active_support/error_reporter"
require "active_support/notifications"
require "active_support/tagged_logging"
require "logger"
require "webhook_inbox/handlers"
require "webhook_inbox/handlers/worker"
require_relative "../sidecar/sidecar_helper"
require_relative "../support/receiver_helpers"
require_relative "../support/forked_ruby_worker"
require_relative "../support/stubbed_rails"

# The C sidecar's quarantines reach the app's Rails.error through the Ruby worker
# (Handlers::QuarantineReports, schema v25): one unhandled report per quarantine across
# processes (two `--report-only` workers racing, the quarantines made by the real binary
# running the example SQL handlers), ids only, a database error's text withheld; not a Ruby
# handler's quarantine (reported when its run committed), nor one from before the reporter's
# table; again when the reporting transaction rolled back (at least once), and again when a
# requeued event is quarantined anew; report rows go once their quarantine is over.
RSpec.describe WebhookInbox::Handlers::QuarantineReports, :sidecar do
  include SidecarHelper
  include SidecarHelper::Payloads
  include ForkedRubyWorker
  include StubbedRails # rails_with(tracker, log): inherited by forked workers

  # A tracker as Sentry's: subscribed to Rails.error; appends each report as a JSON line to
  # a file shared by the forked workers (one short write each, O_APPEND).
  class QuarantineSpecTracker
    attr_reader :reports

    def initialize(path = nil)
      @path = path
      @reports = []
    end

    def report(error, handled:, severity:, context:, source: nil)
      r = { "error" => error.class.name, "message" => error.message, "handled" => handled, "severity" => severity.to_s,
            "context" => context.transform_keys(&:to_s), "source" => source, "pid" => Process.pid }
      @reports << r
      File.open(@path, "a") { |f| f.write("#{JSON.generate(r)}\n") } if @path
    end
  end

  before(:all) do
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    @url = ReceiverHelpers.ar_url(@db.pg).sub(@db.pg.dbname, @db.name)
    ActiveRecord::Base.establish_connection(@url)
  end

  after(:all) { ActiveRecord::Base.remove_connection }

  let(:db) { @db }

  around do |example|
    @dir = Dir.mktmpdir("quarantine_reports")
    db.reset!
    db.psql("TRUNCATE webhook_inbox_error_reports, webhook_inbox_outbox")
    db.add_order("t1", "o1", 2000, "jpy")
    example.run
  ensure
    @workers&.each { |pid| stop_worker(pid) }
    FileUtils.rm_rf(@dir)
  end

  def conn = ActiveRecord::Base.connection

  # n amount mismatches, quarantined by the real sidecar's example SQL handler.
  def quarantine_by_sidecar(ids)
    ids.each { |id| db.insert_event(id, "payment_intent.succeeded", succeeded("pi_#{id}", "t1", "o1", 1999, "jpy")) }
    status, _out, err = sidecar("run", "--once", "--database-url", db.url)
    expect(status.exitstatus).to eq(0), err
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'quarantined'")).to eq(ids.size)
  end

  it "reports each quarantine of a SQL handler once, unhandled, with two report-only workers racing" do
    path = File.join(@dir, "reports.jsonl")
    rails_with(QuarantineSpecTracker.new(path))
    ids = Array.new(150) { |i| format("evt_%03d", i) }
    quarantine_by_sidecar(ids)
    2.times { start_worker(WebhookInbox::Handlers::Registry.new, report_only: true) }
    wait_until("every quarantine reported") { File.exist?(path) && File.readlines(path).size >= ids.size }
    sleep 0.5 # a second report, if any, would land meanwhile
    reports = File.readlines(path).map { |l| JSON.parse(l) }
    expect(reports.map { |r| r["context"]["event_id"] }.sort).to eq(ids)
    expect(reports.map { |r| r["pid"] }.uniq.size).to be_between(1, 2)
    r = reports.find { |x| x["context"]["event_id"] == "evt_007" }
    expect(r).to include("error" => "WebhookInbox::Handlers::QuarantineReports::Quarantined", "handled" => false,
                         "severity" => "error", "source" => "webhook_inbox")
    expect(r["message"]).to start_with("amount/currency mismatch")
    expect(r["context"]).to eq("provider" => "stripe", "scope" => SidecarHelper::SCOPE, "event_id" => "evt_007",
                               "event_type" => "payment_intent.succeeded", "handler" => "orders_on_payment_succeeded", "attempt" => 0)
    expect(worker_log.lines.grep(/event=quarantine_reported event_id=evt_007 type=payment_intent.succeeded/).size).to eq(1)
    expect(worker_log).to include("event=ruby_worker_starting report_only=true")
    expect(db.int("SELECT count(*) FROM webhook_inbox_error_reports")).to eq(ids.size)
  end

  it "withholds a database error's text (it can quote the payload) and publishes quarantine.webhook_inbox" do
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION test_casts_card(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN RETURN ((ev.payload ->> 'card')::int)::text; END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('test.card', 'test_casts_card');
    SQL
    db.insert_event("evt_card", "test.card", { "card" => "4242-secret-digits" })
    status, _out, err = sidecar("run", "--once", "--database-url", db.url, "--max-attempts", "1")
    expect(status.exitstatus).to eq(0), err
    tracker = QuarantineSpecTracker.new
    log = StringIO.new
    rails_with(tracker, log)
    seen = []
    sub = ActiveSupport::Notifications.subscribe("quarantine.webhook_inbox") { |*, p| seen << p }
    expect(described_class.new.run(conn).map { |row| row["event_id"] }).to eq(["evt_card"])
    expect(tracker.reports.map { |r| r["message"] }).to eq(["22P02: database error at the last attempt (its text is in the dashboard)"])
    expect(seen.map(&:keys)).to eq([WebhookInbox::Instrumentation::KEYS["quarantine.webhook_inbox"]])
    expect(seen.first).to include(event_id: "evt_card", event_type: "test.card", handler: "test_casts_card", attempt: 1,
                                  error: a_string_starting_with("22P02: "))
    expect(log.string.lines.size).to eq(1)
    expect(log.string).to include("[event_id=evt_card] [type=test.card] [attempt=1] webhook_inbox event=quarantine_reported " \
                                  "event_id=evt_card type=test.card attempt=1 scope=#{SidecarHelper::SCOPE}")
    expect((tracker.reports + seen).inspect + log.string).not_to include("4242")
  ensure
    ActiveSupport::Notifications.unsubscribe(sub) if sub
  end

  it "reports again after a rollback (at least once), never a quarantine from before the reporter, nor a Ruby handler's" do
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, processed_at) VALUES " \
            "('s', 'evt_old', 't', '{}', 'quarantined', now() - interval '1 day'), " \
            "('s', 'evt_ruby', 't', '{}', 'quarantined', clock_timestamp()), " \
            "('s', 'evt_sql', 't', '{}', 'quarantined', clock_timestamp())")
    db.psql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, source_scope, source_event_id) " \
            "VALUES ('op_ruby', 'ruby', '{}', 'quarantined', 's', 'evt_ruby')")
    tracker = QuarantineSpecTracker.new
    rails_with(tracker)
    reporter = described_class.new
    expect do
      conn.transaction do
        reporter.run(conn)
        raise "killed before the commit"
      end
    end.to raise_error(RuntimeError, "killed before the commit")
    expect(reporter.run(conn).map { |row| row["event_id"] }).to eq(["evt_sql"]) # taken again: the first take rolled back
    expect(reporter.run(conn)).to eq([])
    expect(tracker.reports.map { |r| [r["context"]["event_id"], r["handled"]] }).to eq([["evt_sql", false], ["evt_sql", false]])
    expect(tracker.reports.map { |r| r["context"]["handler"] }).to eq([nil, nil]) # type t: unrouted
  end

  it "moves its watermark on after a complete scan, and still reports a quarantine committed late within the grace" do
    db.psql("UPDATE webhook_inbox_error_reporter SET since = now() - interval '1 day'")
    quarantine_by_sidecar(["evt_1"])
    rails_with(QuarantineSpecTracker.new)
    expect(described_class.new(grace_s: 60).run(conn).size).to eq(1)
    expect(db.value("SELECT since > now() - interval '2 minutes' AND since < now() - interval '50 seconds' " \
                    "FROM webhook_inbox_error_reporter")).to eq("t")
    # Quarantines whose transactions committed 30 s and 90 s after they set processed_at (a
    # slow batch): within the grace, reported; beyond it, behind the watermark (documented).
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, processed_at) VALUES " \
            "('s', 'evt_late', 't', '{}', 'quarantined', now() - interval '30 seconds'), " \
            "('s', 'evt_too_late', 't', '{}', 'quarantined', now() - interval '90 seconds')")
    expect(described_class.new(grace_s: 60).run(conn).map { |row| row["event_id"] }).to eq(["evt_late"])
    expect(described_class.new(grace_s: 60).run(conn)).to eq([])
  end

  it "reads only the last seconds in a short poll (the watermark stays), the whole grace in the full poll after rescan_every_s" do
    rails_with(QuarantineSpecTracker.new)
    db.psql("UPDATE webhook_inbox_error_reporter SET since = now() - interval '1 day'") # the database may be younger than a minute
    reporter = described_class.new(grace_s: 60, window_s: 10, rescan_every_s: 3600)
    expect(reporter.run(conn)).to eq([]) # the first poll is a full one
    since = db.value("SELECT since FROM webhook_inbox_error_reporter")
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, processed_at) VALUES " \
            "('s', 'evt_new', 't', '{}', 'quarantined', now() - interval '2 seconds'), " \
            "('s', 'evt_late', 't', '{}', 'quarantined', now() - interval '30 seconds')") # committed 30 s late
    expect(reporter.run(conn).map { |row| row["event_id"] }).to eq(["evt_new"])
    expect(reporter.run(conn)).to eq([])
    expect(db.value("SELECT since FROM webhook_inbox_error_reporter")).to eq(since) # short polls never move it
    # rescan_every_s 0: every poll is a full one, which finds the late commit within the grace
    expect(described_class.new(grace_s: 60, window_s: 10, rescan_every_s: 0).run(conn).map { |row| row["event_id"] }).to eq(["evt_late"])
    expect(described_class.new(grace_s: 60, window_s: 10, rescan_every_s: 0).run(conn)).to eq([])
  end

  it "reports a requeued event's new quarantine, and prunes the report of a quarantine that is over" do
    quarantine_by_sidecar(["evt_1"])
    tracker = QuarantineSpecTracker.new
    rails_with(tracker)
    expect(described_class.new.run(conn).size).to eq(1)
    db.psql("SELECT * FROM webhook_inbox_requeue('requeue', '{\"event_id\": \"evt_1\"}', 'ops@test')")
    expect(conn.select_value("SELECT webhook_inbox_error_reports_prune(100)")).to eq(1)
    quarantine_by_sidecar(["evt_1"])
    expect(described_class.new.run(conn).map { |row| row["event_id"] }).to eq(["evt_1"])
    expect(conn.select_value("SELECT webhook_inbox_error_reports_prune(100)")).to eq(0) # still quarantined: kept
    expect(tracker.reports.size).to eq(2)
  end

  it "does nothing outside Rails but still records the quarantine as taken, and a raising tracker is logged" do
    quarantine_by_sidecar(%w[evt_1 evt_2])
    hide_const("Rails")
    expect(described_class.new.run(conn).size).to eq(1 + 1)
    db.psql("TRUNCATE webhook_inbox_error_reports")
    broken = Object.new.tap { |o| o.define_singleton_method(:report) { |*, **| raise IOError, "tracker down" } }
    stub_const("Rails", Module.new.tap { |m| m.define_singleton_method(:error) { broken } })
    failures = []
    expect(described_class.new(on_failure: ->(row, e) { failures << [row["event_id"], e.class] }).run(conn).size).to eq(2)
    expect(failures.sort).to eq([["evt_1", IOError], ["evt_2", IOError]])
  end

  it "exits 1 in report-only mode on a schema without the reporter (fail closed)" do
    db.psql("ALTER FUNCTION webhook_inbox_error_reports_take(integer, double precision, double precision) " \
            "RENAME TO webhook_inbox_error_reports_take_gone")
    out = StringIO.new
    expect(WebhookInbox::Handlers::Worker.cli(["--report-only"], out: out)).to eq(1)
    expect(out.string).to include("level=error event=ruby_worker_schema_old")
  ensure
    db.psql("ALTER FUNCTION webhook_inbox_error_reports_take_gone(integer, double precision, double precision) " \
            "RENAME TO webhook_inbox_error_reports_take")
  end
end
