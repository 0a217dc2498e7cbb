# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"

# The claim under a long-open snapshot (webhook_inbox_claim_due in db/functions/claim_dispatch.sql, issue 33): while a REPEATABLE READ transaction
# holds back VACUUM, the claim resumes from the session's cursor instead of the head of the
# pending index. What it may claim stays the same: per-object ordering, retries due by time
# (also one that falls due behind the cursor), pause and resume, late receipts with an earlier
# due time, exactly once. The SQL examples call webhook_inbox_dispatch_batch in one session
# with the read from the head priced out (webhook_inbox.claim_head), so every claim after the
# first reads from the cursor: the cursor's path is the one under test, not the clock's. The
# last example runs the real sidecar over a shuffled keyed backlog under the snapshot.
RSpec.describe "webhook-inbox-sidecar claims under a long-open snapshot", :sidecar do
  before(:all) do
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    @db.psql(<<~SQL)
      CREATE TABLE bk_applied (seq bigserial PRIMARY KEY, event_id text NOT NULL UNIQUE, k text);
      -- Applies one event once (a second run would violate UNIQUE and be retried, not
      -- counted twice); fails transiently on its first attempt when told to.
      CREATE FUNCTION bk_apply(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          IF ev.payload ->> 'fail' = 'once' AND ev.attempts = 0 THEN
              RAISE EXCEPTION 'not yet';
          END IF;
          IF ev.payload ->> 'fail' = 'quarantine' THEN
              PERFORM webhook_inbox_quarantine('told to');
          END IF;
          INSERT INTO bk_applied (event_id, k) VALUES (ev.event_id, ev.ordering_key);
          RETURN 'applied';
      END
      $$;
    SQL
  end
  let(:db) { @db }

  before do
    db.psql("TRUNCATE webhook_inbox, bk_applied, webhook_inbox_flow; DELETE FROM webhook_inbox_routes; " \
            "INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('bk.*', 'bk_apply')")
    @holder = open_snapshot(db.url) # the snapshot VACUUM must keep rows for
    @worker = PG.connect(db.url)
  end

  after do
    @worker&.close
    @holder&.close
  end

  # Events due at base + i ms (base: an hour ago), unkeyed unless key is given.
  def insert(ids, type: "bk.one", key: nil, at: "now() - interval '1 hour'", payload: {})
    values = ids.map.with_index do |id, i|
      "('#{SidecarHelper::SCOPE}', '#{id}', '#{type}', '#{JSON.generate(payload)}', #{at} + #{i} * interval '1 ms', " \
        "#{at} + #{i} * interval '1 ms', #{key ? "'#{key}'" : 'NULL'}, #{key ? "#{at} + #{i} * interval '1 ms'" : 'NULL'})"
    end
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at, next_attempt_at, " \
            "ordering_key, ordering_at) VALUES #{values.join(', ')}")
  end

  # One claim of up to limit events in the worker's session, its read from the head priced out
  # once the session has a cursor. Returns the event ids it handled, in its order.
  def claim(limit = 10, backoff_ms: 3_600_000)
    @worker.exec("SELECT set_config('webhook_inbox.claim_head', round(extract(epoch FROM clock_timestamp()), 6) || ' 1000000', false)")
    @worker.exec_params("SELECT event_id FROM webhook_inbox_dispatch_batch($1, 'wait', 10, $2, $2, 60000)",
                        [limit, backoff_ms]).map { |r| r["event_id"] }
  end

  # Claims until a claim finds nothing (the sidecar claims again at once when something is
  # still due after a partial batch: a key's next event, which sends no NOTIFY).
  def drain(limit = 10)
    handled = []
    loop do
      got = claim(limit)
      break if got.empty?

      handled.concat(got)
    end
    handled
  end

  def cursor = @worker.exec("SELECT current_setting('webhook_inbox.claim_cursor', true)").getvalue(0, 0)

  # The read before the cursor priced out (the session's last one "cost" 1,000,000 s), or not.
  def before_read(costly:)
    value = costly ? "round(extract(epoch FROM clock_timestamp()), 6) || ' 1000000 0'" : "''"
    @worker.exec("SELECT set_config('webhook_inbox.claim_before', #{value}, false)")
  end

  # The idle worker's probe in the worker's session: seconds until something is due, or nil.
  def probe = @worker.exec("SELECT webhook_inbox_next_due()").getvalue(0, 0)&.to_f

  # Index entries webhook_inbox_claim_idx returned to scans so far (the worker's counts flushed).
  def entries_read
    @worker.exec("SELECT pg_stat_force_next_flush()")
    db.int("SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'webhook_inbox_claim_idx'")
  end

  def status(id) = db.value("SELECT status || '/' || attempts FROM webhook_inbox WHERE event_id = '#{id}'")

  it "claims a late receipt due before the cursor, and a retry once it falls due behind it, each exactly once" do
    insert((1..30).map { |i| "e#{i}" })
    insert(["f1"], payload: { fail: "once" }, at: "now() - interval '50 minutes'")
    expect(claim).to eq((1..10).map { |i| "e#{i}" })
    expect(cursor).to match(/\A\d+ \d+ \d+\z/)
    insert(["late"], at: "now() - interval '2 hours'") # due before everything claimed so far
    handled = drain
    expect(handled).to include("late", "f1")
    expect(status("f1")).to eq("pending/1") # retried in an hour: not claimed again before then
    expect(claim).to eq([])
    db.psql("UPDATE webhook_inbox SET next_attempt_at = now() - interval '3 hours' WHERE event_id = 'f1'") # now due, far behind the cursor
    expect(claim).to eq(["f1"])
    expect(status("f1")).to eq("done/1")
    expect(db.int("SELECT count(*) FROM bk_applied")).to eq(32)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'done'")).to eq(32)
  end

  it "probes from the cursor after a short claim: the next due time without walking what was processed" do
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at, next_attempt_at) " \
            "SELECT '#{SidecarHelper::SCOPE}', 'd' || i, 'bk.one', '{}', now() - interval '1 hour' + i * interval '1 ms', " \
            "now() - interval '1 hour' + i * interval '1 ms' FROM generate_series(1, 2000) i")
    expect(drain(500).size).to eq(2000) # 2,000 pending row versions left behind, still visible to the snapshot
    before = entries_read
    expect(probe).to be_nil
    insert(["soon"], at: "now() + interval '1 hour'")
    expect(probe).to be_within(60).of(3600)
    insert(["next"], at: "now() - interval '1 minute'")
    expect(probe).to eq(0.0)
    expect(entries_read - before).to be < 100 # 2,000+ per probe from the head
    expect(claim).to eq(["next"])
    expect(probe).to be_within(60).of(3600)
  end

  it "puts off a short claim's read before the cursor while that read is costly, and the probe wakes the worker for it" do
    insert((1..30).map { |i| "e#{i}" })
    expect(claim).to eq((1..10).map { |i| "e#{i}" })
    insert(["late"], at: "now() - interval '2 hours'") # before the cursor
    before_read(costly: true)
    expect(claim(100)).to eq((11..30).map { |i| "e#{i}" }) # short from the cursor; the rows before it put off
    expect(probe).to be > 86_400 # nothing after the cursor: when the read before it is allowed (9 x its cost)
    expect(claim(100)).to eq([])
    before_read(costly: false)
    expect(claim(100)).to eq(["late"])
    expect(probe).to be_nil
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'")).to eq(0)
  end

  it "keeps a key's later event behind its earlier one that retries, and runs them in order once it is due" do
    insert(["k1"], key: "cus_1", payload: { fail: "once" })
    insert(%w[k2 k3], key: "cus_1", at: "now() - interval '1 hour' + interval '1 ms'")
    insert((1..25).map { |i| "u#{i}" }, at: "now() - interval '59 minutes'")
    claim # k1 fails (retry in an hour); k2, k3 wait behind it
    handled = drain
    expect(handled).not_to include("k2", "k3")
    expect([status("k1"), status("k2"), status("k3")]).to eq(%w[pending/1 pending/0 pending/0])
    db.psql("UPDATE webhook_inbox SET next_attempt_at = now() - interval '2 hours' WHERE event_id = 'k1'")
    drain
    expect(db.psql("SELECT string_agg(event_id, ',' ORDER BY seq) FROM bk_applied WHERE k = 'cus_1'").strip).to eq("k1,k2,k3")
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'")).to eq(0)
  end

  it "lets the cursor move past a key held behind a quarantined event on a strict route, and runs it after the requeue" do
    db.psql("UPDATE webhook_inbox_routes SET strict = true")
    insert(["s1"], key: "cus_9", payload: { fail: "quarantine" })
    insert(["s2"], key: "cus_9", at: "now() - interval '1 hour' + interval '1 ms'")
    insert((1..150).map { |i| "v#{i}" }, at: "now() - interval '59 minutes'")
    handled = drain
    expect(handled.size).to eq(151) # s1 (quarantined) and every v; s2 held
    expect([status("s1"), status("s2")]).to eq(%w[quarantined/0 pending/0])
    held_at = db.value("SELECT (extract(epoch FROM next_attempt_at) * 1000000)::bigint FROM webhook_inbox WHERE event_id = 's2'").to_i
    expect(cursor.split.first.to_i).to be > held_at # no longer held at s2
    db.psql("UPDATE webhook_inbox SET payload = '{}', status = 'pending', attempts = 0, next_attempt_at = now() - interval '3 hours' " \
            "WHERE event_id = 's1'") # fixed and requeued, due far behind the cursor
    drain
    expect(db.psql("SELECT string_agg(event_id, ',' ORDER BY seq) FROM bk_applied WHERE k = 'cus_9'").strip).to eq("s1,s2")
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'")).to eq(0)
  end

  it "holds a paused route's events while the cursor moves on, and runs them after the resume" do
    insert((1..15).map { |i| "p#{i}" }, type: "bk.paused")
    insert((1..15).map { |i| "o#{i}" }, at: "now() - interval '59 minutes'")
    db.psql("SELECT webhook_inbox_pause('route', 'bk.paused', 'spec')")
    handled = drain
    expect(handled).to include(*(1..15).map { |i| "o#{i}" })
    expect(db.int("SELECT count(*) FROM bk_applied WHERE event_id LIKE 'p%'")).to eq(0)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE event_id LIKE 'p%' AND status = 'pending'")).to eq(15)
    db.psql("SELECT webhook_inbox_resume('route', 'bk.paused', NULL, 'spec')")
    drain
    expect(db.int("SELECT count(*) FROM bk_applied")).to eq(30)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'")).to eq(0)
  end

  it "drains a shuffled keyed backlog with the real sidecar, every key in order, each event once" do
    keys = 50
    per_key = 20
    rows = (0...keys * per_key).map { |i| [i % keys, i / keys] }.shuffle(random: Random.new(33))
    values = rows.map.with_index do |(k, n), r|
      # due and ordered by the event time (as the receiver starts them); received shuffled
      "('#{SidecarHelper::SCOPE}', 'k#{k}_#{n}', 'bk.keyed', '{}', now() - interval '1 hour' + #{r} * interval '1 ms', " \
        "now() - interval '2 hours' + #{n} * interval '1 s' + #{k} * interval '1 ms', 'cus_#{k}', " \
        "now() - interval '2 hours' + #{n} * interval '1 s' + #{k} * interval '1 ms')"
    end
    @worker.exec("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at, next_attempt_at, " \
                 "ordering_key, ordering_at) VALUES #{values.join(', ')}")
    status, _, err = sidecar("run", "--once", "--database-url", db.url, "--concurrency", "4", "--batch-size", "20",
                             "--log-events=false", timeout: 120)
    expect(status.exitstatus).to eq(0), err
    expect(db.int("SELECT count(*) FROM bk_applied")).to eq(keys * per_key)
    late = db.int(<<~SQL)
      SELECT count(*) FROM (SELECT event_id, lag(event_id) OVER (PARTITION BY k ORDER BY seq) AS prev,
                                   split_part(event_id, '_', 2)::int AS n FROM bk_applied) a
       WHERE n <> coalesce(split_part(prev, '_', 2)::int + 1, 0)
    SQL
    expect(late).to eq(0)
  end
end
