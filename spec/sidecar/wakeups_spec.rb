# frozen_string_literal: true

require "net/http"
require_relative "sidecar_helper"
require_relative "../support/prometheus_text"

# Wake-ups (sidecar/src/claim/wake.h, listener.c): one connection per process LISTENs and hands
# each notification to one idle worker, so a receipt costs one claim whatever --concurrency;
# a worker whose batch took every due row waits for the next notification instead of
# claiming again to find nothing. A full batch wakes one more worker, so a backlog brings
# them all in. A worker held by a slow handler does not hold a new event back: an idle
# sibling is woken for it. A Ruby worker's registration wakes the events of its types.
RSpec.describe "webhook-inbox-sidecar wake-ups", :sidecar do
  include SidecarHelper::Payloads

  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  before { db.reset! }
  after { kill_spawned }

  def start(concurrency, *extra)
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--concurrency", concurrency.to_s,
                             "--metrics-listen", "127.0.0.1:0", "--log-events=false", *extra)
    addr = wait_for(20, 0.05, "metrics_listening") { File.read(log)[/msg=metrics_listening address=(\S+)/, 1] }
    wait_for(20, 0.05, "#{concurrency} workers connected") { File.read(log).scan(/msg=connected worker=/).size >= concurrency }
    wait_for(20, 0.05, "the listener") { db.int("SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN webhook_inbox'") == 1 }
    [pid, addr]
  end

  # Routes type to a handler that sleeps seconds and returns outcome (reset! drops the route).
  def sleeping_handler(type, seconds, outcome)
    name = "test_#{outcome}_handler"
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION #{name}(ev webhook_inbox) RETURNS text
      LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(#{seconds}); RETURN '#{outcome}'; END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('#{type}', '#{name}');
    SQL
  end

  # Worker transactions inside such a handler right now.
  def sleeping_handlers
    db.int("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%dispatch_batch%'")
  end

  def counter(addr, name)
    host, port = addr.split(":")
    body = Net::HTTP.start(host, port.to_i, open_timeout: 5, read_timeout: 10) { |h| h.get("/metrics").body }
    PrometheusText.parse(body).fetch(name).samples.first.value.to_i
  end

  it "claims once per notification among 4 idle workers, with no empty claim after a batch that took all" do
    _, addr = start(4)
    # Each worker claims once when it connects, and the listener's first connect counts as a
    # notification (some may have come before): those claims are not what this is about.
    wait_for(10, 0.05, "the startup claims") { counter(addr, "webhook_inbox_empty_claims_total") >= 5 }
    empty = counter(addr, "webhook_inbox_empty_claims_total")
    events = 40
    events.times do |i|
      db.add_order("t1", "o#{i}", 100, "usd")
      db.insert_event("evt_wake_#{i}", "payment_intent.succeeded", succeeded("pi_#{i}", "t1", "o#{i}", 100, "usd"))
      wait_for(10, 0.01, "event #{i} done") { db.event("evt_wake_#{i}")[:status] == "done" }
    end
    expect(db.int("SELECT count(*) FROM orders WHERE status = 'paid'")).to eq(events)
    expect(counter(addr, "webhook_inbox_batches_total")).to eq(events)
    # When every worker LISTENed, each NOTIFY had the 3 others claim for nothing, and the
    # worker that ran the event claimed again to find nothing: about 4 empty claims per event.
    expect(counter(addr, "webhook_inbox_empty_claims_total") - empty).to be <= events / 10
  end

  it "brings every worker in on a backlog that arrives in one notification" do
    sleeping_handler("test.busy", 0.02, "busy")
    start(4, "--batch-size", "1", "--poll-interval", "60s")
    # One statement, one NOTIFY: it wakes one worker; each full batch (of 1) wakes another.
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
            "SELECT 'stripe:acct_1:test', 'evt_busy_' || i, 'test.busy', '{}' FROM generate_series(1, 300) i")
    busiest = 0
    until db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'pending'").zero?
      busiest = [busiest, sleeping_handlers].max
      sleep 0.02
    end
    expect(busiest).to be >= 3 # all 4 almost always; without the hand-off 1 (the others wait for --poll-interval)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'done' AND outcome = 'busy'")).to eq(300)
  end

  it "lets a sibling claim a new event while a worker is held by a slow handler" do
    sleeping_handler("test.slow", 3, "slow")
    start(2)
    db.insert_event("evt_slow", "test.slow", { "type" => "test.slow" })
    wait_for(10, 0.01, "the slow handler running") { sleeping_handlers == 1 }
    db.add_order("t1", "o_fast", 100, "usd")
    db.insert_event("evt_fast", "payment_intent.succeeded", succeeded("pi_fast", "t1", "o_fast", 100, "usd"))
    wait_for(10, 0.01, "the fast event done") { db.event("evt_fast")[:status] == "done" }
    expect(db.event("evt_slow")[:status]).to eq("pending") # still running: the fast one did not wait for it
    wait_for(10, 0.05, "the slow event done") { db.event("evt_slow")[:status] == "done" }
  end

  # db/018: a sidecar that started before the Ruby worker put the type's events off by
  # --unrouted-delay; the worker's registration makes them due and sends a NOTIFY.
  it "hands events that waited for a route to the Ruby worker once it registers their type, woken at once" do
    start(1, "--poll-interval", "1h", "--unrouted-delay", "1h")
    db.insert_event("evt_early", "ruby_wake.created", { "type" => "ruby_wake.created" })
    wait_for(10, 0.02, "the event waiting for a route") { db.event("evt_early")[:last_error] == "no route for event type" }
    db.psql(%(SELECT webhook_inbox_ruby_register('[["ruby_wake.*", "RubyWakeHandler"]]')))
    wait_for(10, 0.02, "the event handed to the Ruby worker") do
      db.int("SELECT count(*) FROM webhook_inbox_outbox WHERE destination = 'ruby' AND source_event_id = 'evt_early'") == 1
    end
    expect(db.event("evt_early")).to include(status: "pending", attempts: 0)
  ensure
    db.psql("DELETE FROM webhook_inbox_ruby_handlers WHERE handler = 'RubyWakeHandler'; " \
            "DELETE FROM webhook_inbox_outbox WHERE destination = 'ruby'")
  end
end
