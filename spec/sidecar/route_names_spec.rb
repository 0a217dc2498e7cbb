# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"

# Routes by name (db/029): a route keeps its handlers' schema-qualified names beside the
# regprocs, filled by a trigger from whatever a writer gives; the dispatch resolves the names
# on the node that runs it. When a route's handler is missing there, its events wait as
# unrouted ones do under `--unrouted wait` (uncharged, looked at again after the unrouted
# delay) while the rest of each batch runs; the sidecar logs the function (handler_missing),
# and once it exists the events are handled, each once.
RSpec.describe "routes by handler name (db/029)", :sidecar do
  include SidecarHelper

  before(:all) do
    @pg = ThrowawayPostgres.new
    @db = SidecarHelper::DB.new(@pg)
  end
  after(:all) { @pg&.destroy }

  let(:db) { @db }

  before do
    db.reset!
    db.psql(<<~SQL)
      CREATE SCHEMA IF NOT EXISTS "App Handlers";
      CREATE TABLE IF NOT EXISTS t_rn_runs (event_id text NOT NULL, by text NOT NULL);
      TRUNCATE t_rn_runs;
      DROP FUNCTION IF EXISTS "App Handlers".rn_row_away(webhook_inbox);
      DROP FUNCTION IF EXISTS rn_batch_away(webhook_inbox[]);
      CREATE OR REPLACE FUNCTION "App Handlers".rn_row(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO t_rn_runs VALUES (ev.event_id, 'row'); RETURN 'by row'; END $$;
      CREATE OR REPLACE FUNCTION rn_batch(evs webhook_inbox[]) RETURNS text[] LANGUAGE plpgsql AS $$
      BEGIN
          INSERT INTO t_rn_runs SELECT e.event_id, 'batch' FROM unnest(evs) e;
          RETURN array_fill('by batch'::text, ARRAY[cardinality(evs)]);
      END $$;
      CREATE OR REPLACE FUNCTION rn_other(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'other' $$;
      INSERT INTO webhook_inbox_routes (event_type, handler, batch_handler)
      VALUES ('rn.*', '"App Handlers".rn_row', 'rn_batch');
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('ok.one', 'rn_other');
    SQL
  end

  def insert(prefix, count)
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
            "SELECT 'scope', '#{prefix}_' || i, 'rn.one', '{}' FROM generate_series(1, #{count}) i")
  end

  it "fills each route's names from its regprocs, schema-qualified, and again when a regproc changes" do
    expect(db.value("SELECT handler_name || ' ' || batch_handler_name FROM webhook_inbox_routes WHERE event_type = 'rn.*'"))
      .to eq('"App Handlers".rn_row public.rn_batch')
    db.psql("UPDATE webhook_inbox_routes SET batch_handler = NULL WHERE event_type = 'rn.*'")
    expect(db.value("SELECT coalesce(batch_handler_name, 'none') FROM webhook_inbox_routes WHERE event_type = 'rn.*'")).to eq("none")
    db.psql("UPDATE webhook_inbox_routes SET handler = 'rn_batch'::regproc::oid::regproc WHERE event_type = 'rn.*'")
    expect(db.value("SELECT handler_name FROM webhook_inbox_routes WHERE event_type = 'rn.*'")).to eq("public.rn_batch")
    # A positional insert (the form the docs show) gets its name too; a name the write gives is kept.
    db.psql("INSERT INTO webhook_inbox_routes VALUES ('rn.ignored', 'webhook_inbox_ignore')")
    db.psql("INSERT INTO webhook_inbox_routes (event_type, handler, handler_name) VALUES ('rn.given', 'rn_batch', 'public.webhook_inbox_ignore')")
    expect(db.value("SELECT string_agg(handler_name, ' ' ORDER BY event_type) FROM webhook_inbox_routes WHERE event_type IN ('rn.ignored', 'rn.given')"))
      .to eq("public.webhook_inbox_ignore public.webhook_inbox_ignore")
    expect { db.psql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('rn.none', 4000000000::oid::regproc)") }
      .to raise_error(/names a handler that does not exist/)
    expect { db.psql("INSERT INTO webhook_inbox_routes (event_type, handler, handler_name) VALUES ('rn.bad', 'rn_batch', 'not a name')") }
      .to raise_error(/invalid name syntax/)
  end

  it "fills the names of the routes an older database has when migrated in place" do
    db.psql(<<~SQL)
      ALTER TABLE webhook_inbox_routes DISABLE TRIGGER webhook_inbox_routes_names;
      ALTER TABLE webhook_inbox_routes ALTER COLUMN handler_name DROP NOT NULL;
      UPDATE webhook_inbox_routes SET handler_name = NULL, batch_handler_name = NULL;
      ALTER TABLE webhook_inbox_routes ENABLE TRIGGER webhook_inbox_routes_names;
      SELECT 1 FROM webhook_inbox_routes; -- v27's state: no names
    SQL
    db.pg.psql_file(File.expand_path("../../db/029_route_names.sql", __dir__), db: db.name)
    expect(db.value("SELECT count(*) FROM webhook_inbox_routes WHERE handler_name IS NULL")).to eq("0")
    expect(db.value("SELECT handler_name || ' ' || batch_handler_name FROM webhook_inbox_routes WHERE event_type = 'rn.*'"))
      .to eq('"App Handlers".rn_row public.rn_batch')
    expect(db.value("SELECT attnotnull FROM pg_attribute WHERE attrelid = 'webhook_inbox_routes'::regclass AND attname = 'handler_name'"))
      .to eq("t")
  end

  def rows(sql)
    conn = PG.connect(db.url)
    conn.exec(sql).values
  ensure
    conn&.close
  end

  def other(prefix, count)
    db.psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
            "SELECT 'scope', '#{prefix}_' || i, 'ok.one', '{}' FROM generate_series(1, #{count}) i")
  end

  def states(type)
    db.value("SELECT string_agg(s || ' x' || n, ', ' ORDER BY s) FROM (SELECT status || ' ' || attempts AS s, count(*) AS n " \
             "FROM webhook_inbox WHERE event_type = '#{type}' GROUP BY 1) x")
  end

  it "holds only the missing handler's events, waiting uncharged, while the rest of each batch runs" do
    insert("miss", 5)
    other("ok", 5)
    db.psql(%(ALTER FUNCTION "App Handlers".rn_row(webhook_inbox) RENAME TO rn_row_away))
    # Under any unrouted policy ('ignore' here): the missing handler's events wait, named.
    rows = rows("SELECT event_type, result, detail, charged, retry_in_ms FROM webhook_inbox_dispatch_batch(20, 'ignore', 5, 10, 100, 60000)")
    expect(rows.group_by(&:first).transform_values(&:size)).to eq("rn.one" => 5, "ok.one" => 5)
    expect(rows.select { |r| r[0] == "rn.one" }.uniq)
      .to eq([["rn.one", "waiting", 'handler missing on this node: "App Handlers".rn_row (local socket)', "f", "60000"]])
    expect(rows.select { |r| r[0] == "ok.one" }.map { |r| r[1] }.uniq).to eq(["done"])
    expect(states("rn.one")).to eq("pending 0 x5")
    expect(states("ok.one")).to eq("done 0 x5")
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE event_type = 'rn.one' AND next_attempt_at > now() + interval '50 seconds'")).to eq(5)
    expect(db.int("SELECT count(*) FROM t_rn_runs")).to eq(0)
    # A missing batch handler alone holds nothing: the row handler runs its events (as at n = 1).
    db.psql(<<~SQL)
      ALTER FUNCTION "App Handlers".rn_row_away(webhook_inbox) RENAME TO rn_row;
      ALTER FUNCTION rn_batch(webhook_inbox[]) RENAME TO rn_batch_away;
      UPDATE webhook_inbox SET next_attempt_at = now() WHERE status = 'pending';
    SQL
    expect(rows("SELECT DISTINCT result, detail FROM webhook_inbox_dispatch_batch(20, 'wait', 5, 10, 100, 60000)"))
      .to eq([["done", "by row"]])
    expect(db.value("SELECT count(*) || ' ' || min(by) FROM t_rn_runs")).to eq("5 row")
  end

  it "lets the sidecar run the other types, logs the missing function, and runs its events once it exists" do
    insert("miss", 30)
    other("ok", 30)
    db.psql(<<~SQL)
      ALTER FUNCTION rn_batch(webhook_inbox[]) RENAME TO rn_batch_away;
      ALTER FUNCTION "App Handlers".rn_row(webhook_inbox) RENAME TO rn_row_away;
    SQL
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--poll-interval", "0.1s", "--batch-size", "10",
                             "--max-attempts", "2", "--unrouted-delay", "1s", "--log-level", "warn")
    wait_for(20, 0.1, "the other type done") { states("ok.one") == "done 0 x30" }
    wait_for(20, 0.1, "handler_missing logged") { File.read(log).include?("msg=handler_missing") }
    sleep 1.5 # a wait or two: still nothing charged
    expect(states("rn.one")).to eq("pending 0 x30")
    expect(db.int("SELECT count(*) FROM t_rn_runs")).to eq(0)
    text = File.read(log)
    expect(text.scan("msg=handler_missing").size).to eq(1) # once a minute per function, not once a batch
    expect(text[/msg=handler_missing.*/]).to include("handler=").and include("App Handlers").and include("rn_row").and include("type=rn.one")
    expect(text).not_to include("batch_failed", "dispatch_failed", "unrouted_event")
    db.psql(<<~SQL)
      ALTER FUNCTION rn_batch_away(webhook_inbox[]) RENAME TO rn_batch;
      ALTER FUNCTION "App Handlers".rn_row_away(webhook_inbox) RENAME TO rn_row;
    SQL
    wait_for(20, 0.1, "every event done") { db.value("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == "60" }
    expect(db.value("SELECT count(*) || ' ' || count(DISTINCT event_id) FROM t_rn_runs")).to eq("30 30")
    expect(db.value("SELECT max(attempts) FROM webhook_inbox")).to eq("0")
    expect(wait_exit(pid, 0)).to be_nil # still running
  end

  it "makes the event wait in the one-event path too (careful mode, Citus), charging nothing" do
    insert("one", 1)
    db.psql(%(ALTER FUNCTION "App Handlers".rn_row(webhook_inbox) RENAME TO rn_row_away))
    expect(rows("SELECT result, detail, charged FROM webhook_inbox_dispatch('scope', 'one_1', 'quarantine', 5, 10, 100, 1000)"))
      .to eq([["waiting", 'handler missing on this node: "App Handlers".rn_row (local socket)', "f"]])
    expect(rows("SELECT result, detail FROM webhook_inbox_dispatch_batch(1, 'retry', 5, 10, 100, 1000)")).to eq([])
    db.psql("UPDATE webhook_inbox SET next_attempt_at = now()")
    expect(rows("SELECT result, charged FROM webhook_inbox_dispatch_batch(1, 'retry', 5, 10, 100, 1000)"))
      .to eq([["waiting", "f"]])
    expect(db.value("SELECT status || ' ' || attempts FROM webhook_inbox WHERE event_id = 'one_1'")).to eq("pending 0")
    # The older lookups still name the missing function (WIH01).
    expect { db.psql("SELECT webhook_inbox_route('rn.one')") }.to raise_error(/WIH01|does not exist on this node/)
  end
end
