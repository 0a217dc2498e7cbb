# frozen_string_literal: true

require "net/http"
require_relative "sidecar_helper"
require_relative "../support/prometheus_text"

# `run --retain AGE`: the sidecar prunes done events and delivered effects older than AGE by
# itself, in batches, one sidecar of many at a time, never pending or quarantined rows, never
# below 3 days. `prune --older-than` does the same once. A pruned event is emptied, and its
# key is kept --remember-pruned longer (30 days by default) so that a redelivery or a
# replayed capture is still a duplicate, then it is deleted.
RSpec.describe "webhook-inbox-sidecar run --retain", :sidecar do
  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  before do
    db.reset!
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, outcome, received_at, processed_at)
      SELECT 's', 'old-done-' || i, 'x', '{}', 'done', 'ok', now() - interval '40 days', now() - interval '40 days'
        FROM generate_series(1, 2500) i;
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, outcome, received_at, processed_at) VALUES
        ('s', 'recent-done', 'x', '{}', 'done', 'ok', now() - interval '10 days', now() - interval '10 days');
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, last_error, received_at, next_attempt_at) VALUES
        ('s', 'old-quarantined', 'x', '{}', 'quarantined', 'bad', now() - interval '40 days', now()),
        ('s', 'old-pending', 'no.route', '{}', 'pending', NULL, now() - interval '40 days', now() + interval '1 day');
      TRUNCATE webhook_inbox_outbox;
      INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, created_at, processed_at)
      SELECT 'old-delivered-' || i, 'app', '{}', 'delivered', now() - interval '41 days', now() - interval '40 days'
        FROM generate_series(1, 1200) i;
      INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, created_at, processed_at, next_attempt_at) VALUES
        ('recent-delivered', 'app', '{}', 'delivered', now() - interval '10 days', now() - interval '10 days', now()),
        ('old-quarantined', 'app', '{}', 'quarantined', now() - interval '40 days', now() - interval '40 days', now()),
        ('old-pending', 'app', '{}', 'pending', now() - interval '40 days', NULL, now() + interval '1 day');
      TRUNCATE webhook_inbox_effects_received;
      INSERT INTO webhook_inbox_effects_received (operation_id, name, received_at) VALUES
        ('old-delivered-7', 'send_receipt', now() - interval '40 days'),
        ('recent-delivered', 'send_receipt', now() - interval '10 days'),
        ('old-pending', 'send_receipt', now() - interval '40 days');
    SQL
  end

  def effects
    db.value("SELECT string_agg(operation_id, ',' ORDER BY operation_id) FROM webhook_inbox_outbox")
  end

  def retention_lines(log)
    File.read(log).lines.grep(/msg=retention /)
  end

  it "deletes old done events and old delivered effects in batches, logs one line with the counts, keeps everything else" do
    _pid, log = spawn_sidecar("run", "--database-url", db.url, "--retain", "30d", "--retain-interval", "1s",
                              "--metrics-listen", "127.0.0.1:0")
    line = wait_for(20, 0.1, "a retention run") { retention_lines(log).first }
    # events emptied 1000 + 1000 + 500, none yet to forget (one batch), then effects 1000 + 200
    expect(line).to match(/pruned=2500 forgotten=0 effects_deleted=1200 older_than_s=2592000 remember_s=2592000 batches=6 /)
    expect(File.read(log)).to include("msg=retention_scheduled older_than_s=2592000 remember_s=2592000 interval_s=1 first_in_s=1")
    rows = db.value("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox WHERE pruned_at IS NULL")
    expect(rows).to eq("old-pending,old-quarantined,recent-done")
    expect(effects).to eq("old-pending,old-quarantined,recent-delivered") # never pending or quarantined
    wait_for(10, 0.1, "the next run") { retention_lines(log).size >= 2 }
    expect(retention_lines(log)[1]).to include("pruned=0 forgotten=0 effects_deleted=0 ")
    host, port = File.read(log)[/msg=metrics_listening address=(\S+)/, 1].split(":")
    fams = PrometheusText.parse(Net::HTTP.get(host, "/metrics", port.to_i))
    expect(PrometheusText.value(fams, "webhook_inbox_retention_deleted_total")).to eq(2500)
    expect(PrometheusText.value(fams, "webhook_inbox_retention_effects_deleted_total")).to eq(1200)
  end

  it "prune --older-than deletes old delivered effects too (through their partial index); an operation id emitted again is then a new effect" do
    plan = db.value(<<~SQL)
      SET enable_seqscan = off;
      EXPLAIN SELECT operation_id FROM webhook_inbox_outbox
       WHERE status = 'delivered' AND processed_at < now() - 2592000::double precision * interval '1 second' LIMIT 5000
    SQL
    expect(plan).to include("webhook_inbox_outbox_delivered_idx")
    status, out, = sidecar("prune", "--older-than", "30d", "--scope", "elsewhere", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "pruned 0 (and 0 delivered effects; 0 pruned keys forgotten)\n"]) # --scope: its events' effects only
    status, out, = sidecar("prune", "--older-than", "30d", "--database-url", db.url, "--actor", "ops@example.com")
    expect([status.exitstatus, out]).to eq([0, "pruned 2500 (and 1200 delivered effects; 0 pruned keys forgotten)\n"])
    # Each prune is in the audit trail with its actor ($USER@host without --actor), as requeues are.
    expect(db.value("SELECT string_agg(concat_ws(' ', actor, action, filter::text, count), E'\\n' ORDER BY id) FROM webhook_inbox_actions").lines.map(&:strip))
      .to eq([%(#{ENV.fetch('USER', 'unknown')}@#{Socket.gethostname} prune {"scope": "elsewhere", "older_than_s": 2592000, "effects_deleted": 0} 0),
              %(ops@example.com prune {"older_than_s": 2592000, "effects_deleted": 1200} 2500)])
    expect(effects).to eq("old-pending,old-quarantined,recent-delivered")
    # the app's dedupe rows go with their pruned effects only (a re-emitted id runs again)
    expect(db.value("SELECT string_agg(operation_id, ',' ORDER BY operation_id) FROM webhook_inbox_effects_received"))
      .to eq("old-pending,recent-delivered")
    expect(db.value("SELECT webhook_inbox_emit('old-delivered-1', 'app', '{}')")).to eq("t")
    expect(db.value("SELECT status FROM webhook_inbox_outbox WHERE operation_id = 'old-delivered-1'")).to eq("pending")
  end

  it "runs on one sidecar of many: the one holding the retention lock" do
    logs = Array.new(3) do
      spawn_sidecar("run", "--database-url", db.url, "--retain", "30d", "--retain-interval", "1s", "--concurrency", "1")[1]
    end
    wait_for(20, 0.1, "three retention runs") { logs.sum { |l| retention_lines(l).size } >= 3 }
    sleep 1.5
    counts = logs.map { |l| retention_lines(l).size }
    expect(counts.count(&:positive?)).to eq(1), "retention lines per sidecar: #{counts}"
    expect(logs.map { |l| retention_lines(l).sum { |x| x[/pruned=(\d+)/, 1].to_i } }.sum).to eq(2500)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE pruned_at IS NULL")).to eq(3)
  end

  it "keeps a pruned event's key (payload gone) for --remember-pruned: a redelivery or replay is a duplicate, then the key is forgotten" do
    status, out, = sidecar("prune", "--older-than", "30d", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "pruned 2500 (and 1200 delivered effects; 0 pruned keys forgotten)\n"])
    # The rows stay, emptied: nothing of the payload, headers, history or outcome is left.
    expect(db.value(<<~SQL)).to eq("2500|0|0")
      SELECT count(*), count(*) FILTER (WHERE payload IS NOT NULL OR raw_body IS NOT NULL OR request_headers IS NOT NULL
                                         OR outcome IS NOT NULL OR attempt_log <> '[]'),
             count(*) FILTER (WHERE pruned_at IS NULL) FROM webhook_inbox WHERE event_id LIKE 'old-done-%'
    SQL
    # A captured delivery of a pruned event, sent again through the receipt path, is a duplicate.
    inbox = WebhookInbox::Inbox.new(database_url: db.url)
    expect(inbox.insert(source_scope: "s", event_id: "old-done-7", event_type: "x", payload: '{"replayed":true}').status)
      .to eq(:duplicate)
    # Replay and requeue never move an emptied row (there is nothing left to run).
    status, out, = sidecar("requeue", "--replay", "--event-id", "old-done-7", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "replayed 0\n"])
    # Past the window the keys are forgotten, and only then is the key new again.
    db.psql("UPDATE webhook_inbox SET pruned_at = now() - interval '31 days' WHERE event_id LIKE 'old-done-%'")
    status, out, = sidecar("prune", "--older-than", "30d", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "pruned 0 (and 0 delivered effects; 2500 pruned keys forgotten)\n"])
    expect(db.value("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox"))
      .to eq("old-pending,old-quarantined,recent-done")
    expect(inbox.insert(source_scope: "s", event_id: "old-done-7", event_type: "x", payload: "{}").status).to eq(:accepted)
  ensure
    inbox&.close
  end

  it "keeps a delivered Ruby handler run while its event is not done: a requeue must find it, not run the handler again" do
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, created_at, processed_at, source_scope, source_event_id) VALUES
        ('run-of-quarantined', 'ruby', '{}', 'delivered', now() - interval '41 days', now() - interval '40 days', 's', 'old-quarantined'),
        ('run-of-done', 'ruby', '{}', 'delivered', now() - interval '41 days', now() - interval '40 days', 's', 'old-done-1');
    SQL
    status, out, = sidecar("prune", "--older-than", "30d", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "pruned 2500 (and 1201 delivered effects; 0 pruned keys forgotten)\n"])
    expect(db.value("SELECT string_agg(operation_id, ',' ORDER BY operation_id) FROM webhook_inbox_outbox WHERE destination = 'ruby'"))
      .to eq("run-of-quarantined")
  end

  it "deletes the SQL route's once-markers with the events it empties or forgets (013 keys the markers 009 wrote); the others stay" do
    marker = lambda do |event_id, keyed: true|
      "(webhook_inbox_handler_operation_id('s', '#{event_id}', 'sql:orders_route'), 'sql:orders_route', " \
        "#{keyed ? "'s', '#{event_id}'" : 'NULL, NULL'})"
    end
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox_effects_received (operation_id, name, source_scope, source_event_id) VALUES
        #{marker.('old-done-1')}, #{marker.('recent-done')}, #{marker.('old-quarantined')},
        #{marker.('old-done-2', keyed: false)}, #{marker.('vanished', keyed: false)};
    SQL
    # As when 013 is applied (and the files after it, so the database stays current for the other examples).
    Dir[File.join(SidecarHelper::ROOT, "db/[0-9][0-9][0-9]_*.sql")].sort.select { |f| File.basename(f).to_i >= 13 }
                                                                        .each { |f| db.pg.psql_file(f, db: db.name) }
    markers = -> { db.value("SELECT string_agg(k, ',' ORDER BY k) FROM (SELECT coalesce(source_event_id, operation_id) AS k FROM webhook_inbox_effects_received) m") }
    expect(markers.call).to eq("old-delivered-7,old-done-1,old-done-2,old-pending,old-quarantined,recent-delivered,recent-done")

    status, out, = sidecar("prune", "--older-than", "30d", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "pruned 2500 (and 1200 delivered effects; 0 pruned keys forgotten)\n"])
    expect(markers.call).to eq("old-pending,old-quarantined,recent-delivered,recent-done") # old-delivered-7: with its effect
    # A marker of an event emptied before 013 goes when the event is forgotten.
    db.psql("INSERT INTO webhook_inbox_effects_received (operation_id, name, source_scope, source_event_id) VALUES #{marker.('old-done-3')}")
    db.psql("UPDATE webhook_inbox SET pruned_at = now() - interval '31 days' WHERE event_id LIKE 'old-done-%'")
    status, out, = sidecar("prune", "--older-than", "30d", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "pruned 0 (and 0 delivered effects; 2500 pruned keys forgotten)\n"])
    expect(markers.call).to eq("old-pending,old-quarantined,recent-delivered,recent-done")
    plan = db.value("SET enable_seqscan = off; EXPLAIN DELETE FROM webhook_inbox_effects_received WHERE source_scope = 's' AND source_event_id = 'x'")
    expect(plan).to include("webhook_inbox_effects_received_event_idx")
  end

  it "prunes through the partial index of rows still holding a payload, and forgets through the index of emptied ones" do
    plans = [
      "SELECT 1 FROM webhook_inbox WHERE status = 'done' AND pruned_at IS NULL AND received_at < now() - interval '30 days' LIMIT 5000",
      "SELECT 1 FROM webhook_inbox WHERE pruned_at IS NOT NULL AND pruned_at < now() - interval '30 days' LIMIT 5000"
    ].map do |q|
      # webhook_inbox_done_idx serves the first query too and, on a table this small, costs the
      # same: which one the planner takes depends on what earlier examples left in it. Left out
      # here (BEGIN without COMMIT: the drop goes with the session), so the plan shows that the
      # partial index serves the prune.
      db.value("BEGIN; DROP INDEX webhook_inbox_done_idx; SET LOCAL enable_seqscan = off; EXPLAIN #{q}")
    end
    expect(plans[0]).to include("webhook_inbox_prunable_idx")
    expect(plans[1]).to include("webhook_inbox_pruned_idx")
  end

  it "refuses a retention below 3 days, is ignored by --once, and reads both options from the config file" do
    status, _, err = sidecar("run", "--database-url", db.url, "--retain", "2d")
    expect(status.exitstatus).to eq(2)
    expect(err).to include("retain must be at least 3d")
    status, _, err = sidecar("run", "--once", "--database-url", db.url, "--retain", "30d")
    expect(status.exitstatus).to eq(0)
    expect(err).to include("msg=retention_off")
    expect(db.int("SELECT count(*) FROM webhook_inbox")).to eq(2503)
    conf = File.join(Dir.tmpdir, "wi-retain-#{SecureRandom.hex(3)}.conf")
    File.write(conf, "retain = 90d\nretain-interval = 6h\n")
    status, out, = sidecar("run", "--print-config", "--config", conf)
    expect(status.exitstatus).to eq(0)
    expect(out).to include("retain = 7776000s  # restart to change", "retain-interval = 21600s  # restart to change")
  end
end
