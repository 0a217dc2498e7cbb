# frozen_string_literal: true

require_relative "sidecar_helper"
require_relative "../support/fake_receipt_api"

# Issue 31, item 3: operational notifications. Two real sidecars run with --notify against one
# database and a local receiver; a quarantine burst is told once (one message per condition,
# whichever sidecar checks), its end once as resolved; each message is an outbox effect (the
# audit), signed when the destination signs, and carries counts and names only, never a
# payload. `notify --test` reaches the receiver through a running sidecar.
RSpec.describe "webhook-inbox-sidecar notify", :sidecar do
  include SidecarHelper

  before(:all) do
    @api = FakeReceiptApi.new
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
  end

  after(:all) { @api&.stop }
  after { kill_spawned }

  let(:db) { @db }
  let(:api) { @api }
  let(:secret) { "whsec_#{['notify-spec-key'].pack('m0')}" }

  def notify_args(*extra)
    ["run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "200ms",
     "--destination", "ops=#{api.url}/receipts/ops sign=standard_webhooks", "--destination", "chat=#{api.url}/receipts/chat",
     "--notify", "ops", "--notify", "chat:slack", "--notify-interval", "1s",
     "--notify-setting", "quarantine_burst=3", "--notify-setting", "min_interval_s=0", *extra]
  end

  def messages(path) = api.requests.select { |r| r.path == path }

  # Quarantined events as the sidecar leaves them, with a payload that must never travel.
  def quarantine(n, at: "now()")
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, processed_at, last_error)
      SELECT 'stripe:acct_1:test', 'q_' || i || '_' || md5(random()::text), 'payment_intent.succeeded',
             '{"card": "4242 SECRET PAYLOAD"}', 'quarantined', #{at}, 'boom'
        FROM generate_series(1, #{n}) i
    SQL
  end

  it "tells a quarantine burst once and its end once, from two sidecars, as signed JSON and as Slack text" do
    db.psql("TRUNCATE webhook_inbox, webhook_inbox_outbox, webhook_inbox_alerts")
    env = { "WEBHOOK_INBOX_DEST_OPS_SECRET" => secret }
    pids = Array.new(2) { spawn_sidecar(*notify_args, env: env).first }
    quarantine(4)
    wait_for(30, 0.1, "the firing message") { messages("/receipts/ops").size >= 1 && messages("/receipts/chat").size >= 1 }
    sleep 3 # three more checks by two sidecars: nothing new to tell
    ops = messages("/receipts/ops")
    expect(ops.size).to eq(1)
    firing = JSON.parse(ops.first.body)
    expect(firing).to include("type" => "webhook_inbox.alert", "condition" => "quarantine_burst", "state" => "firing", "value" => 4)
    expect(ops.first.headers).to include("webhook-signature", "webhook-id", "webhook-timestamp")
    chat = messages("/receipts/chat")
    expect(chat.size).to eq(1)
    expect(JSON.parse(chat.first.body).keys).to eq(["text"])
    expect(JSON.parse(chat.first.body)["text"]).to start_with("[FIRING] webhook_inbox quarantine_burst")
    (ops + chat).each { |r| expect(r.body).not_to include("SECRET", "4242", "boom") }

    db.psql("UPDATE webhook_inbox SET processed_at = now() - interval '2 hours' WHERE status = 'quarantined'")
    wait_for(30, 0.1, "the resolved message") { messages("/receipts/ops").size >= 2 && messages("/receipts/chat").size >= 2 }
    sleep 3
    expect(messages("/receipts/ops").map { |r| JSON.parse(r.body)["state"] }).to eq(%w[firing resolved])
    expect(JSON.parse(messages("/receipts/chat").last.body)["text"]).to start_with("[RESOLVED] webhook_inbox quarantine_burst")
    # the audit: one delivered effect per message, nothing else told, the state forgotten once told
    expect(db.value("SELECT string_agg(destination || ':' || status, ',' ORDER BY destination, created_at) FROM webhook_inbox_outbox"))
      .to eq("chat:delivered,chat:delivered,ops:delivered,ops:delivered")
    expect(db.int("SELECT count(*) FROM webhook_inbox_alerts WHERE firing")).to eq(0)
    pids.each do |pid|
      Process.kill("TERM", pid)
      expect(wait_exit(pid)&.exitstatus).to eq(0)
    end
  end

  it "holds a flapping condition to one message per interval" do
    db.psql("TRUNCATE webhook_inbox, webhook_inbox_outbox, webhook_inbox_alerts")
    args = ["{ops}", "{json}", '{"quarantine_burst": 1, "min_interval_s": 3600}']
    check = -> { db.value("SELECT coalesce(string_agg(condition || ' ' || state, ','), '') FROM webhook_inbox_alerts_check(#{args.map { |a| db.q(a) }.join(', ')})") }
    quarantine(1)
    expect(check.call).to eq("quarantine_burst firing")
    expect(check.call).to eq("") # told already
    db.psql("UPDATE webhook_inbox SET processed_at = now() - interval '2 hours' WHERE status = 'quarantined'")
    expect(check.call).to eq("") # cleared within the interval: the resolved message waits
    db.psql("UPDATE webhook_inbox_alerts SET told_at = now() - interval '2 hours'")
    expect(check.call).to eq("quarantine_burst resolved")
    expect(db.int("SELECT count(*) FROM webhook_inbox_outbox")).to eq(2)
  end

  it "sees each condition when it holds, and none on a quiet inbox" do
    db.psql("TRUNCATE webhook_inbox, webhook_inbox_outbox, webhook_inbox_alerts, webhook_inbox_refused, webhook_inbox_flow")
    settings = db.q('{"backlog_age_s": 60, "signature_failures": 2, "paused_backlog": 2}')
    conditions = -> { db.value("SELECT coalesce(string_agg(condition || '=' || value, ',' ORDER BY condition), '') FROM webhook_inbox_alert_conditions(#{settings})") }
    expect(conditions.call).to eq("")
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, next_attempt_at)
      VALUES ('s', 'old', 't', '{}', now() - interval '2 minutes');
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at, status, processed_at)
      VALUES ('s', 'rec', 't', '{}', now(), 'done', now());
      INSERT INTO webhook_inbox_refused (endpoint, source_scope, provider, reason, body, received_at)
      SELECT 'stripe_live', 's', 'stripe', 'signature_mismatch', '\\x00', now() FROM generate_series(1, 3);
      INSERT INTO webhook_inbox_flow (kind, target, paused, changed_by) VALUES ('route', 'held.*', true, 'spec');
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, next_attempt_at, held_at)
      SELECT 's', 'held_' || i, 'held.x', '{}', '9999-12-31', now() FROM generate_series(1, 2) i;
    SQL
    expect(conditions.call).to match(/\Abacklog_age=1[2-9]\d,paused_backlog=2,reconcile_recovered=1,signature_failures:stripe_live=3\z/)
  end

  it "refuses a --notify that names no destination, a bad format or setting, with a clear error" do
    st, _, err = sidecar("run", "--database-url", db.url, "--notify", "nowhere")
    expect([st.exitstatus, err]).to match([2, /--notify nowhere: no --destination of that name/])
    st, _, err = sidecar("run", "--database-url", db.url, "--destination", "ops=#{api.url}/x", "--notify", "ops:xml")
    expect([st.exitstatus, err]).to match([2, /the format is json or slack/])
    st, _, err = sidecar("run", "--database-url", db.url, "--destination", "ops=#{api.url}/x", "--notify", "ops",
                         "--notify-setting", "quarantine_burst=lots")
    expect([st.exitstatus, err]).to match([2, /KEY=NUMBER/])
    expect { db.psql("SELECT * FROM webhook_inbox_alerts_check('{ops}', '{json}', '{\"no_such\": 1}')") }
      .to raise_error(/unknown notify setting no_such/)
  end

  it "notify --test reaches each destination through a running sidecar, and says when none delivers" do
    db.psql("TRUNCATE webhook_inbox_outbox")
    flags = ["--database-url", db.url, "--destination", "ops=#{api.url}/receipts/test", "--notify", "ops"]
    st, out, = sidecar("notify", "--test", *flags, "--destination-timeout", "1s")
    expect(st.exitstatus).to eq(1) # no sidecar runs: not delivered, kept in the outbox
    expect(out).to match(/ops: not delivered within 15 s.*is a sidecar running with --destination ops/)
    pid, = spawn_sidecar("run", *flags, "--concurrency", "1")
    wait_for(20, 0.1, "the kept test message") { messages("/receipts/test").size == 1 }
    st, out, = sidecar("notify", "--test", *flags)
    expect([st.exitstatus, out]).to match([0, %r{ops: delivered \(HTTP 200\), operation alert-test-}])
    expect(messages("/receipts/test").size).to eq(2)
    expect(JSON.parse(messages("/receipts/test").last.body)).to include("condition" => "test", "state" => "test")
    Process.kill("TERM", pid)
    wait_exit(pid)
  end
end
