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
require_relative "../support/fake_receipt_api"
require_relative "../support/receiver_helpers"
require_relative "../support/stubbed_rails"
require_relative "../support/forked_ruby_worker"

# The HTTP effects the real sidecar's outbox delivery quarantines reach the app through the
# Ruby worker (Handlers::EffectReports, schema v27): one unhandled Rails.error report and one
# effect.webhook_inbox (outcome quarantined) each, ids and names only (never the request's
# body, the destination URL's query or the answer); not the Ruby worker's own jobs or runs,
# nor one from before the reporter's column; again after a rollback (at least once), and
# again when a requeued effect is quarantined anew.
RSpec.describe WebhookInbox::Handlers::EffectReports, :sidecar do
  include SidecarHelper
  include SidecarHelper::Payloads
  include StubbedRails
  include ForkedRubyWorker

  before(:all) do
    @api = FakeReceiptApi.new
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    @url = ReceiverHelpers.ar_url(@db.pg).sub(@db.pg.dbname, @db.name)
    ActiveRecord::Base.establish_connection(@url)
    @db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_emit_refund(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM webhook_inbox_emit('refund:' || ev.event_id, 'refunds', jsonb_build_object('card', ev.payload ->> 'card'));
        RETURN 'emitted';
      END $$;
    SQL
  end

  after(:all) do
    ActiveRecord::Base.remove_connection
    @api&.stop
  end

  let(:db) { @db }

  before do
    db.reset!
    db.psql("TRUNCATE webhook_inbox_outbox, webhook_inbox_effect_reports")
    db.psql("UPDATE webhook_inbox_error_reporter SET effects_since = now() - interval '1 minute'") # an example moves it
    db.psql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('test.refund', 't_emit_refund')")
  end

  def conn = ActiveRecord::Base.connection

  # Rails (StubbedRails) with tracker and a tagged logger into log, and effect.webhook_inbox's
  # payloads into the returned array.
  def rails_and_effects(tracker, log = StringIO.new)
    rails_with(tracker, log)
    seen = []
    @sub = ActiveSupport::Notifications.subscribe("effect.webhook_inbox") { |*, p| seen << p }
    seen
  end

  after { ActiveSupport::Notifications.unsubscribe(@sub) if @sub }

  around do |example|
    @dir = Dir.mktmpdir("effect_reports")
    example.run
  ensure
    @workers&.each { |pid| stop_worker(pid) }
    FileUtils.rm_rf(@dir)
  end

  def tracker
    Object.new.tap do |t|
      reports = []
      t.define_singleton_method(:reports) { reports }
      t.define_singleton_method(:report) { |error, **kw| reports << kw.merge(error: error) }
    end
  end

  # ids' events handled by the real sidecar (each emits refund:<id>), whose delivery to a
  # destination answering 422 (its URL with a query that must never show) quarantines them.
  def quarantine_by_sidecar(ids)
    ids.each { |id| db.insert_event(id, "test.refund", { "card" => "card_4242_secret" }) }
    pid, = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "200ms",
                         "--destination", "refunds=#{@api.url}/status/422?sig=query_secret", "--destination-timeout", "2s")
    wait_for(30, 0.05, "quarantined") do
      db.int("SELECT count(*) FROM webhook_inbox_outbox WHERE status = 'quarantined' AND destination = 'refunds'") == ids.size
    end
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "reports each effect the sidecar quarantined once, unhandled, with effect.webhook_inbox, ids and names only" do
    quarantine_by_sidecar(%w[evt_1 evt_2])
    t = tracker
    log = StringIO.new
    seen = rails_and_effects(t, log)
    expect(described_class.new.run(conn).map { |row| row["operation_id"] }).to eq(%w[refund:evt_1 refund:evt_2])
    expect(described_class.new.run(conn)).to eq([])
    expect(t.reports.size).to eq(2)
    r = t.reports.find { |x| x[:context][:operation_id] == "refund:evt_1" }
    expect([r[:error].class, r[:handled], r[:severity], r[:source]]).to eq([described_class::Failed, false, :error, "webhook_inbox"])
    expect(r[:error].message).to start_with("HTTP 422 (not retried")
    expect(r[:context]).to include(provider: "stripe", scope: SidecarHelper::SCOPE, event_id: "evt_1", operation_id: "refund:evt_1",
                                   destination: "refunds", attempt: 1)
    expect(seen.map(&:keys)).to all(eq(WebhookInbox::Instrumentation::KEYS["effect.webhook_inbox"]))
    expect(seen.first).to eq(provider: "stripe", scope: SidecarHelper::SCOPE, event_id: "evt_1", effect_key: "refund:evt_1",
                             destination: "refunds", job_class: nil, attempt: 1, outcome: "quarantined", duration_ms: nil,
                             error_class: "WebhookInbox::Handlers::EffectReports::Failed")
    expect(log.string).to include("[operation_id=refund:evt_1] [destination=refunds] webhook_inbox event=effect_quarantine_reported " \
                                  "operation_id=refund:evt_1 destination=refunds attempt=1 event_id=evt_1 scope=#{SidecarHelper::SCOPE}")
    told = t.reports.inspect + seen.inspect + log.string
    %w[card_4242 query_secret sig= status 422"].each { |secret| expect(told).not_to include(secret) }
  end

  it "reports each once with two report-only workers racing" do
    path = File.join(@dir, "reports.jsonl")
    shared = Object.new.tap do |t| # a tracker appending to a file the forked workers share (one O_APPEND write each)
      t.define_singleton_method(:report) do |_error, context:, **|
        File.open(path, "a") { |f| f.write("#{JSON.generate(context.slice(:operation_id).merge(pid: Process.pid))}\n") }
      end
    end
    rails_with(shared)
    ids = Array.new(60) { |i| format("evt_%02d", i) }
    quarantine_by_sidecar(ids)
    2.times { start_worker(WebhookInbox::Handlers::Registry.new, report_only: true) }
    wait_until("every effect reported") { File.exist?(path) && File.readlines(path).size >= ids.size }
    sleep 0.5 # a second report, if any, would land meanwhile
    reports = File.readlines(path).map { |l| JSON.parse(l) }
    expect(reports.map { |r| r["operation_id"] }.sort).to eq(ids.map { |id| "refund:#{id}" })
    expect(worker_log.lines.grep(/event=effect_quarantine_reported operation_id=refund:evt_07 destination=refunds/).size).to eq(1)
  end

  it "leaves out the Ruby worker's own jobs and runs, and effects from before the reporter; reports again after a rollback" do
    db.psql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, source_scope, source_event_id, processed_at) " \
            "VALUES ('op_job', 'active_job', '{}', 'quarantined', 's', 'e', clock_timestamp()), " \
            "('op_run', 'ruby', '{}', 'quarantined', 's', 'e', clock_timestamp()), " \
            "('op_old', 'refunds', '{}', 'quarantined', 's', 'e', now() - interval '1 day'), " \
            "('op_free', 'refunds', '{}', 'quarantined', '', NULL, clock_timestamp())")
    t = tracker
    rails_and_effects(t)
    reporter = described_class.new
    expect do
      conn.transaction do
        reporter.run(conn)
        raise "killed before the commit"
      end
    end.to raise_error(RuntimeError, "killed before the commit")
    expect(reporter.run(conn).map { |row| row["operation_id"] }).to eq(["op_free"]) # taken again: the first take rolled back
    expect(reporter.run(conn)).to eq([])
    expect(t.reports.map { |x| x[:context] }).to all(include(provider: nil, scope: nil, event_id: nil, operation_id: "op_free"))
    expect(t.reports.size).to eq(2)
  end

  it "reports a requeued effect's new quarantine, and prunes report rows behind the watermark" do
    quarantine_by_sidecar(["evt_1"])
    t = tracker
    rails_and_effects(t)
    expect(described_class.new.run(conn).size).to eq(1)
    status, out, = sidecar("requeue", "--effects", "--operation-id", "refund:evt_1", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "requeued 1 effects\n"])
    pid, = spawn_sidecar("run", "--database-url", db.url, "--poll-interval", "200ms", "--destination", "refunds=#{@api.url}/status/422")
    wait_for(30, 0.05, "quarantined again") { db.int("SELECT count(*) FROM webhook_inbox_outbox WHERE status = 'quarantined'") == 1 }
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
    expect(described_class.new.run(conn).size).to eq(1)
    expect(t.reports.size).to eq(2)
    db.psql("UPDATE webhook_inbox_error_reporter SET effects_since = now() + interval '1 second'")
    expect(conn.select_value("SELECT webhook_inbox_app_reports_prune(100)")).to eq(2)
  end
end
