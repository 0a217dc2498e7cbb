# frozen_string_literal: true

require_relative "sidecar_helper"

# The batched dispatch (db/017): a batch runs its events in one subtransaction; when a
# handler raises, that is rolled back and the batch redone with a savepoint per event, so
# only the failing event rolls back. The subtransactions are read off the handler's rows:
# rows written in one subtransaction share its xid as xmin.
RSpec.describe "webhook_inbox_dispatch_batch (db/017)", :sidecar do
  before(:all) do
    @pg = ThrowawayPostgres.new
    @db = SidecarHelper::DB.new(@pg)
  end
  after(:all) { @pg&.destroy }

  let(:db) { @db }

  before do
    db.reset!
    db.psql(<<~SQL)
      CREATE TABLE IF NOT EXISTS t_batch_runs (event_id text NOT NULL);
      TRUNCATE t_batch_runs, webhook_inbox_effects_received;
      DROP SEQUENCE IF EXISTS t_batch_failed_runs; CREATE SEQUENCE t_batch_failed_runs;
      CREATE OR REPLACE FUNCTION t_batch_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          INSERT INTO t_batch_runs VALUES (ev.event_id);
          IF ev.payload ->> 'fail' IS NOT NULL THEN
              PERFORM nextval('t_batch_failed_runs'); -- not rolled back: counts the failing runs
          END IF;
          IF ev.payload ->> 'fail' = 'transient' THEN
              RAISE EXCEPTION 'upstream not ready' USING ERRCODE = 'WIR01';
          ELSIF ev.payload ->> 'fail' = 'permanent' THEN
              PERFORM webhook_inbox_quarantine('bad event');
          END IF;
          RETURN 'handled';
      END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.batch', 't_batch_handler') ON CONFLICT DO NOTHING;
    SQL
  end

  # Ten events e1..e10, claimed in that order; fail: { 5 => "transient" } marks e5.
  def insert_events(fail = {})
    values = (1..10).map do |i|
      payload = fail[i] ? { "fail" => fail[i] } : {}
      "('#{SidecarHelper::SCOPE}', 'e#{i}', 'test.batch', '#{JSON.generate(payload)}'::jsonb, " \
        "now() - interval '1 minute' + #{i} * interval '1 millisecond')"
    end
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at) VALUES #{values.join(", ")}")
  end

  def dispatch_batch
    db.psql("SELECT event_id, result FROM webhook_inbox_dispatch_batch(100, 'ignore', 5, 60000, 60000, 1000)")
      .lines.to_h { |l| l.strip.split("|") }
  end

  def runs = db.value("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM t_batch_runs")
  def subtransactions = db.int("SELECT count(DISTINCT xmin::text) FROM t_batch_runs")
  def done = db.value("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox WHERE status = 'done'")

  it "runs a batch whose handlers all succeed in one subtransaction, each event done once" do
    insert_events
    expect(dispatch_batch.values).to all(eq("done"))
    expect(runs).to eq((1..10).map { |i| "e#{i}" }.sort.join(","))
    expect(subtransactions).to eq(1)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'done' AND outcome = 'handled' " \
                  "AND jsonb_array_length(attempt_log) = 1")).to eq(10)
  end

  it "rolls back only the event whose handler raises, retries it with backoff, the others done once" do
    insert_events(5 => "transient")
    results = dispatch_batch
    expect(results["e5"]).to eq("retry")
    expect(results.except("e5").values).to all(eq("done"))
    # The optimistic run is rolled back whole: each event's writes are there once, e5's not at all.
    expect(runs).to eq((1..10).reject { |i| i == 5 }.map { |i| "e#{i}" }.sort.join(","))
    expect(subtransactions).to eq(9) # the redo: a savepoint per event
    expect(done.split(",").size).to eq(9)
    e5 = db.event("e5")
    expect(e5).to include(status: "pending", attempts: 1)
    expect(e5[:last_error]).to include("WIR01", "upstream not ready")
    # backoff 60 s with equal jitter: due in 30..60 s
    expect(db.value("SELECT next_attempt_at > now() + interval '25 seconds' FROM webhook_inbox WHERE event_id = 'e5'")).to eq("t")
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'done' AND jsonb_array_length(attempt_log) = 1")).to eq(9)
    expect(db.int("SELECT last_value FROM t_batch_failed_runs")).to eq(1) # charged once, run once: not run again in the redo
  end

  # One UPDATE marks the batch's done events (its rows share one command id, cmin), each with
  # its own attempt_log entry; the rows returned carry each event's latency from received_at.
  it "marks the batch's done events in one statement, each with its own log entry and latency, also after a redo" do
    insert_events(7 => "transient")
    rows = db.psql("SELECT event_id, result, latency_ms FROM webhook_inbox_dispatch_batch(100, 'ignore', 5, 60000, 60000, 1000)")
             .lines.map { |l| l.strip.split("|") }
    expect(rows.map(&:first)).to eq((1..10).map { |i| "e#{i}" }) # in claim order, each once
    expect(rows.map { |r| r[2].to_f }).to all(be > 59_000) # received a minute ago
    expect(db.int("SELECT count(DISTINCT cmin::text) FROM webhook_inbox WHERE status = 'done'")).to eq(1)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'done' AND attempt_log -> 0 ->> 'result' = 'done' " \
                  "AND attempt_log -> 0 ->> 'detail' = 'handled' AND (attempt_log -> 0 ->> 'duration_ms')::numeric >= 0")).to eq(9)
    expect(db.event("e7")).to include(status: "pending", attempts: 1)
  end

  it "fails the statement on an error that is not a handler's, as before" do
    insert_events
    expect { db.psql("SELECT * FROM webhook_inbox_dispatch_batch(100, 'bogus', 5, 1000, 1000, 1000)") }
      .to raise_error(/p_unrouted must be wait, ignore, quarantine or retry/)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'pending' AND attempts = 0")).to eq(10)
  end

  it "quarantines an event whose handler calls webhook_inbox_quarantine, the others done once" do
    insert_events(1 => "permanent", 10 => "transient")
    results = dispatch_batch
    expect(results).to include("e1" => "quarantined", "e10" => "retry")
    expect((2..9).map { |i| results["e#{i}"] }).to all(eq("done"))
    expect(runs).to eq((2..9).map { |i| "e#{i}" }.sort.join(","))
    expect(db.event("e1")).to include(status: "quarantined", last_error: "bad event")
    expect(db.int("SELECT last_value FROM t_batch_failed_runs")).to eq(2) # e1 and e10, once each
  end

  it "keeps the batch's other events in one subtransaction when an unrouted event is among them" do
    insert_events
    db.insert_event("e_unrouted", "test.nobody", {})
    results = dispatch_batch
    expect(results["e_unrouted"]).to eq("done") # --unrouted ignore
    expect(db.event("e_unrouted")).to include(status: "done", outcome: "ignored: no route")
    expect(subtransactions).to eq(1)
  end

  it "does not run again a route whose once-marker (db/009) an event already has, beside plain events" do
    insert_events
    db.psql("INSERT INTO webhook_inbox_effects_received (operation_id, name) " \
            "SELECT webhook_inbox_handler_operation_id('#{SidecarHelper::SCOPE}', 'e3', 'sql:t_batch_handler'), " \
            "'sql:t_batch_handler'")
    results = dispatch_batch
    expect(results.values).to all(eq("done"))
    expect(db.event("e3")[:outcome]).to eq("SQL route t_batch_handler already ran for this event")
    expect(runs.split(",")).not_to include("e3")
    expect(subtransactions).to eq(1)
  end

  it "holds a paused route's events in the same batch as the plain ones (the rule read once per batch)" do
    insert_events
    db.insert_event("e_held", "test.held", {})
    db.psql("INSERT INTO webhook_inbox_routes VALUES ('test.held', 't_batch_handler')")
    db.psql("SELECT webhook_inbox_pause('route', 'test.held', 'spec')")
    results = dispatch_batch
    expect(results["e_held"]).to eq("paused")
    expect(results.except("e_held").values).to all(eq("done"))
    expect(db.event("e_held")).to include(status: "pending", attempts: 0)
    expect(runs.split(",")).not_to include("e_held")
    expect(subtransactions).to eq(1) # the rule matches e_held only: the others stay plain
  end

  it "the sidecar's batch: a failing event is retried, the others done once" do
    insert_events(3 => "transient")
    status, _out, err = sidecar("run", "--once", "--database-url", db.url, "--batch-size", "100",
                                "--backoff-base", "60s", "--backoff-cap", "60s")
    expect(status.exitstatus).to eq(0), err
    expect(done.split(",").size).to eq(9)
    expect(db.event("e3")).to include(status: "pending", attempts: 1)
    expect(runs.split(",").tally.values).to all(eq(1))
  end

  it "marks done, once, the rows a handler wrote to (a new row version: marked by primary key, db/019)" do
    insert_events
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_batch_touch(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          INSERT INTO t_batch_runs VALUES (ev.event_id);
          IF ev.event_id IN ('e2', 'e7') THEN -- its own inbox row: the claim's row version is gone
              UPDATE webhook_inbox SET last_error = 'touched' WHERE source_scope = ev.source_scope AND event_id = ev.event_id;
          END IF;
          RETURN 'handled';
      END $$;
      UPDATE webhook_inbox_routes SET handler = 't_batch_touch' WHERE event_type = 'test.batch';
    SQL
    expect(dispatch_batch.values).to all(eq("done"))
    expect(done.split(",").size).to eq(10)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'done' AND last_error IS NULL " \
                  "AND jsonb_array_length(attempt_log) = 1")).to eq(10)
    expect(dispatch_batch).to be_empty # nothing left to run twice
    expect(runs.split(",").tally.values).to all(eq(1))
  end
end
