# frozen_string_literal: true

require_relative "sidecar_helper"
require_relative "../support/overlap_probe"

# Per-object ordering (db/014): events stored through the receiver's insert with the Stripe
# entry's ordering (data.object.id, created), shuffled, then run by 4 sidecar workers. The
# handler records each application and whether another transaction held its key at that
# moment (a transaction-scoped advisory lock per key, its holder's transaction still open):
# no key ever runs twice at once and
# every key's events apply in their event-time order, so a "created" never lands after its
# "updated". A strict route holds a key behind a quarantined event; a lax one does not.
RSpec.describe "webhook-inbox-sidecar per-object ordering", :sidecar do
  before(:all) do
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    @db.psql(OverlapProbe::SQL)
    @db.psql(<<~SQL)
      CREATE TABLE ord_applied (id bigserial PRIMARY KEY, k text NOT NULL, seq int NOT NULL, type text NOT NULL,
                                overlap boolean NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp());
      CREATE SEQUENCE ord_kills;
      -- Applies one event: quarantines when told to, kills its own backend once for the
      -- event named kill-once (the worker then claims one event per transaction, claim.c),
      -- sleeps as long as told to (a slow handler) with its row written and uncommitted.
      CREATE FUNCTION ord_apply(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      DECLARE
          k text := coalesce(ev.payload #>> '{data,object,id}', '-');
      BEGIN
          IF ev.payload ->> 'fail' = 'quarantine' THEN
              PERFORM webhook_inbox_quarantine('told to');
          END IF;
          IF ev.payload ->> 'kill' = 'once' AND nextval('ord_kills') = 1 THEN
              PERFORM pg_terminate_backend(pg_backend_pid());
          END IF;
          INSERT INTO ord_applied (k, seq, type, overlap)
          VALUES (k, (ev.payload ->> 'seq')::int, ev.event_type, k <> '-' AND spec_key_held_elsewhere(k));
          PERFORM pg_sleep(coalesce((ev.payload ->> 'sleep')::float8, 0.0005));
          RETURN 'applied';
      END
      $$;
    SQL
  end
  let(:db) { @db }
  let(:scope) { SidecarHelper::SCOPE }
  let(:ordering) { WebhookInbox::Ordering.new(:stripe) }

  before do
    db.psql("TRUNCATE webhook_inbox, ord_applied; DELETE FROM webhook_inbox_routes; ALTER SEQUENCE ord_kills RESTART")
  end

  def event(id, object, seq, created, type: seq == 1 ? "customer.created" : "customer.updated", **extra)
    data = object ? { "object" => { "id" => object } } : {}
    [id, type, JSON.generate({ "id" => id, "type" => type, "created" => created, "seq" => seq, "data" => data }.merge(extra))]
  end

  # Stores events as the receiver does (the batch statement, with the endpoint's ordering).
  def store(events)
    inbox = WebhookInbox::Inbox.new(database_url: db.url)
    events.each_slice(500) do |slice|
      rows = slice.map { |id, type, body| [scope, id, type, body, false, false, nil, nil, ordering.for(type)] }
      codes = inbox.send(:with_connection) { |conn| conn.insert_batch(rows) }
      raise "not stored: #{codes.inspect}" unless codes.all?(1)
    end
  ensure
    inbox&.close
  end

  def route(pattern, strict: false)
    db.psql("INSERT INTO webhook_inbox_routes (event_type, handler, strict) VALUES ('#{pattern}', 'ord_apply', #{strict})")
  end

  def statuses
    db.psql("SELECT event_id, status FROM webhook_inbox ORDER BY event_id").split("\n").to_h { |l| l.split("|") }
  end

  # [key, seq] in the order they were applied.
  def applied
    db.psql("SELECT k, seq FROM ord_applied ORDER BY id").split("\n").map { |l| k, s = l.split("|"); [k, s.to_i] }
  end

  it "never runs a key on two workers at once and applies its events in event-time order (4 workers, shuffled)" do
    rng = Random.new(20_261_201)
    keys = 300
    events = (0...keys).flat_map do |k|
      base = 1_700_000_000 + rng.rand(10_000)
      (1..5).map { |seq| event("evt_#{k}_#{seq}", "cus_#{k}", seq, base + seq, **(k == 7 && seq == 2 ? { "kill" => "once" } : {})) }
    end
    events += Array.new(200) { |i| event("evt_free_#{i}", nil, 1, 1_700_000_000) } # unkeyed
    store(events.shuffle(random: rng))
    route("customer.*")
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE ordering_key IS NOT NULL")).to eq(keys * 5)

    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "4", "--batch-size", "10",
                             "--backoff-base", "20ms", "--backoff-cap", "50ms", "--poll-interval", "200ms",
                             "--log-events=false")
    wait_for(120, 0.2, "every event done") { db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'").zero? }
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.success?).to be(true), File.read(log)

    expect(db.int("SELECT nextval('ord_kills')")).to be > 1 # the backend was killed once: claim.c's path ran
    expect(db.int("SELECT count(*) FROM ord_applied WHERE overlap")).to eq(0)
    runs = applied
    expect(runs.size).to eq(keys * 5 + 200) # each exactly once
    by_key = runs.reject { |k, _| k == "-" }.group_by(&:first).transform_values { |l| l.map(&:last) }
    expect(by_key.size).to eq(keys)
    expect(by_key.values.uniq).to eq([[1, 2, 3, 4, 5]]) # created first, then the updates, in order
  end

  # Drains events on one worker already connected and listening (stored in one statement, one
  # NOTIFY): returns the seconds until every one is done and the idle waits its summary counts.
  def drain(events, *flags)
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "200ms",
                             "--log-events=false", *flags)
    wait_for(20, 0.05, "the listener") { db.int("SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN webhook_inbox'") == 1 }
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    store(events)
    wait_for(300, 0.01, "every event done") { db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'").zero? }
    seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.success?).to be(true), File.read(log)
    idle = File.read(log)[/msg=summary .*idle_waits=(\d+)/, 1] or raise "no summary line in #{File.read(log)}"
    [seconds, Integer(idle)]
  end

  # The claim passes a key's next event while its predecessor is pending, and the commit that
  # finishes the predecessor sends no NOTIFY: the worker claims again at once after a batch
  # that did work (worker.c), rather than going idle until its 0.1 s recheck. Counted, not
  # timed: before, every event but the first followed an idle wait (one per event).
  it "drains one hot key without going idle between its events" do
    route("customer.*")
    n = 100
    hot, idle = drain(Array.new(n) { |i| event("evt_hot_#{i}", "cus_hot", i + 1, 1_700_000_000 + i) }, "--batch-size", "10")
    expect(applied.map(&:last)).to eq((1..n).to_a)
    RSpec.configuration.reporter.message(format("hot key: %d events in %.1f s (%.0f events/s), %d idle waits", n, hot, n / hot, idle))
    expect(idle).to be < n / 10 # the waits before the first event and after the last, not one per event
  end

  def listening(sidecars)
    wait_for(20, 0.05, "the listeners") do
      db.int("SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN webhook_inbox'") == sidecars
    end
  end

  def stop(pids_logs)
    pids_logs.each { |pid, _| Process.kill("TERM", pid) }
    pids_logs.each { |pid, log| expect(wait_exit(pid)&.success?).to be(true), File.read(log) }
  end

  # Issue 27 item 5: the claim held an event back only while an EARLIER event of its key was
  # pending, so an earlier event arriving while a later one of its key ran was claimed by an
  # idle worker at once and ran beside it. Now it waits for that transaction to end (the key's
  # lock, db/021), then runs after it (the stale rule: its handler refuses what is backward).
  it "runs an earlier event that arrives while a later one of its key runs only after that transaction ends" do
    route("customer.*")
    sidecar = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "2", "--batch-size", "10",
                            "--poll-interval", "200ms", "--log-events=false")
    listening(1)
    store([event("evt_2", "cus_late", 2, 1_700_000_002, "sleep" => 1.5)])
    wait_for(20, 0.02, "event 2's handler running") do
      db.int("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%dispatch%'") == 1
    end
    sleep 0.4
    store([event("evt_1", "cus_late", 1, 1_700_000_001)])
    wait_for(20, 0.02, "both done") { db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'").zero? }
    stop([sidecar])

    expect(db.int("SELECT count(*) FROM ord_applied WHERE overlap")).to eq(0)
    expect(applied).to eq([["cus_late", 2], ["cus_late", 1]]) # each once, the late one after
    # It started after event 2's transaction wrote its done row (processed_at: clock_timestamp()
    # in that transaction, just before its commit), not beside it.
    expect(db.value("SELECT (SELECT started_at FROM ord_applied WHERE seq = 1) > " \
                    "(SELECT processed_at FROM webhook_inbox WHERE event_id = 'evt_2')")).to eq("t")
  end

  # Events of many keys arrive over time in random order (so earlier events often arrive while
  # a later one of their key runs) and 3 sidecars of 2 workers each take them: never two events
  # of one key at once, each applied once.
  it "never overlaps a key while events stream in under several sidecars" do
    route("customer.*")
    rng = Random.new(20_261_203)
    keys = 20
    events = (0...keys).flat_map do |k|
      (1..6).map { |seq| event("evt_s#{k}_#{seq}", "cus_s#{k}", seq, 1_700_000_000 + seq, "sleep" => rng.rand(0.02..0.15).round(3)) }
    end
    sidecars = Array.new(3) do
      spawn_sidecar("run", "--database-url", db.url, "--concurrency", "2", "--batch-size", "5",
                    "--poll-interval", "100ms", "--log-events=false")
    end
    listening(3)
    events.shuffle(random: rng).each_slice(4) do |slice|
      store(slice)
      sleep 0.03
    end
    wait_for(120, 0.1, "every event done") { db.int("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'").zero? }
    stop(sidecars)

    expect(db.int("SELECT count(*) FROM ord_applied WHERE overlap")).to eq(0)
    expect(applied.size).to eq(keys * 6)
    expect(applied.uniq.size).to eq(keys * 6)
  end

  it "holds a key behind a quarantined event only when its route is strict" do
    route("lax.*")
    route("strict.*", strict: true)
    store([event("l1", "obj_l", 1, 1_700_000_001, type: "lax.created", "fail" => "quarantine"),
           event("l2", "obj_l", 2, 1_700_000_002, type: "lax.updated"),
           event("s2", "obj_s", 2, 1_700_000_002, type: "strict.updated"),
           event("s1", "obj_s", 1, 1_700_000_001, type: "strict.created", "fail" => "quarantine"),
           event("s3", "obj_s", 3, 1_700_000_003, type: "strict.updated"),
           event("u1", nil, 1, 1_700_000_000, type: "strict.other")])
    run = -> { sidecar("run", "--database-url", db.url, "--once", "--batch-size", "10", "--log-events=false") }
    status, _out, err = run.call
    expect(status.success?).to be(true), err
    expect(statuses).to eq("l1" => "quarantined", "l2" => "done", # lax: past its quarantined predecessor
                           "s1" => "quarantined", "s2" => "pending", "s3" => "pending", # strict: held
                           "u1" => "done") # unkeyed: unaffected

    # The quarantined event fixed and requeued: the key resumes, in order.
    db.psql("UPDATE webhook_inbox SET status = 'pending', payload = payload - 'fail', next_attempt_at = now() " \
            "WHERE event_id = 's1'")
    status, _out, err = run.call
    expect(status.success?).to be(true), err
    expect(statuses.values_at("s1", "s2", "s3")).to eq(%w[done done done])
    expect(applied.select { |k, _| k == "obj_s" }).to eq([["obj_s", 1], ["obj_s", 2], ["obj_s", 3]])
  end
end
