# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"

# Routes by name (db/029): a route keeps its handlers' schema-qualified names beside the
# regprocs, filled by a trigger from whatever a writer gives; the dispatch resolves the names
# on the node that runs it. When a route's handler is missing there, the batch is refused
# before any handler runs (WIH01), nothing is charged, the sidecar logs it and tries again,
# and once the function exists the events are handled, each once.
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
      INSERT INTO webhook_inbox_routes (event_type, handler, batch_handler)
      VALUES ('rn.*', '"App Handlers".rn_row', 'rn_batch');
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

  it "refuses a batch whose route's handler is missing, uncharged, and handles every event once it exists" do
    insert("miss", 30)
    db.psql(<<~SQL)
      ALTER FUNCTION rn_batch(webhook_inbox[]) RENAME TO rn_batch_away;
      ALTER FUNCTION "App Handlers".rn_row(webhook_inbox) RENAME TO rn_row_away;
    SQL
    # Straight: the statement fails with WIH01, naming the function; no handler ran.
    conn = PG.connect(db.url)
    begin
      expect { conn.exec("SELECT * FROM webhook_inbox_dispatch_batch(10, 'wait', 5, 10, 100, 1000)") }
        .to raise_error(PG::Error) { |e|
          expect(e.result.error_field(PG::Result::PG_DIAG_SQLSTATE)).to eq("WIH01")
          expect(e.message).to match(/the handler (public\.rn_batch|"App Handlers"\.rn_row) of the route for rn\.one does not exist on this node/)
        }
    ensure
      conn.close
    end
    pid, log = spawn_sidecar("run", "--database-url", db.url, "--poll-interval", "0.1s", "--batch-size", "10",
                             "--max-attempts", "2", "--log-level", "warn")
    wait_for(20, 0.1, "handler_missing logged") { File.read(log).include?("msg=handler_missing") }
    sleep 1.5 # a retry or two: still nothing charged, nothing redone one event per statement
    expect(db.value("SELECT string_agg(s || ' x' || n, ', ') FROM (SELECT status || ' ' || attempts AS s, count(*) AS n " \
                    "FROM webhook_inbox GROUP BY 1) x")).to eq("pending 0 x30")
    expect(db.int("SELECT count(*) FROM t_rn_runs")).to eq(0)
    text = File.read(log)
    expect(text.scan("msg=handler_missing").size).to eq(1) # once a minute, not once a batch
    expect(text).not_to include("batch_failed", "dispatch_failed")
    db.psql(<<~SQL)
      ALTER FUNCTION rn_batch_away(webhook_inbox[]) RENAME TO rn_batch;
      ALTER FUNCTION "App Handlers".rn_row_away(webhook_inbox) RENAME TO rn_row;
    SQL
    wait_for(20, 0.1, "every event done") { db.value("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == "30" }
    expect(db.value("SELECT count(*) || ' ' || count(DISTINCT event_id) FROM t_rn_runs")).to eq("30 30")
    expect(db.value("SELECT max(attempts) FROM webhook_inbox")).to eq("0")
    expect(wait_exit(pid, 0)).to be_nil # still running
  end

  it "refuses in careful mode's one-event path too, charging nothing" do
    insert("one", 1)
    db.psql(%(ALTER FUNCTION "App Handlers".rn_row(webhook_inbox) RENAME TO rn_row_away))
    conn = PG.connect(db.url)
    begin
      conn.exec("BEGIN")
      expect { conn.exec("SELECT * FROM webhook_inbox_dispatch('scope', 'one_1', 'wait', 5, 10, 100, 1000)") }
        .to raise_error(PG::Error, /WIH01|does not exist on this node/)
      conn.exec("ROLLBACK")
    ensure
      conn.close
    end
    expect(db.value("SELECT status || ' ' || attempts FROM webhook_inbox WHERE event_id = 'one_1'")).to eq("pending 0")
  end
end
