# frozen_string_literal: true

require_relative "sidecar_helper"

# Issue 10 items 2 and 4 (db/005_history.sql): every run is kept in attempt_log, also after
# success; latency counts per processing (from the latest requeue); requeue and replay by
# filter, audited; stats read only pending, quarantined and recent rows. Run through the real
# (v4-speaking) sidecar where the sidecar does the work, so the v4 calls are what is tested.
RSpec.describe "schema v5: history, requeue/replay, stats", :sidecar do
  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  before do
    db.reset!
    db.psql(<<~SQL)
      TRUNCATE webhook_inbox_actions;
      DROP SEQUENCE IF EXISTS t_flaky_runs; CREATE SEQUENCE t_flaky_runs;
      -- fails on its first two runs (nextval survives the rollback), then succeeds
      CREATE OR REPLACE FUNCTION t_flaky(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          IF nextval('t_flaky_runs') <= 2 THEN RAISE EXCEPTION 'upstream timeout' USING ERRCODE = 'WIR01'; END IF;
          RETURN 'ok after retries';
      END $$;
      CREATE OR REPLACE FUNCTION t_broken(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'column "amount" is null' USING ERRCODE = 'WIR02'; END $$;
      CREATE OR REPLACE FUNCTION t_ok(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'handled' $$;
      INSERT INTO webhook_inbox_routes VALUES ('t.flaky', 't_flaky'), ('t.broken', 't_broken'), ('t.ok', 't_ok');
    SQL
  end

  def run_once(*extra)
    run_once_against_db("--backoff-base", "1ms", "--backoff-cap", "1ms", *extra)
  end

  def settle(*extra)
    5.times { run_once(*extra) }
  end

  def log_of(event_id)
    JSON.parse(db.value("SELECT attempt_log FROM webhook_inbox WHERE event_id = #{db.q(event_id)}"))
  end

  it "keeps every failed run (time, error, duration) after the event succeeds; last_error names only a current problem" do
    db.insert_event("evt_flaky", "t.flaky", {})
    settle
    expect(db.event("evt_flaky")).to include(status: "done", attempts: 2, outcome: "ok after retries", last_error: "")
    log = log_of("evt_flaky")
    expect(log.map { |e| e["result"] }).to eq(%w[retry retry done])
    expect(log.map { |e| e["detail"] }).to eq(["WIR01: upstream timeout", "WIR01: upstream timeout", "ok after retries"])
    expect(log).to all(include("at" => match(/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\z/),
                               "duration_ms" => be_a(Numeric).and(be >= 0)))
  end

  it "logs the quarantine; requeue by filter (error text, type) is counted, audited, stamps requeued_at and runs again" do
    db.insert_event("evt_broken", "t.broken", {})
    db.insert_event("evt_other", "t.ok", {})
    settle("--max-attempts", "2")
    expect(db.event("evt_broken")).to include(status: "quarantined", attempts: 2)
    expect(log_of("evt_broken").map { |e| e["result"] }).to eq(%w[retry quarantined])

    filter = %({"error": "AMOUNT\\" IS NULL", "type": "t.*"})
    expect(db.int("SELECT webhook_inbox_requeue_count('requeue', '#{filter}')")).to eq(1)
    expect(db.int("SELECT webhook_inbox_requeue_count('requeue', '{\"error\": \"no such error\"}')")).to eq(0)
    db.psql("CREATE OR REPLACE FUNCTION t_broken(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'fixed' $$")
    moved, id = db.value("SELECT moved, action_id FROM webhook_inbox_requeue('requeue', '#{filter}', 'ops@example.com')").split("|")
    expect(moved).to eq("1")
    expect(db.value("SELECT actor, action, filter->>'type', count, at <= now() FROM webhook_inbox_actions WHERE id = #{id}"))
      .to eq("ops@example.com|requeue|t.*|1|t")
    expect(db.event("evt_broken")).to include(status: "pending", attempts: 0)
    expect(db.value("SELECT requeued_at IS NOT NULL FROM webhook_inbox WHERE event_id = 'evt_broken'")).to eq("t")

    settle
    expect(db.event("evt_broken")).to include(status: "done", outcome: "fixed")
    expect(log_of("evt_broken").map { |e| e["result"] }).to eq(%w[retry quarantined requeued done])
    expect(log_of("evt_broken")[2]["detail"]).to eq("from quarantined")
  end

  it "replays a done event by key; latency counts from the replay, not the first receipt" do
    db.insert_event("evt_done", "t.ok", {})
    db.psql("UPDATE webhook_inbox SET received_at = now() - interval '2 days' WHERE event_id = 'evt_done'")
    run_once
    moved = db.value("SELECT moved FROM webhook_inbox_requeue('replay', '{\"scope\": \"#{SidecarHelper::SCOPE}\", " \
                     "\"event_id\": \"evt_done\"}', NULL)")
    expect(moved).to eq("1")
    expect(db.value("SELECT actor FROM webhook_inbox_actions")).to eq("unknown")
    latency = db.value("BEGIN; SELECT latency_ms FROM webhook_inbox_dispatch_batch(10, 'wait', 10, 1, 1, 1000); COMMIT")
                .lines.map(&:strip).grep(/\A[\d.]+\z/).first.to_f
    expect(latency).to be < 60_000 # the first receipt was two days ago
    expect(db.event("evt_done")).to include(status: "done")
    expect(db.value("SELECT latency_p50_ms < 60000, done FROM webhook_inbox_stats()")).to eq("t|1")
  end

  it "a requeue through the v4 sidecar's own `requeue` command also stamps requeued_at (a trigger does it)" do
    db.insert_event("evt_q", "t.broken", {})
    settle("--max-attempts", "1")
    status, out, = sidecar("requeue", "--event-id", "evt_q", "--database-url", db.url)
    expect([status.exitstatus, out]).to match([0, /1/])
    expect(db.value("SELECT requeued_at IS NOT NULL, attempt_log->-1->>'result' FROM webhook_inbox WHERE event_id = 'evt_q'"))
      .to eq("t|requeued")
  end

  it "keeps the last 50 runs" do
    db.insert_event("evt_long", "t.ok", {})
    db.psql("UPDATE webhook_inbox SET attempt_log = (SELECT jsonb_agg(jsonb_build_object('n', i)) FROM generate_series(1, 50) i)")
    run_once
    log = log_of("evt_long")
    expect(log.size).to eq(50)
    expect([log.first["n"], log.last["result"]]).to eq([2, "done"])
  end

  it "refuses unknown filter keys and actions" do
    expect { db.psql("SELECT webhook_inbox_requeue_count('requeue', '{\"status\": \"done\"}')") }
      .to raise_error(/unknown filter key status/)
    expect { db.psql("SELECT webhook_inbox_requeue('delete', '{}', 'x')") }.to raise_error(/requeue or replay/)
  end

  it "stats: done and latency over the last hour; every part has an index path (no whole-table scan)" do
    db.insert_event("evt_recent", "t.ok", {})
    run_once
    db.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, status, received_at, processed_at)
      VALUES ('s', 'old', 'done', now() - interval '3 hours', now() - interval '2 hours');
    SQL
    expect(db.value("SELECT pending, quarantined, done FROM webhook_inbox_stats()")).to eq("0|0|1")
    # The reads are PL/pgSQL (Citus plans them so): EXPLAIN sees a function scan, not their
    # statements. So count what they scanned, in a session of their own with sequential scans
    # priced out (a statement without an index path still scans the table); a session's
    # counters reach pg_stat_* when it ends.
    counts = lambda do
      db.value("SELECT 'seq=' || (SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'webhook_inbox') || ' ' || " \
               "string_agg(indexrelname || '=' || idx_scan, ' ' ORDER BY indexrelname) FROM pg_stat_user_indexes " \
               "WHERE relname = 'webhook_inbox'").split.to_h { |kv| kv.split("=").then { |k, v| [k, v.to_i] } }
    end
    indexes = %w[webhook_inbox_done_idx webhook_inbox_quarantined_idx webhook_inbox_claim_idx]
    before = counts.call
    db.psql("SET enable_seqscan = off; SELECT count(*) FROM webhook_inbox_stats(); " \
            "SELECT count(*) FROM webhook_inbox_hourly(12); SELECT count(*) FROM webhook_inbox_attempts_histogram()")
    scanned = nil
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    loop do # the session's counters arrive as its backend exits
      scanned = counts.call.to_h { |k, v| [k, v - before.fetch(k, 0)] }
      break if scanned.values_at(*indexes).all?(&:positive?) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.1
    end
    expect(scanned["seq"]).to eq(0)
    expect(scanned.values_at(*indexes)).to all(be_positive)
  end

  it "keeps every v4 function signature (a v4 sidecar calls them)" do
    sigs = db.value("SELECT string_agg(oid::regprocedure::text, ';' ORDER BY 1) FROM pg_proc WHERE proname IN " \
                    "('webhook_inbox_dispatch_batch', 'webhook_inbox_dispatch', 'webhook_inbox_charge_failure', " \
                    "'webhook_inbox_run_event', 'webhook_inbox_stats')")
    expect(sigs.split(";")).to include(
      "webhook_inbox_dispatch_batch(integer,text,integer,bigint,bigint,bigint)",
      "webhook_inbox_dispatch(text,text,text,integer,bigint,bigint,bigint)",
      "webhook_inbox_charge_failure(text,text,integer,text,integer,bigint,bigint)",
      "webhook_inbox_run_event(webhook_inbox,regproc,text,integer,bigint,bigint,bigint)", "webhook_inbox_stats()"
    )
    expect(db.value("SELECT webhook_inbox_schema_version() >= 5, webhook_inbox_schema_min_worker()")).to eq("t|4")
  end
end
