# frozen_string_literal: true

require_relative "sidecar_helper"

# Crashes, killed connections, server restarts and signals, on a cluster of its own (these
# tests stop the server). client_connection_check_interval lets the server notice a killed
# sidecar during pg_sleep, as it would notice a dead client on its next write.
RSpec.describe "webhook-inbox-sidecar under failures", :sidecar do
  include SidecarHelper::Payloads

  before(:all) do
    @pg = ThrowawayPostgres.new(settings: { client_connection_check_interval: "100ms" })
    @db = SidecarHelper::DB.new(@pg)
  end
  after(:all) { @pg&.destroy }

  let(:db) { @db }
  let(:pg) { @pg }

  before do
    pg.start unless pg.running?
    db.reset!
    # A payment handler that sleeps after its business UPDATE: a window to crash in.
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_slow_payment(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      DECLARE r text;
      BEGIN
          r := orders_on_payment_succeeded(ev);
          PERFORM pg_sleep((ev.payload ->> 'sleep')::float8);
          RETURN r;
      END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.slow_payment', 't_slow_payment') ON CONFLICT DO NOTHING;
    SQL
  end

  def slow_payment(event_id, order, sleep_s)
    db.add_order("t1", order, 100, "usd")
    db.insert_event(event_id, "test.slow_payment", succeeded("pi_#{order}", "t1", order, 100, "usd").merge("sleep" => sleep_s))
  end

  def sidecar_backends
    db.int("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sidecar'")
  end

  def sleeping_handler?
    db.int("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sidecar' AND wait_event = 'PgSleep'") > 0
  end

  it "kill -9 while a handler runs: the business update rolls back and the event is processed exactly once after restart" do
    slow_payment("evt_k", "ok9", 1.5)
    pid, = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--batch-size", "1")
    wait_for(10, 0.02, "the handler to sleep") { sleeping_handler? }
    Process.kill("KILL", pid)
    Process.waitpid(pid)
    wait_for(10, 0.05, "the orphaned backend to end") { sidecar_backends.zero? }
    expect(db.value("SELECT status FROM orders WHERE order_id = 'ok9'")).to eq("awaiting_payment")
    expect(db.event("evt_k")).to include(status: "pending", attempts: 0)

    status, _, err = sidecar("run", "--once", "--database-url", db.url)
    expect(status.exitstatus).to eq(0), err
    expect(db.event("evt_k")).to include(status: "done", outcome: "paid")
    expect(db.int("SELECT count(*) FROM order_transitions WHERE order_id = 'ok9'")).to eq(1)
    expect(db.int("SELECT count(*) FROM payments WHERE payment_id = 'pi_ok9'")).to eq(1)
  end

  it "reconnects after pg_terminate_backend and keeps processing" do
    db.add_order("t1", "a", 100, "usd")
    db.add_order("t1", "b", 100, "usd")
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "2", "--poll-interval", "200ms")
    db.insert_event("e_a", "payment_intent.succeeded", succeeded("pi_a", "t1", "a", 100, "usd"))
    wait_for(10) { db.event("e_a")[:status] == "done" }
    wait_for(5) { sidecar_backends == 3 } # 2 workers and the listener
    db.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sidecar'")
    wait_for(10, 0.05, "reconnect") { File.read(log).scan("msg=connected").size >= 4 }
    wait_for(10, 0.05, "the listener back") { File.read(log).scan("msg=listener_connected").size >= 2 }
    db.insert_event("e_b", "payment_intent.succeeded", succeeded("pi_b", "t1", "b", 100, "usd"))
    wait_for(10) { db.event("e_b")[:status] == "done" }
    expect(File.read(log)).to include("msg=connection_lost")
    expect(Process.waitpid(pid, Process::WNOHANG)).to be_nil # still running
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
    expect(File.read(log)).to match(/msg=summary done=2 .*reconnects=2/)
  end

  it "survives a PostgreSQL crash and restart, then continues" do
    db.add_order("t1", "r1", 100, "usd")
    db.add_order("t1", "r2", 100, "usd")
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "2", "--poll-interval", "200ms")
    db.insert_event("e_r1", "payment_intent.succeeded", succeeded("pi_r1", "t1", "r1", 100, "usd"))
    wait_for(10) { db.event("e_r1")[:status] == "done" }

    pg.stop(mode: "immediate")
    sleep 1.0
    expect(Process.waitpid(pid, Process::WNOHANG)).to be_nil # never exits on a lost connection
    pg.start
    db.insert_event("e_r2", "payment_intent.succeeded", succeeded("pi_r2", "t1", "r2", 100, "usd"))
    wait_for(20) { db.event("e_r2")[:status] == "done" }
    expect(File.read(log)).to include("msg=connect_failed").or include("msg=connection_lost")

    pg.stop(mode: "fast")
    pg.start
    db.psql("UPDATE webhook_inbox SET status = 'pending' WHERE event_id = 'e_r2'")
    db.psql("UPDATE orders SET status = 'awaiting_payment', payment_id = NULL WHERE order_id = 'r2'")
    db.psql("DELETE FROM payments WHERE payment_id = 'pi_r2'")
    wait_for(20) { db.event("e_r2")[:status] == "done" }
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "SIGTERM mid-batch finishes the transaction in flight, exits 0 and leaves nothing half-done" do
    40.times { |i| slow_payment("evt_t#{i}", "t#{i}", 0.05) }
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1", "--batch-size", "10")
    wait_for(10, 0.01, "the first handler") { sleeping_handler? }
    Process.kill("TERM", pid)
    st = wait_exit(pid, 20)
    expect(st&.exitstatus).to eq(0)
    done = db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'done'")
    expect(done).to be >= 10
    expect(done % 10).to eq(0) # whole batches only
    expect(done).to be < 40
    expect(db.int("SELECT count(*) FROM orders WHERE status = 'paid'")).to eq(done)
    expect(db.int("SELECT count(*) FROM order_transitions")).to eq(done)
    expect(db.int(<<~SQL)).to eq(0) # no pending event whose order moved
      SELECT count(*) FROM webhook_inbox w JOIN orders o ON o.order_id = w.payload #>> '{data,object,metadata,order_id}'
       WHERE w.status = 'pending' AND o.status <> 'awaiting_payment'
    SQL
    expect(File.read(log)).to include("msg=stopping")
  end

  it "a second SIGTERM exits at once; the transaction in flight rolls back" do
    slow_payment("evt_2x", "two", 30)
    pid, = spawn_sidecar("run", "--database-url", db.url, "--concurrency", "1")
    wait_for(10, 0.02, "the handler to sleep") { sleeping_handler? }
    Process.kill("TERM", pid)
    sleep 0.2
    expect(Process.waitpid(pid, Process::WNOHANG)).to be_nil # first: still finishing
    Process.kill("TERM", pid)
    st = wait_exit(pid, 5)
    expect(st).not_to be_nil
    expect(st.exitstatus).to eq(1)
    wait_for(10) { sidecar_backends.zero? }
    expect(db.value("SELECT status FROM orders WHERE order_id = 'two'")).to eq("awaiting_payment")
    expect(db.event("evt_2x")).to include(status: "pending", attempts: 0)
  end
end
