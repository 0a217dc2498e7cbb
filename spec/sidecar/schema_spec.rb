# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"

# Issue 8 item 2, fail closed and loudly: the sidecar checks webhook_inbox_schema_version()
# and webhook_inbox_schema_min_worker() (db/functions/schema_version.sql) at start and after every
# reconnect, and refuses to process (naming the fix) on a missing, older or too new schema.
# `migrate` says which version it left, never turns pending events into ignored ones, and
# never takes a newer schema back.
RSpec.describe "webhook-inbox-sidecar schema version", :sidecar do
  include SidecarHelper::Payloads

  let(:v) { WebhookInbox::Schema::VERSION } # what this sidecar speaks (db/functions/schema_version.sql)
  let(:newer) { v + 1 }
  let(:applied) { "inbox schema v#{v}: applied 001_inbox.sql .. #{File.basename(WebhookInbox::Schema::FILES.last)} and db/functions/\n" }

  let(:cluster) { TestDatabase.cluster }
  let(:stale_fix) do
    "inbox schema missing or older than v#{v}: run `bin/rails db:migrate` (after `bin/rails g webhook_inbox:install`) " \
      "or `webhook-inbox-sidecar migrate`"
  end
  let(:upgrade_fix) { "this sidecar is older than the schema requires: upgrade it" }

  # A database with nothing in it (as after db:create, or a schema.rb that lost the functions).
  def empty_database
    name = "sidecar_empty_#{SecureRandom.hex(4)}"
    cluster.psql("CREATE DATABASE #{name}", db: "postgres")
    [name, cluster.url(name)]
  end

  def set_version(db, version, min_worker)
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer LANGUAGE sql STABLE AS $$ SELECT #{version} $$;
      CREATE OR REPLACE FUNCTION webhook_inbox_schema_min_worker() RETURNS integer LANGUAGE sql STABLE AS $$ SELECT #{min_worker} $$;
    SQL
  end

  def expect_refused(url, fix)
    status, _, log = sidecar("run", "--once", "--database-url", url)
    expect(status.exitstatus).to eq(1), log
    refusals = log.lines.grep(/msg=schema_refused/)
    expect(refusals.size).to eq(1) # two workers, one line
    expect(refusals.first).to include("level=error", fix)
    status, out, err = sidecar("stats", "--database-url", url)
    expect(status.exitstatus).to eq(1)
    expect(out).to eq("")
    expect(err).to include("webhook-inbox-sidecar stats: #{fix}")
  end

  it "missing schema: run --once and stats refuse with the fix, exit 1" do
    _, url = empty_database
    expect_refused(url, stale_fix)
  end

  it "stale schema (no version function, or an older version): refused" do
    db = SidecarHelper::DB.new(cluster)
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 1, "usd"))
    set_version(db, 3, 3)
    expect_refused(db.url, stale_fix)
    db.psql("DROP FUNCTION webhook_inbox_schema_version()")
    expect_refused(db.url, stale_fix)
    expect(db.event("evt_1")).to include(status: "pending", attempts: 0, last_error: "") # never touched
  end

  it "a schema that needs a newer sidecar (min_worker > this sidecar's version): refused with 'upgrade it'" do
    db = SidecarHelper::DB.new(cluster)
    set_version(db, newer, newer)
    expect_refused(db.url, upgrade_fix)
    _, _, log = sidecar("run", "--once", "--database-url", db.url)
    expect(log).to include("schema=#{newer} schema_min_sidecar=#{newer} sidecar_schema=#{v}")
  end

  it "a newer schema that still accepts this sidecar (min_worker = its version) works, and migrate leaves it" do
    db = SidecarHelper::DB.new(cluster)
    db.add_order("t1", "o1", 100, "usd")
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 100, "usd"))
    set_version(db, newer, v)
    status, _, log = sidecar("run", "--once", "--database-url", db.url)
    expect(status.exitstatus).to eq(0), log
    expect(log).to include("msg=connected worker=1 schema=#{newer} schema_min_sidecar=#{v}")
    expect(db.event("evt_1")).to include(status: "done", outcome: "paid")

    status, out, = sidecar("migrate", "--database-url", db.url)
    expect(status.exitstatus).to eq(0)
    expect(out).to eq("inbox schema is v#{newer}, newer than this sidecar's v#{v}: left as it is\n")
    expect(db.value("SELECT webhook_inbox_schema_version()")).to eq(newer.to_s)
  end

  it "waits, without processing, until a deploy's migration creates the schema; one error line, no restart" do
    name, url = empty_database
    pid, log = spawn_sidecar("run", "--database-url", url, "--poll-interval", "200ms")
    wait_for(10, 0.05, "the refusal") { File.read(log).include?("msg=schema_refused") }
    sleep 3.5 # every worker looks again about every 3 s
    expect(Process.waitpid(pid, Process::WNOHANG)).to be_nil # still running
    expect(File.read(log).scan("msg=schema_refused").size).to eq(1) # rate-limited
    expect(File.read(log)).to include(stale_fix, "not processing")

    # The deploy: migrate, then the app's handlers and routes.
    expect(sidecar("migrate", "--database-url", url)[0].exitstatus).to eq(0)
    cluster.psql_file(SidecarHelper::EXAMPLES, db: name)
    cluster.psql(<<~SQL, db: name)
      INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES ('t1', 'o1', 100, 'usd');
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload)
      VALUES ('s', 'evt_1', 'payment_intent.succeeded', '#{JSON.generate(succeeded("pi_1", "t1", "o1", 100, "usd"))}');
    SQL
    wait_for(15, 0.05, "the event done once the schema exists") do
      cluster.psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_1'", db: name).strip == "done"
    end
    expect(File.read(log)).to include("msg=schema_accepted")
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "checks again after every reconnect: a schema made stale under a running sidecar stops it until migrated" do
    db = SidecarHelper::DB.new(cluster)
    db.add_order("t1", "o1", 100, "usd")
    db.add_order("t1", "o2", 100, "usd")
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--poll-interval", "200ms")
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 100, "usd"))
    wait_for(10, 0.05, "the first event") { db.event("evt_1")[:status] == "done" }

    set_version(db, 3, 3)
    db.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sidecar' " \
            "AND datname = current_database()")
    wait_for(10, 0.05, "the refusal after reconnecting") { File.read(log).include?("msg=schema_refused schema=3") }
    db.insert_event("evt_2", "payment_intent.succeeded", succeeded("pi_2", "t1", "o2", 100, "usd"))
    sleep 1
    expect(db.event("evt_2")).to include(status: "pending", attempts: 0)

    status, out, = sidecar("migrate", "--database-url", db.url)
    expect(status.exitstatus).to eq(0)
    expect(out).to eq(applied.sub("001_inbox.sql", File.basename(WebhookInbox::Schema::FILES.find { |f| File.basename(f).to_i > 3 }))) # the files newer than v3
    wait_for(15, 0.05, "the event done after migrating") { db.event("evt_2")[:status] == "done" }
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "a schema dropped under a running sidecar (no reconnect): the failed batch re-checks it and it waits" do
    db = SidecarHelper::DB.new(cluster)
    db.add_order("t1", "o1", 100, "usd")
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "200ms")
    wait_for(10, 0.05, "connected") { File.read(log).include?("msg=connected") }
    db.psql(<<~SQL) # what a restore of an old dump or a schema.rb load does to the functions
      DROP FUNCTION webhook_inbox_schema_version();
      DROP FUNCTION webhook_inbox_dispatch_batch(integer, text, integer, bigint, bigint, bigint);
    SQL
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 100, "usd"))
    wait_for(10, 0.05, "the refusal") { File.read(log).include?("msg=schema_refused") }
    expect(File.read(log)).to include("msg=schema_changed")
    expect(db.event("evt_1")).to include(status: "pending", attempts: 0)
    expect(sidecar("migrate", "--database-url", db.url)[0].exitstatus).to eq(0)
    wait_for(15, 0.05, "the event done after migrating") { db.event("evt_1")[:status] == "done" }
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  describe "migrate" do
    it "prints one short line with the version, never the SQL" do
      _, url = empty_database
      status, out, err = sidecar("migrate", "--database-url", url)
      expect(status.exitstatus).to eq(0), err
      expect(out).to eq(applied)
      expect(out + err).not_to match(/CREATE|FUNCTION|SELECT/)
    end

    it "on a current database changes nothing and takes no lock on the inbox, so receipts never queue behind it" do
      _, url = empty_database
      expect(sidecar("migrate", "--database-url", url)[0].exitstatus).to eq(0)
      holder = PG.connect(url) # an open transaction on the inbox: a dashboard query, a pg_dump
      holder.exec("BEGIN; SELECT count(*) FROM webhook_inbox")
      status, out, err = sidecar("migrate", "--database-url", url, timeout: 15) # waiting for the lock: killed, raises
      expect(status.exitstatus).to eq(0), err
      expect(out).to eq("inbox schema v#{v}: up to date\n")
      expect(holder.exec("SELECT count(*) FROM pg_locks WHERE relation = 'webhook_inbox'::regclass AND granted = false").getvalue(0, 0)).to eq("0")
    ensure
      holder&.exec("ROLLBACK")
      holder&.close
    end

    it "puts back a function dropped under the current version (db/functions/ again, one warning naming it)" do
      db = SidecarHelper::DB.new(cluster)
      db.psql("DROP FUNCTION webhook_inbox_ruby_register(jsonb); DROP FUNCTION webhook_inbox_route(text)")
      status, out, err = sidecar("migrate", "--database-url", db.url)
      expect(status.exitstatus).to eq(0), err
      expect(out).to eq("inbox schema v#{v}: up to date\n")
      expect(err.lines.grep(/msg=schema_function_missing/).join)
        .to include("level=warn", "function=webhook_inbox_route ", "missing=2", "schema=#{v}")
      expect(db.value("SELECT count(*) FROM pg_proc WHERE proname IN ('webhook_inbox_ruby_register', 'webhook_inbox_route')")).to eq("2")
      # A function 012 dropped (010 defined it) is not asked for: the next migrate says nothing.
      status, out, err = sidecar("migrate", "--database-url", db.url)
      expect([status.exitstatus, out, err]).to eq([0, "inbox schema v#{v}: up to date\n", ""])
    end

    it "never turns a pending event into an ignored one, also when the routes were lost" do
      db = SidecarHelper::DB.new(cluster)
      db.add_order("t1", "o1", 100, "usd")
      db.insert_event("evt_pay", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 100, "usd"))
      db.psql("DELETE FROM webhook_inbox_routes") # what db:schema:load did to the route rows (issue 8)
      expect(sidecar("migrate", "--database-url", db.url)[0].exitstatus).to eq(0)
      status, _, log = sidecar("run", "--once", "--database-url", db.url)
      expect(status.exitstatus).to eq(0), log
      expect(db.event("evt_pay")).to include(status: "pending", attempts: 0, outcome: "",
                                             last_error: "no route for event type")
      expect(log).to include("msg=unrouted_event", "type=payment_intent.succeeded")

      # The routes come back: the payment is applied once, not lost.
      db.pg.psql_file(SidecarHelper::EXAMPLES, db: db.name)
      db.psql("UPDATE webhook_inbox SET next_attempt_at = now()")
      sidecar("run", "--once", "--database-url", db.url)
      expect(db.event("evt_pay")).to include(status: "done", outcome: "paid", attempts: 0)
      expect(db.value("SELECT status FROM orders WHERE order_id = 'o1'")).to eq("paid")
    end
  end
end
