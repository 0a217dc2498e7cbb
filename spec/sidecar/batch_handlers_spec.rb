# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"
require_relative "../support/schema_statements_connection"

# Batch handlers (db/019): a route's batch_handler is called once for a run of consecutive
# claimed events of its type; when it raises, every event of the batch is run again by the
# row handler, each in its own savepoint, and nothing the batch handler wrote commits.
RSpec.describe "batch handlers (db/019)", :sidecar do
  include SidecarHelper

  before(:all) do
    @pg = ThrowawayPostgres.new
    @db = SidecarHelper::DB.new(@pg)
  end
  after(:all) { @pg&.destroy }

  let(:db) { @db }

  # t_bh_runs: one row per handler run in the order they ran, written in its transaction:
  # by 'batch' (the ids it was given, in order) or 'row' (one id). t_bh_attempts counts the
  # batch handler's calls outside any transaction (a sequence is not rolled back).
  # The batch handler reads payload.batch: 'defer' (webhook_inbox_batch_defer), 'crash'
  # (division by zero, with a message that must never be logged), 'die' (ends its backend),
  # 'short' (one outcome too few).
  before do
    db.reset!
    db.psql(<<~SQL)
      CREATE TABLE IF NOT EXISTS t_bh_runs (n bigserial, by text NOT NULL, ids text[] NOT NULL);
      TRUNCATE t_bh_runs;
      DROP SEQUENCE IF EXISTS t_bh_attempts; CREATE SEQUENCE t_bh_attempts;
      CREATE OR REPLACE FUNCTION t_bh_row(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          INSERT INTO t_bh_runs (by, ids) VALUES ('row', ARRAY[ev.event_id]);
          IF ev.payload ->> 'row' = 'transient' THEN
              RAISE EXCEPTION 'not yet' USING ERRCODE = 'WIR01';
          END IF;
          RETURN 'by row';
      END $$;
      CREATE OR REPLACE FUNCTION t_bh_batch(evs webhook_inbox[]) RETURNS text[] LANGUAGE plpgsql AS $$
      DECLARE
          ids text[] := ARRAY(SELECT e.event_id FROM unnest(evs) e);
          n int;
      BEGIN
          PERFORM nextval('t_bh_attempts');
          INSERT INTO t_bh_runs (by, ids) VALUES ('batch', ids);
          IF EXISTS (SELECT 1 FROM unnest(evs) e WHERE e.payload ->> 'batch' = 'defer') THEN
              PERFORM webhook_inbox_batch_defer('one of them is unusual');
          ELSIF EXISTS (SELECT 1 FROM unnest(evs) e WHERE e.payload ->> 'batch' = 'crash') THEN
              RAISE EXCEPTION 'card 4242-secret-4242 failed' USING ERRCODE = '22012';
          ELSIF EXISTS (SELECT 1 FROM unnest(evs) e WHERE e.payload ->> 'batch' = 'die') THEN
              PERFORM pg_terminate_backend(pg_backend_pid()); -- a FATAL: no savepoint catches it
              PERFORM pg_sleep(5);
          ELSIF EXISTS (SELECT 1 FROM unnest(evs) e WHERE e.payload ->> 'batch' = 'short') THEN
              RETURN array_fill('by batch'::text, ARRAY[cardinality(evs) - 1]);
          END IF;
          RETURN ARRAY(SELECT 'by batch ' || e.event_id FROM unnest(evs) e);
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler, batch_handler) VALUES
          ('test.bulk', 't_bh_row', 't_bh_batch'), ('test.other', 't_bh_row', NULL)
      ON CONFLICT (event_type) DO UPDATE SET handler = EXCLUDED.handler, batch_handler = EXCLUDED.batch_handler;
    SQL
  end

  # Events in claim order: [[id, type, payload], ...].
  def insert(events)
    values = events.each_with_index.map do |(id, type, payload), i|
      "('#{SidecarHelper::SCOPE}', '#{id}', '#{type}', '#{JSON.generate(payload || {})}'::jsonb, " \
        "now() - interval '1 minute' + #{i} * interval '1 millisecond')"
    end
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at) VALUES #{values.join(", ")}")
  end

  def bulk(ids, payload = {}) = ids.map { |id| [id, "test.bulk", payload[id]] }

  # Runs one batch on a connection of its own; returns [{event_id => result}, WARNINGs].
  def dispatch_batch(limit = 100)
    notices = []
    conn = PG.connect(db.url)
    conn.set_notice_receiver do |r| # the fields of each NOTICE or WARNING (r is cleared after the block)
      notices << [PG::PG_DIAG_SEVERITY_NONLOCALIZED, PG::PG_DIAG_SQLSTATE, PG::PG_DIAG_MESSAGE_PRIMARY].map { |f| r.error_field(f) }
    end
    rows = conn.exec("SELECT event_id, result FROM webhook_inbox_dispatch_batch(#{limit}, 'ignore', 5, 60000, 60000, 1000)")
    warnings = notices.select { |severity, _, _| severity == "WARNING" }.map { |_, state, text| { state: state, text: text } }
    [rows.to_h { |r| [r["event_id"], r["result"]] }, warnings]
  ensure
    conn&.close
  end

  def calls = db.value("SELECT coalesce(string_agg(array_to_string(ids, ','), ' | ' ORDER BY n), '') FROM t_bh_runs WHERE by = 'batch'")
  def row_runs = db.value("SELECT coalesce(string_agg(ids[1], ',' ORDER BY ids[1]), '') FROM t_bh_runs WHERE by = 'row'")
  def run_order = db.value("SELECT string_agg(array_to_string(ids, ','), ' ' ORDER BY n) FROM t_bh_runs")
  def attempts = db.int("SELECT last_value - 1 + (CASE WHEN is_called THEN 1 ELSE 0 END) FROM t_bh_attempts")
  def outcomes = db.psql("SELECT event_id, outcome FROM webhook_inbox WHERE status = 'done'").lines.to_h { |l| l.strip.split("|") }

  it "calls the batch handler once for a run of events: each done with its outcome, the row handler not run" do
    insert(bulk(%w[b1 b2 b3 b4 b5]))
    results, warnings = dispatch_batch
    expect(results.values).to all(eq("done"))
    expect(calls).to eq("b1,b2,b3,b4,b5")
    expect(row_runs).to eq("")
    expect(outcomes).to eq(%w[b1 b2 b3 b4 b5].to_h { |id| [id, "by batch #{id}"] })
    expect(warnings).to be_empty
    # One attempt_log entry each, the call's time shared among them.
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE jsonb_array_length(attempt_log) = 1 " \
                  "AND (attempt_log -> 0 ->> 'duration_ms')::float8 >= 0")).to eq(5)
  end

  it "hands every event to the row handler when the batch handler defers: nothing it wrote commits, no warning" do
    insert(bulk(%w[b1 b2 b3 b4], "b3" => { "batch" => "defer", "row" => "transient" }))
    results, warnings = dispatch_batch
    expect(results).to eq("b1" => "done", "b2" => "done", "b3" => "retry", "b4" => "done")
    expect(attempts).to eq(1)   # called once
    expect(calls).to eq("")     # and its writes rolled back
    expect(row_runs).to eq("b1,b2,b4") # b3's failed run rolled back with its savepoint
    expect(outcomes).to eq("b1" => "by row", "b2" => "by row", "b4" => "by row")
    expect(db.event("b3")).to include(status: "pending", attempts: 1)
    expect(db.event("b3")[:last_error]).to include("WIR01", "not yet")
    expect(warnings).to be_empty
  end

  it "warns with the function and SQLSTATE, never the message, when the batch handler fails, and runs the row handler" do
    insert(bulk(%w[b1 b2 b3], "b2" => { "batch" => "crash" }))
    results, warnings = dispatch_batch
    expect(results.values).to all(eq("done"))
    expect(outcomes.values).to all(eq("by row"))
    expect(warnings.size).to eq(1)
    expect(warnings.first[:state]).to eq("WIB03")
    expect(warnings.first[:text]).to include("t_bh_batch", "22012", "test.bulk", "t_bh_row")
    expect(warnings.first[:text]).not_to include("secret")
  end

  it "treats a result of the wrong length as a failure (WIB02): the row handler decides, a warning says so" do
    insert(bulk(%w[b1 b2 b3], "b1" => { "batch" => "short" }))
    results, warnings = dispatch_batch
    expect(results.values).to all(eq("done"))
    expect(calls).to eq("")
    expect(outcomes.values).to all(eq("by row"))
    expect(warnings.map { |w| w[:text] }.join).to include("WIB02")
  end

  it "keeps the claim order: consecutive runs of the type only, one event alone and other types by row handler" do
    insert([*bulk(%w[a1 a2 a3]), ["x1", "test.other", {}], *bulk(%w[a4 a5]), ["x2", "test.other", {}], *bulk(%w[a6])])
    results, = dispatch_batch
    expect(results.values).to all(eq("done"))
    expect(calls).to eq("a1,a2,a3 | a4,a5")
    expect(row_runs).to eq("a6,x1,x2")
    expect(run_order).to eq("a1,a2,a3 x1 a4,a5 x2 a6") # in claim order
  end

  it "runs a batch of one, and the events of a rate-limited route, by the row handler" do
    insert(bulk(%w[b1]))
    dispatch_batch(1)
    expect(row_runs).to eq("b1")
    db.psql("TRUNCATE webhook_inbox, t_bh_runs")
    insert(bulk(%w[b1 b2 b3]))
    db.psql("INSERT INTO webhook_inbox_flow (kind, target, rate, changed_by) VALUES ('route', 'test.*', 100000, 'spec')")
    results, = dispatch_batch
    expect(results["b1"]).to eq("done") # the first slot; the others wait for theirs
    expect(results.values.tally).to eq("done" => 1, "throttled" => 2)
    expect(calls).to eq("")
    expect(row_runs).to eq("b1")
  ensure
    db.psql("DELETE FROM webhook_inbox_flow")
  end

  it "pays a run of orders in one call, and defers a run with a missing order to the row handler, event by event" do
    pay = ->(i) { ["pi#{i}", "payment_intent.succeeded", SidecarHelper::Payloads.succeeded("pi_#{i}", "t1", "o#{i}", 1000 + i, "usd")] }
    (1..4).each { |i| db.add_order("t1", "o#{i}", 1000 + i, "usd") }
    insert((1..4).map(&pay))
    expect(dispatch_batch.first.values).to all(eq("done"))
    expect(outcomes.values).to all(eq("paid"))
    expect(db.int("SELECT count(*) FROM payments")).to eq(4)

    # A run with the same payment twice and an order that does not exist yet: the row handler
    # pays o5, finds the second delivery a duplicate and waits for o7.
    db.add_order("t1", "o5", 1005, "usd")
    insert([pay.(5), ["pi5b", "payment_intent.succeeded", pay.(5)[2]], pay.(7)])
    results, warnings = dispatch_batch
    expect(results).to eq("pi5" => "done", "pi5b" => "done", "pi7" => "retry")
    expect(db.event("pi5")[:outcome]).to eq("paid")
    expect(db.event("pi5b")[:outcome]).to eq("duplicate")
    expect(db.event("pi7")[:last_error]).to include("order not found yet")
    expect(db.int("SELECT count(*) FROM payments")).to eq(5)
    expect(db.int("SELECT count(*) FROM order_transitions WHERE to_status = 'paid'")).to eq(5) # each order once
    expect(warnings).to be_empty # a defer, not a failure
  end

  it "logs the warning as the sidecar's server_warning line, without the message of the error, and counts the fallback" do
    insert(bulk(%w[b1 b2 b3], "b2" => { "batch" => "crash" }))
    status, _out, err = sidecar("run", "--once", "--database-url", db.url, "--batch-size", "10", "--concurrency", "1")
    expect(status).to be_success, err
    line = err.lines.find { |l| l.include?("msg=server_warning") }
    expect(line).to include("sqlstate=WIB03", "t_bh_batch", "22012")
    expect(err).not_to include("secret")
    expect(err[/msg=summary .*batch_fallbacks=(\d+)/, 1]).to eq("1")
    expect(outcomes.values).to all(eq("by row"))
  end

  it "never poisons a batch: a batch handler that ends its backend leaves the sidecar to run each event by its row handler, once" do
    insert(bulk(%w[b1 b2 b3 b4], "b2" => { "batch" => "die" }))
    status, _out, err = sidecar("run", "--once", "--database-url", db.url, "--batch-size", "10", "--concurrency", "1",
                                "--backoff-base", "100ms", "--backoff-cap", "200ms", timeout: 90)
    expect(status).to be_success, err
    expect(outcomes).to eq(%w[b1 b2 b3 b4].to_h { |id| [id, "by row"] })
    expect(db.value("SELECT string_agg(ids[1], ',' ORDER BY ids[1]) FROM t_bh_runs WHERE by = 'row'")).to eq("b1,b2,b3,b4")
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE attempts > 0")).to eq(0) # a crash is nobody's fault: uncharged
  end

  it "counts a deferred batch without a warning, and a batch handled whole as no fallback" do
    insert(bulk(%w[b1 b2 b3], "b3" => { "batch" => "defer" }))
    status, _out, err = sidecar("run", "--once", "--database-url", db.url, "--batch-size", "10", "--concurrency", "1")
    expect(status).to be_success, err
    expect(err).not_to include("server_warning")
    expect(err[/msg=summary .*batch_fallbacks=(\d+)/, 1]).to eq("1")
    expect(outcomes.values).to all(eq("by row"))

    insert(bulk(%w[c1 c2 c3]))
    status, _out, err = sidecar("run", "--once", "--database-url", db.url, "--batch-size", "10", "--concurrency", "1")
    expect(status).to be_success, err
    expect(err[/msg=summary .*batch_fallbacks=(\d+)/, 1]).to eq("0")
    expect(outcomes.slice("c1", "c2", "c3").values).to eq(["by batch c1", "by batch c2", "by batch c3"])
  end

  it "keeps a route's batch handler through the Rails schema statements (what db/schema.rb dumps and loads)" do
    SchemaStatementsConnection.with(@pg, db.name) do |conn|
      conn.add_webhook_inbox_route("test.rails", "t_bh_row", batch: "t_bh_batch")
      expect(conn.webhook_inbox_route_rows.assoc("test.rails")).to eq(["test.rails", "t_bh_row", nil, false, "t_bh_batch"])
      conn.add_webhook_inbox_route("test.rails", "t_bh_row") # the route restated: no batch handler
      expect(conn.webhook_inbox_route_rows.assoc("test.rails")).to eq(["test.rails", "t_bh_row", nil, false, nil])
      expect { conn.add_webhook_inbox_route("test.rails", destination: :app, batch: "t_bh_batch") }
        .to raise_error(ArgumentError, /batch: needs a handler function/)
      expect { conn.add_webhook_inbox_route("test.rails", "t_bh_row", batch: "no_such_function") }
        .to raise_error(ActiveRecord::StatementInvalid, /no_such_function/)
    end
  end
end
