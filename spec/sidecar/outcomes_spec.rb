# frozen_string_literal: true

require_relative "sidecar_helper"

# Each outcome of the real binary against a real PostgreSQL, checked in the database.
RSpec.describe "webhook-inbox-sidecar run", :sidecar do
  include SidecarHelper::Payloads

  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  before do
    db.reset!
    db.add_order("t1", "o1", 2000, "jpy")
  end

  def run_once(*extra)
    run_once_against_db("--backoff-base", "10ms", "--backoff-cap", "20ms", *extra)
  end

  it "marks a payment done, pays the order once and logs one key=value line per event" do
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    log = run_once
    expect(db.event("evt_1")).to include(status: "done", outcome: "paid", attempts: 0)
    expect(db.value("SELECT status || '/' || payment_id FROM orders WHERE order_id = 'o1'")).to eq("paid/pi_1")
    expect(db.int("SELECT count(*) FROM payments WHERE payment_id = 'pi_1'")).to eq(1)
    line = log.lines.find { |l| l.include?("msg=event") }
    expect(line).to match(/event_id=evt_1 scope=stripe:acct_1:test type=payment_intent.succeeded outcome=done attempts=0 latency_ms=\d/)
    expect(log).not_to include("pi_1") # never the payload
    expect(db.value("SELECT processed_at IS NOT NULL FROM webhook_inbox WHERE event_id = 'evt_1'")).to eq("t")
  end

  it "logs only the SQLSTATE of a transient error, whose message could quote payload values" do
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION test_casts_card(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN RETURN ((ev.payload ->> 'card')::int)::text; END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('test.card', 'test_casts_card');
    SQL
    db.insert_event("evt_card", "test.card", { "card" => "4242-secret-digits" })
    log = run_once("--max-attempts", "1")
    expect(db.event("evt_card")).to include(status: "quarantined", last_error: a_string_including("4242-secret-digits"))
    expect(log.lines.grep(/msg=event/).join).to include("event_id=evt_card").and include("detail=22P02")
    expect(log).not_to include("4242-secret-digits")
  end

  it "treats another event id for the same payment as an accepted duplicate" do
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    db.insert_event("evt_2", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    run_once
    expect([db.event("evt_1")[:outcome], db.event("evt_2")[:outcome]].sort).to eq(%w[duplicate paid])
    expect(db.int("SELECT count(*) FROM order_transitions")).to eq(1)
  end

  it "quarantines an amount mismatch through webhook_inbox_quarantine and never pays" do
    db.insert_event("evt_bad", "payment_intent.succeeded", succeeded("pi_9", "t1", "o1", 1999, "jpy"))
    run_once
    ev = db.event("evt_bad")
    expect(ev).to include(status: "quarantined", attempts: 0)
    expect(ev[:last_error]).to include("amount/currency mismatch")
    expect(db.value("SELECT status FROM orders WHERE order_id = 'o1'")).to eq("awaiting_payment")
    expect(db.int("SELECT count(*) FROM payments")).to eq(0)
  end

  it "never rounds a fractional or out-of-range amount into a match: quarantined as malformed" do
    db.insert_event("evt_frac", "payment_intent.succeeded", succeeded("pi_f", "t1", "o1", 1999.6, "jpy"))
    db.insert_event("evt_huge", "payment_intent.succeeded", succeeded("pi_h", "t1", "o1", 10**30, "jpy"))
    db.insert_event("evt_rfrac", "charge.refunded", refunded("ch_f", "pi_f", "t1", "o1", 1999.6, "jpy"))
    run_once
    %w[evt_frac evt_huge evt_rfrac].each do |id|
      expect(db.event(id)).to include(status: "quarantined", attempts: 0)
      expect(db.event(id)[:last_error]).to include("malformed")
    end
    expect(db.value("SELECT status FROM orders WHERE order_id = 'o1'")).to eq("awaiting_payment")
  end

  it "quarantines a currency mismatch and a second payment for a paid order" do
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    run_once
    db.insert_event("evt_cur", "payment_intent.succeeded", succeeded("pi_2", "t1", "o1", 2000, "usd"))
    db.insert_event("evt_other", "payment_intent.succeeded", succeeded("pi_3", "t1", "o1", 2000, "jpy"))
    run_once
    expect(db.event("evt_cur")[:status]).to eq("quarantined")
    expect(db.event("evt_other")).to include(status: "quarantined")
    expect(db.event("evt_other")[:last_error]).to include("conflicts")
    expect(db.value("SELECT payment_id FROM orders WHERE order_id = 'o1'")).to eq("pi_1")
  end

  it "retries a transient failure with backoff, then succeeds once the order exists" do
    db.insert_event("evt_early", "payment_intent.succeeded", succeeded("pi_5", "t1", "o5", 700, "eur"))
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--backoff-base", "100ms", "--backoff-cap", "200ms",
                             "--poll-interval", "5s", "--concurrency", "1")
    wait_for(10, 0.05, "two failed attempts") { db.event("evt_early")[:attempts] >= 2 }
    ev = db.event("evt_early")
    expect(ev[:status]).to eq("pending")
    expect(ev[:last_error]).to eq("WIR01: order not found yet")
    expect(db.value("SELECT next_attempt_at > now() - interval '1 second' FROM webhook_inbox WHERE event_id = 'evt_early'")).to eq("t")
    db.add_order("t1", "o5", 700, "eur")
    wait_for(10, 0.05, "done") { db.event("evt_early")[:status] == "done" }
    expect(db.event("evt_early")[:outcome]).to eq("paid")
    expect(File.read(log)).to match(/event_id=evt_early .*outcome=retry attempts=1 .*retry_in_ms=\d+/)
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "backs off exponentially between attempts (next_attempt_at grows, capped)" do
    db.insert_event("evt_wait", "payment_intent.succeeded", succeeded("pi_6", "t1", "o6", 1, "eur"))
    delays = []
    3.times do |i|
      sidecar("run", "--once", "--database-url", db.url, "--backoff-base", "2s", "--backoff-cap", "6s")
      delays << db.value("SELECT extract(epoch FROM next_attempt_at - now()) FROM webhook_inbox WHERE event_id = 'evt_wait'").to_f
      expect(db.event("evt_wait")[:attempts]).to eq(i + 1)
      db.psql("UPDATE webhook_inbox SET next_attempt_at = now() WHERE event_id = 'evt_wait'") # make it due again
    end
    expect(delays[0]).to be_between(0.9, 2.0)   # base 2s, equal jitter: [1, 2]
    expect(delays[1]).to be_between(1.9, 4.0)   # [2, 4]
    expect(delays[2]).to be_between(2.9, 6.0)   # capped at 6: [3, 6]
  end

  it "quarantines after --max-attempts transient failures" do
    db.insert_event("evt_never", "payment_intent.succeeded", succeeded("pi_7", "t1", "o_missing", 1, "eur"))
    # --once takes what is due when it looks: a retry due 1 ms after its failure may be for the next run.
    5.times do
      run_once("--max-attempts", "3", "--backoff-base", "1ms", "--backoff-cap", "1ms")
      break unless db.event("evt_never")[:status] == "pending"

      sleep 0.01
    end
    ev = db.event("evt_never")
    expect(ev).to include(status: "quarantined", attempts: 3)
    expect(ev[:last_error]).to include("order not found yet")
  end

  it "ignores an old notification after a newer state and never moves the order back" do
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    run_once
    db.insert_event("evt_old", "payment_intent.processing", payment("payment_intent.processing", "pi_1", "t1", "o1", 2000, "jpy"))
    db.insert_event("evt_fail", "payment_intent.payment_failed", payment("payment_intent.payment_failed", "pi_1", "t1", "o1", 2000, "jpy"))
    run_once
    expect(db.event("evt_old")).to include(status: "done", outcome: "ignored: stale")
    expect(db.event("evt_fail")).to include(status: "done", outcome: "ignored: stale")
    expect(db.value("SELECT status FROM orders WHERE order_id = 'o1'")).to eq("paid")
    expect(db.int("SELECT count(*) FROM order_transitions")).to eq(1)
  end

  it "applies a refund as its own transition, waiting for a payment it overtook" do
    db.insert_event("evt_ref", "charge.refunded", refunded("ch_1", "pi_1", "t1", "o1", 2000, "jpy"))
    run_once("--max-attempts", "50", "--backoff-base", "1s", "--backoff-cap", "1s")
    expect(db.event("evt_ref")).to include(status: "pending", attempts: 1)
    db.insert_event("evt_pay", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    db.psql("UPDATE webhook_inbox SET next_attempt_at = now() WHERE event_id = 'evt_ref'")
    # One worker, so the claim's order (the payment first) decides: with two, one worker may
    # claim the refund while the other still pays, and the refund rightly waits again.
    run_once("--concurrency", "1")
    expect(db.event("evt_ref")).to include(status: "done", outcome: "refunded")
    expect(db.value("SELECT string_agg(from_status || '>' || to_status, ',' ORDER BY id) FROM order_transitions"))
      .to eq("awaiting_payment>paid,paid>refunded")
    expect(db.int("SELECT count(*) FROM refunds WHERE charge_id = 'ch_1'")).to eq(1)
  end

  it "moves a Didit session forward only" do
    db.insert_event("d1", "status.updated", didit("s-1", "In Review"), scope: "didit:app:live")
    run_once
    db.insert_event("d2", "status.updated", didit("s-1", "Approved"), scope: "didit:app:live")
    run_once
    db.insert_event("d3", "status.updated", didit("s-1", "In Progress"), scope: "didit:app:live")
    db.insert_event("d4", "status.updated", didit("s-1", "Approved"), scope: "didit:app:live")
    db.insert_event("d5", "status.updated", didit("s-1", "Declined"), scope: "didit:app:live")
    run_once
    expect(db.value("SELECT status FROM identity_checks WHERE session_id = 's-1'")).to eq("Approved")
    expect(db.event("d3", scope: "didit:app:live")[:outcome]).to eq("ignored: stale")
    expect(db.event("d4", scope: "didit:app:live")[:outcome]).to eq("duplicate")
    expect(db.event("d5", scope: "didit:app:live")[:outcome]).to eq("ignored: stale")
  end

  describe "--unrouted" do
    before { db.insert_event("evt_x", "customer.created", { "id" => "evt_x", "email" => "secret@example.com" }) }

    def due_in(event_id)
      db.value("SELECT extract(epoch FROM next_attempt_at - now()) FROM webhook_inbox WHERE event_id = #{db.q(event_id)}").to_f
    end

    it "wait (default): stays pending, not charged, looked at again after --unrouted-delay, one warning per type" do
      db.insert_event("evt_y", "customer.created", { "id" => "evt_y" })
      log = run_once
      %w[evt_x evt_y].each do |id|
        expect(db.event(id)).to include(status: "pending", attempts: 0, outcome: "", last_error: "no route for event type")
        expect(due_in(id)).to be_between(55, 61)
      end
      warnings = log.lines.grep(/msg=unrouted_event/)
      expect(warnings.size).to eq(1) # rate-limited: one line for the type, not one per event
      expect(warnings.first).to include("level=warn", "type=customer.created", "webhook_inbox_ignore")
      expect(log).to match(/event_id=evt_x .*outcome=waiting attempts=0 .*retry_in_ms=60000/)
      expect(log).not_to include("secret@example.com") # never the payload

      # Not due again within the delay: a second run leaves it alone.
      expect(run_once).not_to include("event_id=evt_x")
      expect(db.event("evt_x")[:attempts]).to eq(0)
    end

    it "wait: --unrouted-delay sets the delay (at least 1s), and a route added later takes the event" do
      run_once("--unrouted-delay", "2s")
      expect(due_in("evt_x")).to be_between(1, 2.1)
      expect(sidecar("run", "--once", "--database-url", db.url, "--unrouted-delay", "10ms")[0].exitstatus).to eq(2)

      db.psql("INSERT INTO webhook_inbox_routes VALUES ('customer.*', 'webhook_inbox_ignore')")
      db.psql("UPDATE webhook_inbox SET next_attempt_at = now()")
      run_once
      expect(db.event("evt_x")).to include(status: "done", outcome: "ignored", attempts: 0, last_error: "")
    end

    it "the documented ignore route: webhook_inbox_ignore marks a type done with outcome 'ignored'" do
      db.psql("INSERT INTO webhook_inbox_routes VALUES ('customer.*', 'webhook_inbox_ignore')")
      log = run_once
      expect(db.event("evt_x")).to include(status: "done", outcome: "ignored")
      expect(log).not_to include("msg=unrouted_event")
    end

    it "ignore (explicit): done with outcome 'ignored: no route'" do
      run_once("--unrouted", "ignore")
      expect(db.event("evt_x")).to include(status: "done", outcome: "ignored: no route")
    end

    it "quarantine: quarantined with a reason" do
      run_once("--unrouted", "quarantine")
      expect(db.event("evt_x")).to include(status: "quarantined", last_error: "no route for event type")
    end

    it "retry: stays pending with attempts counted until a route exists" do
      run_once("--unrouted=retry", "--backoff-base", "1h", "--backoff-cap", "2h")
      expect(db.event("evt_x")).to include(status: "pending", attempts: 1, last_error: "no route for event type")
      db.psql("INSERT INTO webhook_inbox_routes VALUES ('customer.*', 'orders_on_payment_intent_other')")
      db.psql("UPDATE webhook_inbox SET next_attempt_at = now()")
      db.psql("INSERT INTO orders VALUES ('t0', 'o0', 'paid', 1, 'eur')")
      db.psql(%(UPDATE webhook_inbox SET payload = '{"data":{"object":{"metadata":{"tenant_id":"t0","order_id":"o0"}}}}'))
      run_once("--unrouted=retry")
      expect(db.event("evt_x")).to include(status: "done", outcome: "ignored: stale")
    end

    it "stats counts the pending events that wait for a route, by type (text and JSON)" do
      db.insert_event("evt_z", "invoice.paid", {})
      db.insert_event("evt_p", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy")) # routed
      run_once("--log-events=false")
      status, out, = sidecar("stats", "--json", "--database-url", db.url)
      expect(status.exitstatus).to eq(0)
      stats = JSON.parse(out)
      expect(stats).to include("pending" => 2, "waiting_for_route" => 2,
                               "waiting_for_route_types" => { "customer.created" => 1, "invoice.paid" => 1 })
      _, text, = sidecar("stats", "--database-url", db.url)
      expect(text).to match(/^waiting_for_route\s+2$/).and match(/^  type=customer.created\s+1$/)
    end
  end

  it "wakes on NOTIFY webhook_inbox (long poll interval) and falls back to polling for rows made due without NOTIFY" do
    db.add_order("t1", "n1", 100, "usd")
    db.add_order("t1", "n2", 100, "usd")
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "60s")
    wait_for(5) { File.read(log).include?("msg=connected") }
    sleep 0.2 # idle in poll()
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    db.insert_event("e_n1", "payment_intent.succeeded", succeeded("pi_n1", "t1", "n1", 100, "usd"))
    wait_for(5, 0.01) { db.event("e_n1")[:status] == "done" }
    expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).to be < 2 # woken by NOTIFY, not the 60 s poll
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)

    # A row made due by an UPDATE (no NOTIFY): found by the poll interval.
    db.insert_event("e_n2", "payment_intent.succeeded", succeeded("pi_n2", "t1", "n2", 100, "usd"))
    db.psql("UPDATE webhook_inbox SET next_attempt_at = now() + interval '1 hour' WHERE event_id = 'e_n2'")
    pid, = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "300ms")
    sleep 0.5
    expect(db.event("e_n2")[:status]).to eq("pending")
    db.psql("UPDATE webhook_inbox SET next_attempt_at = now() WHERE event_id = 'e_n2'")
    wait_for(5, 0.05) { db.event("e_n2")[:status] == "done" }
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "isolates an event whose dispatch statement fails outright (statement_timeout) without losing the batch" do
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_sleepy(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep((ev.payload ->> 'sleep')::float8); RETURN 'slept'; END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.sleepy', 't_sleepy');
    SQL
    db.insert_event("s1", "test.sleepy", { "sleep" => 0 })
    db.insert_event("s2", "test.sleepy", { "sleep" => 5 })
    db.insert_event("s3", "test.sleepy", { "sleep" => 0 })
    # query_canceled is not caught by the handler's EXCEPTION block: the whole statement fails.
    status, _, log = sidecar("run", "--once", "--database-url", db.url, "--batch-size", "10", "--max-attempts", "1",
                             env: { "PGOPTIONS" => "-c statement_timeout=300" })
    expect(status.exitstatus).to eq(0), log
    expect(db.event("s1")).to include(status: "done", outcome: "slept")
    expect(db.event("s3")).to include(status: "done", outcome: "slept")
    expect(db.event("s2")).to include(status: "quarantined", attempts: 1)
    expect(db.event("s2")[:last_error]).to include("statement timeout")
    expect(log).to include("msg=batch_failed", "msg=dispatch_failed")
  end

  it "isolates an event whose work fails only at COMMIT (deferred constraint) instead of retrying the batch forever" do
    db.psql(<<~SQL)
      CREATE TABLE IF NOT EXISTS t_parent (id int PRIMARY KEY);
      CREATE TABLE IF NOT EXISTS t_child (parent int REFERENCES t_parent DEFERRABLE INITIALLY DEFERRED);
      CREATE OR REPLACE FUNCTION t_deferred(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO t_child VALUES ((ev.payload ->> 'parent')::int); RETURN 'child'; END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.deferred', 't_deferred');
    SQL
    db.insert_event("bad", "test.deferred", { "parent" => 42 }) # oldest: in every batch
    db.insert_event("evt_1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
    status, _, log = sidecar("run", "--once", "--database-url", db.url, "--max-attempts", "1", timeout: 20)
    expect(status.exitstatus).to eq(0), log
    expect(db.event("evt_1")).to include(status: "done", outcome: "paid")
    expect(db.event("bad")).to include(status: "quarantined", attempts: 1)
    expect(db.event("bad")[:last_error]).to include("23503")
    expect(db.int("SELECT count(*) FROM t_child")).to eq(0)
  end

  it "does not spin while the only due rows are locked by another transaction, and takes them when it ends" do
    db.insert_event("locked", "payment_intent.succeeded", succeeded("pi_l", "t1", "o1", 2000, "jpy"))
    holder = Thread.new do
      db.psql("BEGIN; SELECT 1 FROM webhook_inbox WHERE event_id = 'locked' FOR UPDATE; SELECT pg_sleep(4); COMMIT")
    end
    wait_for(5) { db.int("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == 1 }
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "5s")
    wait_for(5) { File.read(log).include?("msg=connected") }
    sleep 1.2 # statistics reach pg_stat_database about once a second
    commits = -> { db.int("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()") }
    c0 = commits.call
    sleep 2
    expect(commits.call - c0).to be < 150 # was ~800: a batch and a next-due query every 5 ms
    holder.join
    wait_for(10, 0.05, "done after the lock is released") { db.event("locked")[:status] == "done" }
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "stamps processed_at when the handlers have run, not when the batch began (stats latency)" do
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_slow(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(0.6); IF ev.event_id = 'q2' THEN PERFORM webhook_inbox_quarantine('no'); END IF;
      RETURN 'slow'; END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.slow', 't_slow');
    SQL
    db.insert_event("q1", "test.slow", {})
    db.insert_event("q2", "test.slow", {})
    run_once("--batch-size", "10", "--concurrency", "1") # one batch of both (two workers could take one each)
    lat = db.value("SELECT string_agg(round(extract(epoch FROM processed_at - received_at)::numeric, 1)::text, ','" \
                   " ORDER BY event_id) FROM webhook_inbox").split(",").map(&:to_f)
    expect(lat[0]).to be >= 0.6 # q1 done after its handler
    expect(lat[1]).to be >= 1.2 # q2 quarantined after both
  end

  it "routes by exact type, then the longest prefix pattern, then '*'" do
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_route_a(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'a' $$;
      CREATE OR REPLACE FUNCTION t_route_b(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'b' $$;
      CREATE OR REPLACE FUNCTION t_route_star(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'star' $$;
      INSERT INTO webhook_inbox_routes VALUES ('x.*', 't_route_a'), ('x.y.*', 't_route_b'), ('*', 't_route_star'), ('x.y.z', 't_route_a');
    SQL
    { "r1" => "x.q", "r2" => "x.y.q", "r3" => "x.y.z", "r4" => "other", "r5" => "x_y.q" }.each { |id, t| db.insert_event(id, t, {}) }
    run_once
    expect(%w[r1 r2 r3 r4 r5].map { |id| db.event(id)[:outcome] }).to eq(%w[a b a star star])
  end
end
