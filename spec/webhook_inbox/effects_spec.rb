# frozen_string_literal: true

require "spec_helper"
require "fileutils"
require "tmpdir"
require "logger"
require "active_record"
require "active_job"
require "stringio"
require "active_support/error_reporter"
require "active_support/notifications"
require "webhook_inbox/handlers"
require "webhook_inbox/handlers/worker"
require "webhook_inbox/effects/job_runner"
require "webhook_inbox/testing/drain"
require_relative "../support/receiver_helpers"
require_relative "../support/forked_ruby_worker"

# Jobs enqueued by Ruby handlers (lib/webhook_inbox/effects.rb): captured into the outbox in
# the handler's savepoint instead of the app's adapter, performed after the commit by the
# worker (Effects::JobRunner) under a stable key, once; a failing handler leaves none; a job
# that raises is retried with its writes rolled back; a worker killed after the handler's
# commit and before the job ran performs it once after a restart. Outside a handler,
# perform_later reaches the app's adapter as before.
RSpec.describe WebhookInbox::Effects do
  include ForkedRubyWorker

  # The app's adapter: records what reaches it (a stock app's :async would run it in a thread
  # of the process and lose it with the process).
  class EffectsSpecAdapter
    def self.enqueued = @enqueued ||= []
    def enqueue(job) = self.class.enqueued << job.class.name
    def enqueue_at(job, _at) = enqueue(job)
    def enqueue_after_transaction_commit? = false
  end

  # The job: a row in the job's transaction (rolled back with a failed attempt) and a line in
  # a file (what a mail would be: it stays), with the key it saw.
  class EffectsSpecJob < ActiveJob::Base
    def perform(dir, name, behaviour = nil)
      key = WebhookInbox.effect_key
      ActiveRecord::Base.connection.exec_insert("INSERT INTO job_rows (name, effect_key) VALUES ($1, $2)", "spec", [name, key])
      case behaviour
      when "fail_once"
        flag = File.join(dir, "failed_#{name}")
        unless File.exist?(flag)
          FileUtils.touch(flag)
          raise "smtp timeout"
        end
      when "pause_once" # the first attempt stops here, before its "send": the test kills the worker
        flag = File.join(dir, "paused_#{name}")
        unless File.exist?(flag)
          FileUtils.touch(flag)
          sleep 30
        end
      end
      File.open(File.join(dir, "sent"), "a") { |f| f.puts("#{name} #{key}") }
    end
  end

  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "effects")
    @pg.psql("CREATE TABLE job_rows (id bigserial PRIMARY KEY, name text NOT NULL, effect_key text)", db: @db)
    @url = ReceiverHelpers.ar_url(@pg).sub(@pg.dbname, @db)
    ActiveRecord::Base.establish_connection(@url)
    ActiveJob::Base.logger = Logger.new(nil)
    ActiveJob::Base.queue_adapter = EffectsSpecAdapter.new
    WebhookInbox::Effects.install!
  end

  after(:all) { ActiveRecord::Base.remove_connection }

  around do |example|
    @dir = Dir.mktmpdir("effects")
    EffectsSpecAdapter.enqueued.clear
    FileUtils.touch(File.join(@dir, "sent"))
    @pg.psql("TRUNCATE webhook_inbox, webhook_inbox_outbox, webhook_inbox_ruby_handlers, job_rows", db: @db)
    example.run
  ensure
    @workers&.each { |pid| stop_worker(pid) }
    FileUtils.rm_rf(@dir)
  end

  def sql(text) = @pg.psql(text, db: @db).strip
  def sent = File.readlines(File.join(@dir, "sent"), chomp: true)

  def registry(&body)
    WebhookInbox::Handlers::Registry.new.tap { |r| r.add(["order.paid"], body, name: "receipt") }
  end

  def store_and_dispatch(reg, *ids)
    sql("SELECT webhook_inbox_ruby_register('#{JSON.generate(reg.pairs)}')")
    ids.each do |id|
      sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', '#{id}', 'order.paid', '{}')")
    end
    sql("SELECT count(*) FROM webhook_inbox_dispatch_batch(100, 'wait', 10, 1000, 3600000, 60000)")
  end

  def runner(reg) = WebhookInbox::Handlers::Runner.new(reg, backoff_base_ms: 0, backoff_cap_ms: 0)
  def jobs(**opts) = WebhookInbox::Effects::JobRunner.new(backoff_base_ms: 0, backoff_cap_ms: 0, **opts)
  def conn = ActiveRecord::Base.connection
  def op_id(event_id) = sql("SELECT webhook_inbox_handler_operation_id('s', '#{event_id}', 'receipt')")

  it "keeps a handler's perform_later in the outbox with its commit, not the app's adapter, and performs it once after" do
    dir = @dir
    reg = registry { |e| EffectsSpecJob.perform_later(dir, e.id) }
    store_and_dispatch(reg, "evt_1")
    expect(runner(reg).run_batch(conn, 10).map(&:status)).to eq(["delivered"])
    key = "#{op_id('evt_1')}/1"
    expect(sql("SELECT operation_id || ' ' || destination || ' ' || status || ' ' || source_event_id FROM webhook_inbox_outbox " \
               "WHERE destination = 'active_job'")).to eq("#{key} active_job pending evt_1")
    expect([EffectsSpecAdapter.enqueued, sent]).to eq([[], []]) # nothing reached the adapter, nothing ran yet

    expect(jobs.run_batch(conn, 10).map { |r| [r.key, r.status, r.job_class] }).to eq([[key, "delivered", "EffectsSpecJob"]])
    expect(jobs.run_batch(conn, 10)).to eq([]) # delivered once: nothing due again
    expect(sent).to eq(["evt_1 #{key}"])
    expect(sql("SELECT name || ' ' || effect_key FROM job_rows")).to eq("evt_1 #{key}")
    expect(sql("SELECT status || ' ' || attempts FROM webhook_inbox_outbox WHERE destination = 'active_job'")).to eq("delivered 1")
  end

  it "leaves no job behind for a handler that fails, and records the same key when its retry succeeds" do
    dir = @dir
    reg = registry do |e|
      EffectsSpecJob.perform_later(dir, e.id)
      raise "card network timeout" if e.attempt == 1
    end
    store_and_dispatch(reg, "evt_2")
    expect(runner(reg).run_batch(conn, 10).map(&:status)).to eq(["pending"])
    expect(sql("SELECT count(*) FROM webhook_inbox_outbox WHERE destination = 'active_job'")).to eq("0")
    expect(runner(reg).run_batch(conn, 10).map(&:status)).to eq(["delivered"])
    expect(sql("SELECT operation_id FROM webhook_inbox_outbox WHERE destination = 'active_job'")).to eq("#{op_id('evt_2')}/1")
    jobs.run_batch(conn, 10)
    expect(sent.size).to eq(1)
  end

  it "retries a job that raises with its writes rolled back, under the same key, then delivers it once" do
    dir = @dir
    reg = registry { |e| EffectsSpecJob.perform_later(dir, e.id, "fail_once") }
    store_and_dispatch(reg, "evt_3")
    runner(reg).run_batch(conn, 10)
    first = jobs.run_batch(conn, 10)
    expect(first.map { |r| [r.status, r.error] }).to eq([["pending", "RuntimeError: smtp timeout"]])
    expect([sql("SELECT count(*) FROM job_rows"), sent]).to eq(["0", []]) # its row rolled back
    expect(jobs.run_batch(conn, 10).map { |r| [r.key, r.status, r.attempt] }).to eq([[first[0].key, "delivered", 2]])
    expect(sql("SELECT count(*) FROM job_rows")).to eq("1")
    expect(sent).to eq(["evt_3 #{first[0].key}"])
  end

  it "quarantines a job at max attempts" do
    reg = registry { |_e| EffectsSpecJob.perform_later("/nonexistent/dir", "x") }
    store_and_dispatch(reg, "evt_4")
    runner(reg).run_batch(conn, 10)
    runner = jobs(max_attempts: 2)
    statuses = Array.new(3) { runner.run_batch(conn, 10).map(&:status) }
    expect(statuses).to eq([["pending"], ["quarantined"], []])
  end

  # A tracker as Sentry's: subscribed to a real ActiveSupport::ErrorReporter behind Rails.error.
  class EffectsSpecTracker
    def reports = @reports ||= []
    def report(error, **kw) = reports << kw.merge(error: error)
  end

  it "reports a job quarantined for good to Rails.error once, unhandled, and publishes effect.webhook_inbox per attempt" do
    tracker = EffectsSpecTracker.new
    reporter = ActiveSupport::ErrorReporter.new.tap { |r| r.subscribe(tracker) }
    stub_const("Rails", Module.new.tap { |m| m.define_singleton_method(:error) { reporter } })
    seen = []
    sub = ActiveSupport::Notifications.subscribe("effect.webhook_inbox") { |*, p| seen << p }
    reg = registry { |_e| EffectsSpecJob.perform_later("/nonexistent/dir", "card_4242_secret_arg") }
    store_and_dispatch(reg, "evt_5")
    runner(reg).run_batch(conn, 10)
    out = StringIO.new
    worker = WebhookInbox::Handlers::Worker.new(registry: reg, out: out, max_attempts: 2, backoff_base_ms: 0, backoff_cap_ms: 0)
    3.times { worker.instance_variable_get(:@jobs).run_batch(conn, 10) }

    key = "#{op_id('evt_5')}/1"
    expect(tracker.reports.size).to eq(1)
    r = tracker.reports.first
    expect([r[:error].class, r[:handled], r[:severity], r[:source]]).to eq([Errno::ENOENT, false, :error, "webhook_inbox"])
    expect(r[:context]).to include(provider: "s", scope: "s", event_id: "evt_5", effect_key: key, job_class: "EffectsSpecJob",
                                   attempt: 2)
    expect(seen.map { |p| [p[:outcome], p[:attempt], p[:error_class]] }).to eq([["retry", 1, "Errno::ENOENT"],
                                                                              ["quarantined", 2, "Errno::ENOENT"]])
    seen.each { |p| expect(p.keys).to eq(WebhookInbox::Instrumentation::KEYS["effect.webhook_inbox"]) }
    expect((tracker.reports + seen).inspect).not_to include("card_4242")
    expect(out.string.lines.grep(/event=job /).size).to eq(2)
  ensure
    ActiveSupport::Notifications.unsubscribe(sub) if sub
  end

  it "records WebhookInbox.emit (an HTTP effect for the sidecar) with the handler's writes and its event as the source" do
    reg = registry do |e|
      expect(WebhookInbox.emit("refund:#{e.id}", destination: :refunds, payload: { "charge" => e.id })).to eq(true)
      expect(WebhookInbox.emit("refund:#{e.id}", destination: :refunds, payload: { "charge" => "other" })).to eq(false)
      raise "after the emit" if e.attempt == 1
    end
    store_and_dispatch(reg, "evt_e")
    runner(reg).run_batch(conn, 10)
    expect(sql("SELECT count(*) FROM webhook_inbox_outbox WHERE destination = 'refunds'")).to eq("0") # rolled back with it
    runner(reg).run_batch(conn, 10)
    expect(sql("SELECT concat_ws(' ', operation_id, status, source_scope, source_event_id, payload::text) FROM webhook_inbox_outbox " \
               "WHERE destination = 'refunds'")).to eq('refund:evt_e pending s evt_e {"charge": "evt_e"}')
  end

  it "leaves perform_later outside a handler to the app's adapter" do
    EffectsSpecJob.perform_later(@dir, "outside")
    expect(EffectsSpecAdapter.enqueued).to eq(["EffectsSpecJob"])
    expect(sql("SELECT count(*) FROM webhook_inbox_outbox")).to eq("0")
  end

  it "captures perform_all_later and a job's own enqueues (under the job's key) too" do
    dir = @dir
    reg = registry { |e| ActiveJob.perform_all_later([EffectsSpecJob.new(dir, "#{e.id}_a"), EffectsSpecJob.new(dir, "#{e.id}_b")]) }
    store_and_dispatch(reg, "evt_5")
    runner(reg).run_batch(conn, 10)
    expect(sql("SELECT string_agg(operation_id, ',' ORDER BY operation_id) FROM webhook_inbox_outbox WHERE destination = 'active_job'"))
      .to eq("#{op_id('evt_5')}/1,#{op_id('evt_5')}/2")
    expect(jobs.run_batch(conn, 10).map(&:status)).to eq(%w[delivered delivered])
    expect(EffectsSpecAdapter.enqueued).to eq([])
  end

  it "performs in the test's transaction with drain_webhook_inbox (Testing::Drain)" do
    dir = @dir
    WebhookInbox::Handlers.registry.clear
    WebhookInbox.subscribe("order.paid", as: "receipt") { |e| EffectsSpecJob.perform_later(dir, e.id) }
    conn.transaction do
      conn.execute("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', 'evt_6', 'order.paid', '{}')")
      outcomes = WebhookInbox::Testing::Drain.run(conn)
      expect(outcomes.map(&:result)).to eq(["done"])
      expect(conn.select_value("SELECT status FROM webhook_inbox_outbox WHERE destination = 'active_job'")).to eq("delivered")
      raise ActiveRecord::Rollback
    end
    expect(sent.map(&:split).map(&:first)).to eq(["evt_6"])
  ensure
    WebhookInbox::Handlers.registry.clear
  end

  it "performs a job once after a kill -9 of the worker between the handler's commit and the job's end, and beats" do
    dir = @dir
    reg = registry { |e| EffectsSpecJob.perform_later(dir, e.id, "pause_once") }
    ActiveRecord::Base.connection_pool.disconnect! # the fork takes no connection of ours
    store_and_dispatch(reg, "evt_k")
    pid = start_worker(reg, job_lease_ms: 500)
    wait_until("the job paused") { File.exist?(File.join(@dir, "paused_evt_k")) }
    Process.kill("KILL", pid)
    Process.wait(pid)
    # The handler's commit stands (event done); the job is pending, charged once, not sent.
    expect(sql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_k'")).to eq("done")
    expect(sql("SELECT status || ' ' || attempts FROM webhook_inbox_outbox WHERE destination = 'active_job'")).to eq("pending 1")
    expect([sent, sql("SELECT count(*) FROM job_rows")]).to eq([[], "0"])
    expect(sql("SELECT count(*) FROM webhook_inbox_workers WHERE pid = #{pid} AND stopped_at IS NULL")).to eq("1")

    pid2 = start_worker(reg, job_lease_ms: 500)
    wait_until("the job delivered") { sql("SELECT status FROM webhook_inbox_outbox WHERE destination = 'active_job'") == "delivered" }
    expect(sent).to eq(["evt_k #{op_id('evt_k')}/1"])
    expect(sql("SELECT count(*) || ' ' || max(effect_key) FROM job_rows")).to eq("1 #{op_id('evt_k')}/1")
    expect(sql("SELECT attempts FROM webhook_inbox_outbox WHERE destination = 'active_job'")).to eq("2")
    stop_worker(pid2)
    expect(sql("SELECT count(*) FROM webhook_inbox_workers WHERE pid = #{pid2} AND stopped_at IS NOT NULL")).to eq("1")
  end
end
