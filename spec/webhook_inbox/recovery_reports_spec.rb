# frozen_string_literal: true

require "json"
require "securerandom"
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
require_relative "../support/fake_provider_apis"
require_relative "../support/receiver_helpers"
require_relative "../support/forked_ruby_worker"
require_relative "../support/stubbed_rails"

# Reconcile's recoveries reach the app through the Ruby worker (Handlers::RecoveryReports,
# schema v27): one recover.webhook_inbox per recovered event across processes (two
# `--report-only` workers racing, the events recovered by the real binary's `reconcile`
# from a fake Stripe API), ids and names only, never Rails.error; a redelivery is told as
# redelivered; never a recovery from before the reporter's column; again when the publishing
# transaction rolled back (at least once); report rows go once behind the watermark.
RSpec.describe WebhookInbox::Handlers::RecoveryReports, :sidecar do
  include SidecarHelper
  include ForkedRubyWorker
  include StubbedRails

  RECOVERY_STRIPE_KEY = "sk_test_recovery_#{SecureRandom.hex(8)}".freeze
  KEYS = %i[provider scope event_id event_type how].freeze

  before(:all) do
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    @url = ReceiverHelpers.ar_url(@db.pg).sub(@db.pg.dbname, @db.name)
    ActiveRecord::Base.establish_connection(@url)
  end

  after(:all) { ActiveRecord::Base.remove_connection }

  let(:db) { @db }
  let(:scope) { "stripe:#{SecureRandom.hex(4)}:test" }

  around do |example|
    @dir = Dir.mktmpdir("recovery_reports")
    @api = FakeProviderApis.new(stripe_key: RECOVERY_STRIPE_KEY)
    db.reset!
    db.psql("TRUNCATE webhook_inbox_recovery_reports, webhook_inbox_error_reports, webhook_inbox_reconcile_cursors")
    example.run
  ensure
    @workers&.each { |pid| stop_worker(pid) }
    @subs&.each { |s| ActiveSupport::Notifications.unsubscribe(s) }
    @api&.stop
    FileUtils.rm_rf(@dir)
  end

  def conn = ActiveRecord::Base.connection

  # Rails (StubbedRails) whose tracker records every report in errors (there must be none: a
  # recovery is not a failure), and a tagged logger into log.
  def rails_errors_into(errors, log = StringIO.new)
    rails_with(Object.new.tap { |t| t.define_singleton_method(:report) { |e, **| errors << e } }, log)
  end

  # recover.webhook_inbox's payloads, appended as JSON lines to path (shared by forked
  # workers, one short O_APPEND write each) when given, and into the returned array.
  def subscribe(path = nil)
    seen = []
    (@subs ||= []) << ActiveSupport::Notifications.subscribe("recover.webhook_inbox") do |*, payload|
      seen << payload
      File.open(path, "a") { |f| f.write("#{JSON.generate(payload.merge(pid: Process.pid))}\n") } if path
    end
    seen
  end

  # n Stripe events the inbox lacks, recovered by the real sidecar's reconcile.
  def recover_by_sidecar(n)
    base = Time.now.to_i - 3600
    ids = Array.new(n) do |i|
      id = format("evt_rec_%04d", i)
      @api.add_event({ "id" => id, "object" => "event", "type" => "invoice.paid", "created" => base - i, "livemode" => false,
                       "data" => { "object" => { "id" => "in_secret_#{i}", "amount_paid" => 4242 } } })
      id
    end
    env = { "WEBHOOK_INBOX_TEST_STRIPE_API" => @api.url, "WEBHOOK_INBOX_BILLING_API_KEY" => RECOVERY_STRIPE_KEY }
    status, out, err = sidecar("reconcile", "--database-url", db.url, "--endpoint", "billing=stripe:#{scope}",
                               "--endpoint", "billing", "--since", "72h", env: env)
    expect(status.exitstatus).to eq(0), err
    expect(out).to match(/recovered=#{n} /)
    ids
  end

  it "publishes each recovery once, fetched, with two report-only workers racing, and reports no error" do
    path = File.join(@dir, "recoveries.jsonl")
    errors = []
    rails_errors_into(errors)
    subscribe(path)
    ids = recover_by_sidecar(150)
    2.times { start_worker(WebhookInbox::Handlers::Registry.new, report_only: true) }
    wait_until("every recovery published") { File.exist?(path) && File.readlines(path).size >= ids.size }
    sleep 0.5 # a second publication, if any, would land meanwhile
    seen = File.readlines(path).map { |l| JSON.parse(l) }
    expect(seen.map { |p| p["event_id"] }.sort).to eq(ids)
    expect(seen.map { |p| p["pid"] }.uniq.size).to be_between(1, 2)
    expect(seen.find { |p| p["event_id"] == "evt_rec_0007" })
      .to eq("provider" => "stripe", "scope" => scope, "event_id" => "evt_rec_0007", "event_type" => "invoice.paid",
             "how" => "fetched", "pid" => seen.find { |p| p["event_id"] == "evt_rec_0007" }["pid"])
    expect(File.read(path)).not_to include("in_secret")
    expect(File.read(path)).not_to include("4242")
    expect(errors).to eq([])
    expect(worker_log.lines.grep(/event=recovery_reported event_id=evt_rec_0007 type=invoice.paid how=fetched scope=#{scope}/).size).to eq(1)
    expect(db.int("SELECT count(*) FROM webhook_inbox_recovery_reports")).to eq(ids.size)
  end

  it "publishes a redelivery as redelivered with exactly the documented keys, and logs a tagged line" do
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, request_headers, recovered_at) VALUES " \
            "('github:1', 'sha_1', 'issues', '{\"token\": \"ghs_secret\"}', " \
            "'{\"x-github-delivery\": \"g-1\", \"x-hub-signature-256\": \"sha256=abc\"}', clock_timestamp())")
    log = StringIO.new
    rails_errors_into([], log)
    seen = subscribe
    expect(described_class.new.run(conn).map { |row| row["event_id"] }).to eq(["sha_1"])
    expect(seen).to eq([{ provider: "github", scope: "github:1", event_id: "sha_1", event_type: "issues", how: "redelivered" }])
    expect(seen.map(&:keys)).to eq([WebhookInbox::Instrumentation::KEYS["recover.webhook_inbox"]])
    expect(KEYS).to eq(WebhookInbox::Instrumentation::KEYS["recover.webhook_inbox"])
    expect(log.string.lines.size).to eq(1)
    expect(log.string).to include("[event_id=sha_1] [type=issues] webhook_inbox event=recovery_reported event_id=sha_1 " \
                                  "type=issues how=redelivered scope=github:1")
    expect(seen.inspect + log.string).not_to include("secret")
    expect(seen.inspect + log.string).not_to include("sha256=")
  end

  it "publishes again after a rollback (at least once), never a recovery from before the reporter" do
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at) VALUES " \
            "('s', 'evt_old', 't', '{}', now() - interval '1 day'), ('s', 'evt_new', 't', '{}', clock_timestamp())")
    rails_errors_into([])
    seen = subscribe
    reporter = described_class.new
    expect do
      conn.transaction do
        reporter.run(conn)
        raise "killed before the commit"
      end
    end.to raise_error(RuntimeError, "killed before the commit")
    expect(reporter.run(conn).map { |row| row["event_id"] }).to eq(["evt_new"]) # taken again: the first take rolled back
    expect(reporter.run(conn)).to eq([])
    expect(seen.map { |p| p[:event_id] }).to eq(%w[evt_new evt_new])
  end

  it "moves its watermark on after a full poll, reads only the last seconds in a short one, and prunes rows behind it" do
    db.psql("UPDATE webhook_inbox_error_reporter SET recovered_since = now() - interval '1 day'")
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at) VALUES " \
            "('s', 'evt_1', 't', '{}', now() - interval '2 hours')")
    rails_errors_into([])
    reporter = described_class.new(grace_s: 60, window_s: 10, rescan_every_s: 3600)
    expect(reporter.run(conn).map { |row| row["event_id"] }).to eq(["evt_1"]) # the first poll is a full one
    expect(db.value("SELECT recovered_since > now() - interval '2 minutes' AND recovered_since < now() - interval '50 seconds' " \
                    "FROM webhook_inbox_error_reporter")).to eq("t")
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at) VALUES " \
            "('s', 'evt_now', 't', '{}', now()), ('s', 'evt_late', 't', '{}', now() - interval '30 seconds'), " \
            "('s', 'evt_too_late', 't', '{}', now() - interval '90 seconds')")
    expect(reporter.run(conn).map { |row| row["event_id"] }).to eq(["evt_now"])
    expect(conn.select_value("SELECT webhook_inbox_app_reports_prune(100)")).to eq(1) # evt_1's: behind the watermark
    expect(described_class.new(grace_s: 60, rescan_every_s: 0).run(conn).map { |row| row["event_id"] }).to eq(["evt_late"])
    expect(db.value("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox_recovery_reports")).to eq("evt_late,evt_now")
  end
end
