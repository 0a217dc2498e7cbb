# frozen_string_literal: true

require_relative "sidecar_helper"

# Issue 9 item 7: every run of a handler that fails transiently is charged one attempt, in the
# transaction that ran it, so several workers can never run an event more often than
# `attempts` says, nor more than --max-attempts times. Handler runs are counted with one
# sequence per event: nextval() is not transactional, so the handler's rollback keeps it.
RSpec.describe "webhook-inbox-sidecar attempts under concurrency", :sidecar do
  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  let(:events) { 24 }
  let(:max) { 4 } # --max-attempts

  before do
    db.reset!
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_always_fails(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          PERFORM nextval(('t_runs_' || ev.event_id)::regclass);
          RAISE EXCEPTION 'not yet' USING ERRCODE = 'WIR01';
      END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.always_fails', 't_always_fails') ON CONFLICT DO NOTHING;
    SQL
    db.psql((0...events).map { |i| "DROP SEQUENCE IF EXISTS t_runs_a#{i}; CREATE SEQUENCE t_runs_a#{i};" }.join("\n"))
    events.times { |i| db.insert_event("a#{i}", "test.always_fails", {}) }
  end

  # Handler runs per event (a sequence never called yet reports 0).
  def runs
    db.value((0...events).map { |i| "SELECT 'a#{i}', CASE WHEN is_called THEN last_value ELSE 0 END FROM t_runs_a#{i}" }
               .join(" UNION ALL ")).lines.to_h { |l| k, v = l.strip.split("|"); [k, v.to_i] }
  end

  it "charges each transient failure in the run's own transaction: runs == attempts == --max-attempts at quarantine" do
    # A backoff of 1 ms makes a failed event due again at once: before the fix another worker
    # claimed and ran it again between COMMIT and the separate bookkeeping transaction.
    args = ["run", "--database-url", db.url, "--concurrency", "3", "--batch-size", "2", "--max-attempts", max.to_s,
            "--backoff-base", "1ms", "--backoff-cap", "1ms", "--poll-interval", "50ms", "--log-events=false"]
    pids = Array.new(3) { spawn_sidecar(*args).first }
    wait_for(60, 0.1, "every event quarantined") do
      db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'quarantined'") == events
    end
    pids.each { |pid| Process.kill("TERM", pid) }
    pids.each { |pid| expect(wait_exit(pid)&.exitstatus).to eq(0) }

    attempts = db.value("SELECT string_agg(event_id || '=' || attempts, ',' ORDER BY event_id) FROM webhook_inbox")
                 .split(",").to_h { |kv| k, v = kv.split("="); [k, v.to_i] }
    expect(attempts.values).to all(eq(max)) # never beyond --max-attempts
    expect(runs).to eq(attempts)            # every run charged, exactly once
  end

  it "computes the retry delay server-side: min(cap, base * 2^failures), uniform in [d/2, d]" do
    bounds = ->(failures, base, cap) do
      db.value("SELECT min(d), max(d) FROM (SELECT webhook_inbox_retry_delay_ms(#{failures}, #{base}, #{cap}) d " \
               "FROM generate_series(1, 2000)) s").split("|").map(&:to_i)
    end
    lo, hi = bounds.(0, 1000, 3_600_000)
    expect(lo).to be_between(500, 560)
    expect(hi).to be_between(940, 1000)
    expect(bounds.(3, 1000, 3_600_000)).to all(be_between(4000, 8000))
    expect(bounds.(20, 1000, 60_000)).to all(be_between(30_000, 60_000)) # capped
    expect(bounds.(1_000_000, 1000, 60_000)).to all(be_between(30_000, 60_000)) # no overflow
    expect(bounds.(-5, 1000, 60_000)).to all(be_between(500, 1000))
  end

  it "run --once with several workers (and several runs, as a cron would): the same relation" do
    20.times do # --once takes what is due when it looks; a retry due 1 ms later may be for the next run
      status, _, err = sidecar("run", "--once", "--database-url", db.url, "--concurrency", "4", "--batch-size", "1",
                               "--max-attempts", max.to_s, "--backoff-base", "1ms", "--backoff-cap", "1ms",
                               "--log-events=false")
      expect(status.exitstatus).to eq(0), err
      break if db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'pending'").zero?

      sleep 0.01
    end
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'quarantined' AND attempts = #{max}")).to eq(events)
    expect(runs.values).to all(eq(max))
  end
end
