# frozen_string_literal: true

require_relative "sidecar_helper"

# The command line: help, configuration, migrate, stats, requeue, SIGHUP reload.
RSpec.describe "webhook-inbox-sidecar CLI", :sidecar do
  include SidecarHelper::Payloads

  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  before { db.reset! }

  it "prints usage with every subcommand and option" do
    status, out, = sidecar("--help")
    expect(status.exitstatus).to eq(0)
    %w[run migrate stats requeue --database-url --concurrency --batch-size --max-attempts --backoff-base
       --backoff-cap --poll-interval --unrouted --unrouted-delay --print-config --once --json --id --event-id --type --scope
       --all].each do |word|
      expect(out).to include(word)
    end
  end

  it "rejects unknown commands and bad options with exit status 2" do
    expect(sidecar("frobnicate")[0].exitstatus).to eq(2)
    status, _, err = sidecar("run", "--batch-size=0")
    expect(status.exitstatus).to eq(2)
    expect(err).to include("batch-size")
    expect(sidecar("run", "--unrouted=drop")[0].exitstatus).to eq(2)
  end

  it "prints the effective configuration from flags over environment, never the password" do
    env = { "DATABASE_URL" => "postgresql://app:s3cret@db.example:5433/inbox", "WEBHOOK_INBOX_BATCH_SIZE" => "42",
            "WEBHOOK_INBOX_MAX_ATTEMPTS" => "7" }
    status, out, = sidecar("run", "--print-config", "--max-attempts", "9", "--unrouted", "quarantine", env: env)
    expect(status.exitstatus).to eq(0)
    expect(out).to include("batch-size = 42", "max-attempts = 9", "unrouted = quarantine", "host=db.example", "password=*****")
    expect(out).not_to include("s3cret")
  end

  # Issue 16 item 9: a destination's query string (?api_key=...) was printed as it is.
  it "prints destination URLs with their query values and fragment masked, and the database's sslpassword" do
    env = { "DATABASE_URL" => "postgresql://app@db.example/inbox?sslpassword=ssl_hidden&application_name=wi" }
    status, out, = sidecar("run", "--print-config", "--destination",
                           "alpha=https://api.example/hooks/in?api_key=k3y_hidden&v=2#frag_hidden concurrency=2", env: env)
    expect(status.exitstatus).to eq(0)
    expect(out).to include("destination = alpha=https://api.example/hooks/in?api_key=*****&v=*****#***** concurrency=2",
                           "sslpassword=*****", "application_name=wi")
    %w[k3y_hidden frag_hidden ssl_hidden].each { |s| expect(out).not_to include(s) }
  end

  # A password with an unencoded '@' or '/': libpq would read its tail as the host (looked up
  # in DNS, quoted in errors). The sidecar refuses the URL and shows none of the password.
  ["postgres://app:hunter2@Xyzzy-frag@127.0.0.1:1/db", "postgresql://app:hunter2/Xyzzy-frag@127.0.0.1:1/db"].each do |url|
    it "shows no part of a password libpq would split (#{url[/:hunter2(.)/, 1]}) in --print-config or errors" do
      outputs = [sidecar("run", "--print-config", env: { "DATABASE_URL" => url }),
                 sidecar("stats", "--database-url", url),
                 sidecar("run", "--once", env: { "DATABASE_URL" => url })]
      outputs.each do |status, out, err|
        expect(status.exitstatus).not_to eq(0)
        expect(err).to include("percent-encode")
        %w[hunter2 Xyzzy-frag].each { |f| expect(out + err).not_to include(f) }
      end
    end
  end

  it "migrates idempotently, also when several run at once (advisory lock)" do
    fresh = "sidecar_mig_#{SecureRandom.hex(3)}"
    TestDatabase.cluster.psql("CREATE DATABASE #{fresh}", db: "postgres")
    url = TestDatabase.cluster.url(fresh)
    results = Array.new(4) { Thread.new { sidecar("migrate", "--database-url", url) } }.map(&:value)
    results.each { |st, _, err| expect(st.exitstatus).to eq(0), err }
    # Every migrate applies the whole chain again: a file that widened a constraint must not
    # narrow the one a later file widened further, with rows of every action in the table.
    TestDatabase.cluster.psql(<<~SQL, db: fresh)
      INSERT INTO webhook_inbox_actions (actor, action, filter, count)
      SELECT 'spec', a, '{}', 0 FROM unnest(ARRAY['requeue', 'replay', 'prune', 'reverify', 'retire_handler', 'pause', 'resume']) a
    SQL
    st, _, err = sidecar("migrate", "--database-url", url)
    expect(st.exitstatus).to eq(0), err
    tables = TestDatabase.cluster.psql("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE tablename LIKE 'webhook_inbox%'", db: fresh).strip
    expect(tables).to eq("webhook_inbox,webhook_inbox_actions,webhook_inbox_alerts,webhook_inbox_effect_reports,webhook_inbox_effects_received,webhook_inbox_error_reporter," \
                         "webhook_inbox_error_reports,webhook_inbox_flow,webhook_inbox_outbox," \
                         "webhook_inbox_reconcile_cursors,webhook_inbox_recovery_reports,webhook_inbox_redeliveries,webhook_inbox_refused,webhook_inbox_rejections," \
                         "webhook_inbox_routes," \
                         "webhook_inbox_ruby_handlers,webhook_inbox_workers")
    # The v3 signature (kept for v3 sidecars during a rolling deploy) and the v4 one.
    expect(TestDatabase.cluster.psql("SELECT count(*) FROM pg_proc WHERE proname = 'webhook_inbox_dispatch'", db: fresh).strip).to eq("2")
    expect(TestDatabase.cluster.psql("SELECT webhook_inbox_schema_version()", db: fresh).strip).to eq(WebhookInbox::Schema::VERSION.to_s)
  end

  it "reports stats: pending, oldest age, attempts, quarantined, done, latency percentiles (text and JSON)" do
    db.add_order("t1", "o1", 100, "usd")
    db.insert_event("e1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 100, "usd"))
    db.insert_event("e2", "payment_intent.succeeded", succeeded("pi_2", "t1", "o1", 999, "usd"))
    sidecar("run", "--once", "--database-url", db.url)
    db.insert_event("e3", "payment_intent.succeeded", succeeded("pi_3", "t1", "o3", 1, "usd"))
    db.psql("UPDATE webhook_inbox SET received_at = now() - interval '90 seconds', attempts = 2 WHERE event_id = 'e3'")
    status, out, = sidecar("stats", "--json", "--database-url", db.url)
    expect(status.exitstatus).to eq(0)
    stats = JSON.parse(out)
    expect(stats).to include("pending" => 1, "quarantined" => 1, "done" => 1, "pending_attempts_sum" => 2, "retrying" => 1)
    expect(stats["oldest_pending_age_s"]).to be >= 89
    expect(stats["latency_p50_ms"]).to be_a(Numeric)
    expect(stats["latency_p99_ms"]).to be >= stats["latency_p50_ms"]
    expect(stats["attempts_histogram"]).to eq("0" => 1, "2" => 1)
    _, text, = sidecar("stats", "--database-url", db.url)
    expect(text).to match(/^pending\s+1$/).and match(/^quarantined\s+1$/).and match(/latency_p95_ms/)
  end

  it "requeues quarantined events by id, type, scope or all, resetting attempts" do
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, status, attempts, last_error, processed_at) VALUES
        ('a', '1', 'x.one', 'quarantined', 10, 'boom', now()), ('a', '2', 'x.two', 'quarantined', 3, 'boom', now()),
        ('b', '3', 'x.two', 'quarantined', 1, 'boom', now()), ('b', '4', 'x.one', 'quarantined', 1, 'boom', now()),
        ('b', '5', 'x.one', 'done', 0, NULL, now())
    SQL
    expect(sidecar("requeue", "--database-url", db.url)[0].exitstatus).to eq(2) # needs a filter or --all
    expect(sidecar("requeue", "--id", "a/1", "--database-url", db.url)[1]).to eq("requeued 1\n")
    # As the dashboard's requeue: last_error stays until the next run settles the event.
    expect(db.event("1", scope: "a")).to include(status: "pending", attempts: 0, last_error: "boom")
    expect(sidecar("requeue", "--type", "x.two", "--scope", "b", "--database-url", db.url)[1]).to eq("requeued 1\n")
    expect(sidecar("requeue", "--event-id", "2", "--database-url", db.url)[1]).to eq("requeued 1\n")
    expect(sidecar("requeue", "--all", "--database-url", db.url)[1]).to eq("requeued 1\n")
    expect(db.value("SELECT string_agg(event_id || status, ',' ORDER BY event_id) FROM webhook_inbox"))
      .to eq("1pending,2pending,3pending,4pending,5done")
  end

  # Issue 17 item 5: the CLI's requeues (and rake's, which run it) were not in the audit trail.
  it "records every requeue and replay in webhook_inbox_actions, as the dashboard does, with the actor" do
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, status, attempts, last_error, processed_at) VALUES
        ('a', '1', 'invoice.paid', 'quarantined', 10, 'boom', now()), ('a', '2', 'invoice.sent', 'done', 0, NULL, now()),
        ('a', '3', 'charge.ok', 'done', 0, NULL, now())
    SQL
    host = Socket.gethostname
    expect(sidecar("requeue", "--type", "invoice.*", "--database-url", db.url, env: { "USER" => "deploy" })[1]).to eq("requeued 1\n")
    status, out, = sidecar("requeue", "--replay", "--id", "a/2", "--actor", "ops@example.com", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "replayed 1\n"])
    status, _, err = sidecar("requeue", "--replay", "--all", "--database-url", db.url) # every done event: refused
    expect([status.exitstatus, err]).to match([2, include("give a filter")])
    expect(db.value("SELECT string_agg(event_id || status, ',' ORDER BY event_id) FROM webhook_inbox")).to eq("1pending,2pending,3done")
    expect(db.value("SELECT string_agg(concat_ws(' ', actor, action, filter::text, count), E'\\n' ORDER BY id) FROM webhook_inbox_actions").lines.map(&:strip))
      .to eq(["deploy@#{host} requeue {\"type\": \"invoice.*\"} 1", %(ops@example.com replay {"scope": "a", "event_id": "2"} 1)])
  end

  it "reloads the configuration on SIGHUP and keeps the old one when the new one is bad" do
    conf = File.join(Dir.tmpdir, "wi-conf-#{SecureRandom.hex(3)}")
    File.write(conf, "unrouted = quarantine\npoll_interval = 100ms\n")
    pid, log = spawn_sidecar("run", "--config", conf, "--database-url", db.url, "--concurrency", "1")
    db.insert_event("u1", "nothing.routes.this", {})
    wait_for(10) { db.event("u1")[:status] == "quarantined" }

    File.write(conf, "unrouted = explode\n")
    Process.kill("HUP", pid)
    wait_for(5) { File.read(log).include?("config_reload_failed") }
    db.insert_event("u2", "nothing.routes.this", {})
    wait_for(10) { db.event("u2")[:status] == "quarantined" } # old config kept

    File.write(conf, "unrouted = ignore\npoll_interval = 100ms\n")
    Process.kill("HUP", pid)
    wait_for(5) { File.read(log).include?("config_reloaded") }
    db.insert_event("u3", "nothing.routes.this", {})
    wait_for(10) { db.event("u3")[:status] == "done" }
    expect(db.event("u3")[:outcome]).to eq("ignored: no route")
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  ensure
    File.delete(conf) if conf && File.exist?(conf)
  end
end
