# frozen_string_literal: true

require "spec_helper"
require "json"
require "logger"
require "stringio"
require "active_record"
require "active_support/error_reporter"
require "active_support/notifications"
require "active_support/tagged_logging"
require "webhook_inbox/testing/rspec"
require "webhook_inbox/handlers/worker"
require "active_support/core_ext/string/filters"
require_relative "../../app/models/webhook_inbox/event_list"
require_relative "../../app/models/webhook_inbox/effect_list"
require_relative "../support/receiver_helpers"

# What a Ruby handler's runs tell the app (Handlers::Reporting, through the Worker's
# on_result, once a batch committed): Rails.error gets one handled warning per failed attempt
# that will be retried and one unhandled error per quarantine (the last attempt's, or
# Permanent's); handle.webhook_inbox and quarantine.webhook_inbox carry exactly their
# documented keys; Rails.logger gets one tagged line per outcome; a batch that rolls back
# reports nothing. Never the event's payload. Rails here is a stand-in with a real
# ActiveSupport::ErrorReporter and a tagged logger (the worker sees no more of Rails).
RSpec.describe WebhookInbox::Handlers::Reporting do
  SECRETISH = "card_4242_secret_in_payload"

  # A tracker as Sentry's or Honeybadger's: ErrorReporter#subscribe, #report(error, handled:, ...).
  class TrackerStub
    attr_reader :reports

    def initialize = @reports = []

    def report(error, handled:, severity:, context:, source: nil)
      @reports << { error: error, handled: handled, severity: severity, context: context, source: source }
    end
  end

  before(:all) do
    pg = TestDatabase.cluster
    @db = "handlers_reporting_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{@db}", db: "postgres")
    ReceiverHelpers.schema_files.each { |f| pg.psql(File.read(f), db: @db) }
    ActiveRecord::Base.establish_connection(ReceiverHelpers.ar_url(pg).sub(pg.dbname, @db))
  end

  after(:all) { ActiveRecord::Base.remove_connection }

  let(:tracker) { TrackerStub.new }
  let(:log) { StringIO.new }
  let(:notifications) { [] }

  before do
    reporter = ActiveSupport::ErrorReporter.new
    reporter.subscribe(tracker)
    logger = ActiveSupport::TaggedLogging.new(Logger.new(log))
    stub_const("Rails", Module.new.tap do |rails|
      rails.define_singleton_method(:error) { reporter }
      rails.define_singleton_method(:logger) { logger }
    end)
  end

  around do |example|
    sub = ActiveSupport::Notifications.subscribe(/\.webhook_inbox\z/) do |name, _s, _f, _id, payload|
      notifications << [name, payload]
    end
    ActiveRecord::Base.transaction do
      example.run
      raise ActiveRecord::Rollback
    end
  ensure
    ActiveSupport::Notifications.unsubscribe(sub)
  end

  def conn = ActiveRecord::Base.connection

  # A worker over reg (max_attempts 3, no backoff), its stderr in out; run its rounds with round.
  def worker(reg, out = StringIO.new)
    WebhookInbox::Handlers.register(conn, reg)
    WebhookInbox::Handlers::Worker.new(registry: reg, out: out, max_attempts: 3, backoff_base_ms: 0)
  end

  # One round of the worker's Runner (its on_result included); the backoff of runs before it elapsed.
  def round(worker)
    conn.update("UPDATE webhook_inbox_outbox SET next_attempt_at = now() WHERE destination = 'ruby' AND status = 'pending'")
    worker.instance_variable_get(:@runner).run_batch(conn, 10)
  end

  def registry(name, &body)
    WebhookInbox::Handlers::Registry.new.tap { |r| r.add(["invoice.paid"], body, name: name) }
  end

  def store(id)
    store_webhook_event(event_id: id, event_type: "invoice.paid", scope: "stripe:acct_1:live",
                        payload: { "id" => id, "card" => SECRETISH })
    conn.select_rows("SELECT result FROM webhook_inbox_dispatch_batch(10, 'wait', 10, 1000, 3600000, 60000)")
  end

  def context(attempt) = { provider: "stripe", scope: "stripe:acct_1:live", event_id: "evt_1", event_type: "invoice.paid",
                           handler: "mark_paid", attempt: attempt }

  it "reports each failed attempt as handled and the quarantine once as unhandled, with ids only" do
    w = worker(registry("mark_paid") { |e| raise ArgumentError, "declined on attempt #{e.attempt}" })
    store("evt_1")
    3.times { expect(round(w).size).to eq(1) }
    expect(round(w)).to eq([]) # quarantined: nothing more runs, nothing more reported
    expect(conn.select_value("SELECT status FROM webhook_inbox WHERE event_id = 'evt_1'")).to eq("quarantined")

    expect(tracker.reports.map { |r| [r[:error].class, r[:error].message, r[:handled], r[:severity], r[:source]] }).to eq(
      [[ArgumentError, "declined on attempt 1", true, :warning, "webhook_inbox"],
       [ArgumentError, "declined on attempt 2", true, :warning, "webhook_inbox"],
       [ArgumentError, "declined on attempt 3", false, :error, "webhook_inbox"]]
    )
    tracker.reports.each_with_index { |r, i| expect(r[:context]).to include(context(i + 1)) }
    expect(tracker.reports.inspect).not_to include(SECRETISH)
  end

  it "reports Permanent once, unhandled, and a success not at all" do
    w = worker(registry("mark_paid") { |e| raise WebhookInbox::Permanent, "amount mismatch" if e.id == "evt_1" })
    store("evt_1")
    store("evt_2")
    expect(round(w).map(&:status).sort).to eq(%w[delivered quarantined])
    expect(tracker.reports.size).to eq(1)
    r = tracker.reports.first
    expect([r[:error].class, r[:handled], r[:severity]]).to eq([WebhookInbox::Permanent, false, :error])
    expect(r[:context]).to include(context(1))
  end

  it "publishes handle and quarantine with exactly the documented keys, never the payload" do
    w = worker(registry("mark_paid") { |e| raise "boom" if e.id == "evt_1" })
    store("evt_1")
    store("evt_2")
    3.times { round(w) }
    handles = notifications.select { |n, _| n == "handle.webhook_inbox" }.map(&:last)
    quarantines = notifications.select { |n, _| n == "quarantine.webhook_inbox" }.map(&:last)
    expect(handles.map { |p| [p[:event_id], p[:attempt], p[:outcome], p[:error_class]] }.sort_by { |a| [a[1], a[0]] })
      .to eq([["evt_1", 1, "retry", "RuntimeError"], ["evt_2", 1, "done", nil], ["evt_1", 2, "retry", "RuntimeError"],
              ["evt_1", 3, "quarantined", "RuntimeError"]])
    expect(quarantines.size).to eq(1)
    expect(quarantines.first).to include(context(3).merge(error: "RuntimeError: boom"))
    handles.each do |p|
      expect(p.keys).to eq(WebhookInbox::Instrumentation::KEYS["handle.webhook_inbox"])
      expect(p[:duration_ms]).to be_a(Float)
    end
    expect(quarantines.first.keys).to eq(WebhookInbox::Instrumentation::KEYS["quarantine.webhook_inbox"])
    expect(notifications.inspect).not_to include(SECRETISH)
  end

  it "publishes run.webhook_inbox around each handler call, its SQL inside it, with exactly the documented keys" do
    w = worker(registry("mark_paid") do |e|
      ActiveRecord::Base.connection.select_value("SELECT 'inside the handler'")
      raise WebhookInbox::Permanent, "amount mismatch" if e.id == "evt_2"
      raise "boom" if e.id == "evt_3"
    end)
    %w[evt_1 evt_2 evt_3].each { |id| store(id) }
    order = []
    sql = ActiveSupport::Notifications.subscribe("sql.active_record") { |*, p| order << :sql if p[:sql] == "SELECT 'inside the handler'" }
    started = ActiveSupport::Notifications.subscribe("run.webhook_inbox", Class.new do
      define_method(:initialize) { |log| @log = log }
      define_method(:start) { |_name, _id, _payload| @log << :start }
      define_method(:finish) { |_name, _id, _payload| @log << :finish }
    end.new(order))
    round(w)
    runs = notifications.select { |n, _| n == "run.webhook_inbox" }.map(&:last)
    expect(runs.map { |p| [p[:event_id], p[:outcome]] }.sort).to eq([%w[evt_1 done], %w[evt_2 quarantined], %w[evt_3 retry]])
    runs.each { |p| expect(p.keys).to eq(WebhookInbox::Instrumentation::KEYS["run.webhook_inbox"]) }
    expect(runs.first).to include(provider: "stripe", scope: "stripe:acct_1:live", event_type: "invoice.paid", handler: "mark_paid", attempt: 1)
    expect(order).to eq(%i[start sql finish] * 3)
    expect(notifications.inspect).not_to include(SECRETISH)
  ensure
    ActiveSupport::Notifications.unsubscribe(sql) if sql
    ActiveSupport::Notifications.unsubscribe(started) if started
  end

  it "logs one line per outcome through Rails.logger, tagged with the event id, type and attempt" do
    out = StringIO.new
    w = worker(registry("mark_paid") { |e| raise "boom" if e.attempt == 1 }, out)
    store("evt_1")
    2.times { round(w) }
    lines = log.string.lines
    expect(lines.size).to eq(2)
    expect(lines[0]).to start_with("[event_id=evt_1] [type=invoice.paid] [attempt=1] webhook_inbox event=handler " \
                                   "handler=mark_paid event_id=evt_1 type=invoice.paid outcome=retry attempt=1")
    expect(lines[0]).to include('error="RuntimeError: boom"')
    expect(lines[1]).to start_with("[event_id=evt_1] [type=invoice.paid] [attempt=2] webhook_inbox event=handler " \
                                   "handler=mark_paid event_id=evt_1 type=invoice.paid outcome=done attempt=2")
    expect(out.string.lines.grep(/event=handler/).size).to eq(2) # the worker's own stream, as before
  end

  it "reports nothing for a batch that rolled back: its runs are due again and report when they commit" do
    w = worker(registry("mark_paid") { |_e| raise "boom" })
    store("evt_1")
    runner = w.instance_variable_get(:@runner)
    allow(runner).to receive(:finish).and_raise(ActiveRecord::StatementInvalid, "the commit failed")
    expect { ActiveRecord::Base.transaction(requires_new: true) { round(w) } }.to raise_error(ActiveRecord::StatementInvalid)
    expect(tracker.reports).to eq([])
    expect(notifications.map(&:first)).to eq(["run.webhook_inbox"]) # the handler ran; nothing of it committed
    expect(log.string).to eq("")
  end

  it "keeps the round going when a subscriber raises: the batch committed, the failure is logged" do
    out = StringIO.new
    w = worker(registry("mark_paid") { |_e| nil }, out)
    store("evt_1")
    bad = ActiveSupport::Notifications.subscribe("handle.webhook_inbox") { raise "subscriber bug" }
    expect(round(w).map(&:status)).to eq(["delivered"])
    expect(out.string).to include("level=error event=ruby_worker_report_failed event_id=evt_1")
  ensure
    ActiveSupport::Notifications.unsubscribe(bad) if bad
  end

  it "keeps the round going when Rails.error itself raises (a tracker's own reporter): the failure is logged" do
    broken = Object.new.tap { |o| o.define_singleton_method(:report) { |*, **| raise IOError, "tracker down" } }
    stub_const("Rails", Module.new.tap { |m| m.define_singleton_method(:error) { broken } })
    out = StringIO.new
    w = worker(registry("mark_paid") { |_e| raise "boom" }, out)
    store("evt_1")
    expect(round(w).map(&:status)).to eq(["pending"])
    expect(round(w).map(&:status)).to eq(["pending"]) # the worker goes on
    expect(out.string.lines.grep(/level=error event=ruby_worker_report_failed event_id=evt_1 error="IOError"/).size).to eq(2)
  end

  it "publishes requeue when the quarantined run is requeued (rake requeue_effects and the dashboard's EffectList)" do
    calls = 0
    w = worker(registry("mark_paid") { |_e| raise WebhookInbox::Permanent, "amount mismatch" if (calls += 1) == 1 })
    store("evt_1")
    expect(round(w).map(&:status)).to eq(["quarantined"])
    notifications.clear
    moved, id = WebhookInbox::EffectList.new("handler" => "mark_paid").requeue!(conn, "ops@test")
    expect(moved).to eq(1)
    expect(notifications.map(&:first)).to eq(["requeue.webhook_inbox"])
    payload = notifications.first.last
    expect(payload.keys).to eq(WebhookInbox::Instrumentation::KEYS["requeue.webhook_inbox"])
    expect(payload).to eq(kind: "effects", filter: { "handler" => "mark_paid" }, moved: 1, action_id: id, actor: "ops@test")
    expect(round(w).map(&:status)).to eq(["delivered"]) # requeued: it ran again
  end

  it "does nothing outside Rails" do
    hide_const("Rails")
    w = worker(registry("mark_paid") { |_e| raise "boom" })
    store("evt_1")
    expect(round(w).map(&:status)).to eq(["pending"])
    expect(tracker.reports).to eq([])
    expect(log.string).to eq("")
  end
end
