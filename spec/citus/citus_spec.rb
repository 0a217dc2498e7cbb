# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# The inbox on a real Citus cluster (a coordinator and two workers on this machine):
# `migrate --citus` converts a single-node inbox, receipts commit on one shard, and two
# sidecars process every event exactly once through duplicates and a kill -9. Skipped with
# the reason when the citus extension is not installed for the test PostgreSQL (CI).
# CITUS_EVENTS=10000 runs the full size (default 2,000 events; always 50 scopes).
RSpec.describe "the inbox on Citus" do
  include CitusClusterSpec

  let(:events) { Integer(ENV.fetch("CITUS_EVENTS", "2000")) }
  let(:scopes) { 50 }

  let(:bin) { SidecarHelper.binary }

  def migrate(*flags, url: cluster.url)
    Open3.capture2e(bin, "migrate", *flags, "--database-url", url)
  end

  def spawn_sidecar(log)
    Process.spawn(bin, "run", "--database-url", cluster.url, "--concurrency", "2", "--poll-interval", "0.1s",
                  "--log-level", "warn", out: log, err: log)
  end

  it "refuses --citus where the citus extension is not installed, naming the fix" do
    cluster.coordinator.psql("CREATE DATABASE plain", db: "postgres")
    out, st = migrate("--citus", url: cluster.coordinator.url("plain"))
    expect(st).not_to be_success
    expect(out).to include("citus extension is not installed")
  end

  it "converts an inbox in place and processes every event exactly once with two sidecars, duplicates and a kill -9" do
    # A single-node inbox with rows in it first.
    out, st = migrate
    expect(st).to be_success, out
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
        "SELECT 'scope_' || (i % #{scopes}), 'before_' || i, 'test.before', '{}' FROM generate_series(1, 100) i")

    out, st = migrate("--citus")
    expect(st).to be_success, out
    expect(out).to include("Citus layout")
    expect(sql("SELECT logicalrelid::text || ':' || partmethod::text || ':' || coalesce(column_to_column_name(logicalrelid, partkey), '')" \
               " FROM pg_dist_partition ORDER BY 1").split("\n"))
      .to eq(%w[webhook_inbox:h:source_scope webhook_inbox_effects_received:n:
                webhook_inbox_flow:n: webhook_inbox_outbox:h:source_scope webhook_inbox_redeliveries:n:
                webhook_inbox_routes:n: webhook_inbox_ruby_handlers:n:])
    expect(sql("SELECT count(*) FROM webhook_inbox")).to eq("100") # the rows moved into the shards
    # A GitHub delivery reconcile asked to be redelivered is stored, and reconcile's marking
    # (db/012, one router UPDATE on the scope's shard) marks it recovered.
    sql("INSERT INTO webhook_inbox_redeliveries (source_scope, delivery_guid, requested_id) " \
        "VALUES ('github:org:live', '72d3162e-cc78-11e3-81ab-4c9367dc0958', 1)")
    github = WebhookInbox::Inbox.new(database_url: cluster.url, group_by_scope: true)
    expect(github.insert(source_scope: "github:org:live", event_id: "d1", payload: "{}",
                         headers: { "x-github-delivery" => "72d3162e-cc78-11e3-81ab-4c9367dc0958" }).status).to eq(:accepted)
    github.close
    expect(sql("SELECT webhook_inbox_reconcile_mark('github:org:live')")).to eq("1")
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE source_scope = 'github:org:live' AND recovered_at IS NOT NULL"))
      .to eq("1")
    sql("DELETE FROM webhook_inbox WHERE source_scope = 'github:org:live'; DELETE FROM webhook_inbox_redeliveries")
    expect(sql("SELECT count(*) FROM pg_trigger WHERE tgname = 'webhook_inbox_notify_insert'")).to eq("0")
    out, st = migrate # plain migrate finds the layout and keeps it
    expect(st).to be_success, out
    expect(out).to include("Citus layout")
    expect(sql("SELECT count(*) FROM pg_trigger WHERE tgname = 'webhook_inbox_notify_insert'")).to eq("0")

    # A handler co-located with the inbox: its runs table is distributed by the same key, so
    # the run and the event's done row commit on one node. A run that did not commit
    # leaves no row; a payload's sleep holds the handler running.
    cluster.psql(<<~SQL)
      SET citus.multi_shard_modify_mode TO sequential;
      CREATE TABLE citus_runs (source_scope text NOT NULL, event_id text NOT NULL, pid integer NOT NULL);
      SELECT create_distributed_table('citus_runs', 'source_scope', colocate_with => 'webhook_inbox');
      CREATE FUNCTION citus_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          INSERT INTO citus_runs VALUES (ev.source_scope, ev.event_id, pg_backend_pid());
          IF ev.payload ? 'sleep' THEN PERFORM pg_sleep((ev.payload->>'sleep')::float8); END IF;
          RETURN 'ran';
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('test.*', 'citus_handler');
    SQL

    inbox = WebhookInbox::Inbox.new(database_url: cluster.url, pool_size: 8, group_by_scope: true)
    log = File.join(cluster.coordinator.dir, "sidecars.log")
    pids = []

    # The crash: a sidecar killed while the handler of slow_1 sleeps inside its transaction.
    inbox.insert(source_scope: "scope_slow", event_id: "slow_1", event_type: "test.slow", payload: '{"sleep": 2}')
    pids << spawn_sidecar(log)
    # The batch runs on the worker holding the shard (webhook_inbox_citus_dispatch_shard, pushed
    # down): its backend is found cluster-wide; the nodes share this machine, so pids are unique.
    sleeping = "SELECT pid FROM citus_stat_activity WHERE wait_event = 'PgSleep'"
    wait_for("slow_1's handler running") { sql("SELECT count(*) FROM (#{sleeping}) s") == "1" }
    killed = sql(sleeping)
    Process.kill(:KILL, pids.pop)
    Process.wait

    # Receipts from 16 threads over 50 scopes, and every 10th delivered again.
    ids = Array.new(events) { |i| ["scope_#{i % scopes}", "evt_#{i}"] }
    pids << spawn_sidecar(log) << spawn_sidecar(log) # two sidecars while the receipts arrive
    queue = Queue.new
    (ids + ids.each_slice(10).map(&:first)).each { |k| queue << k }
    receipts = Array.new(16) do
      Thread.new do
        got = []
        while (k = (queue.pop(true) rescue nil))
          got << inbox.insert(source_scope: k[0], event_id: k[1], event_type: "test.one", payload: "{}").status
        end
        got
      end
    end.flat_map(&:value)
    expect(receipts.tally).to eq(accepted: events, duplicate: events / 10)

    total = events + 100 + 1
    wait_for("every event done", bound: 600) { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == total.to_s }
    expect(sql("SELECT count(*) FROM webhook_inbox")).to eq(total.to_s) # nothing acknowledged lost, no row twice
    runs = sql("SELECT count(*), count(DISTINCT (source_scope, event_id)) FROM citus_runs")
    expect(runs).to eq("#{total}|#{total}") # every handler committed exactly once
    slow = sql("SELECT count(*) || '|' || bool_and(pid <> #{killed}) FROM citus_runs WHERE event_id = 'slow_1'")
    expect(slow).to eq("1|true") # the killed run rolled back, redone once by another session
    expect(sql("SELECT attempts FROM webhook_inbox WHERE event_id = 'slow_1'")).to eq("0") # the crash charged nothing
    expect(File.read(log)).not_to include("0A000")
    RSpec.configuration.reporter.message(
      "  citus: #{events} events over #{scopes} scopes + 100 converted + slow_1: receipts #{receipts.tally}, " \
      "done #{total}, handler runs committed #{runs.tr('|', '/')} (rows/distinct), slow_1 killed in pid #{killed} and redone once"
    )
  ensure
    pids&.each do |pid|
      Process.kill(:TERM, pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
    inbox&.close
  end
end
