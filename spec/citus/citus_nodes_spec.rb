# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../support/citus_events"
require_relative "../sidecar/sidecar_helper"

# Citus nodes that come back or join by themselves (issue 30, db/029): the routes name their
# handlers, and each node resolves the names itself, so a worker whose functions Citus created
# again (its metadata synced again) or a worker added, whose copy of the routes holds another
# node's OIDs, handles its shards' events without `migrate --citus`; on a node that lacks a
# routed handler its events wait, uncharged (as unrouted ones under `--unrouted wait`), while
# the other types run, until it has it.
# Every event is handled once (a co-located table, one row per handler run) and none is
# charged. Skipped with the reason when Citus is not installed.
RSpec.describe "Citus nodes re-activated or added without an operator step" do
  include CitusClusterSpec
  include CitusEvents

  let(:bin) { SidecarHelper.binary }

  before(:all) do
    migrate_citus!
    CitusEvents.create_handler(@cluster, "nodes")
  end

  def events_name = "nodes"

  # Routes whose handler OID names no function on that node (its copy of the reference table).
  def stale_routes(node)
    node.psql("SELECT count(*) FROM webhook_inbox_routes r WHERE r.handler::oid NOT IN (SELECT oid FROM pg_proc)").strip.to_i
  end

  it "handles a re-activated worker's events once, none charged, without migrate --citus" do
    worker = cluster.workers.first
    receive("again", 300)
    expect(on_node("again", worker.port)).to be > 50
    sql("SELECT stop_metadata_sync_to_node('127.0.0.1', #{worker.port})")
    sql("SELECT start_metadata_sync_to_node('127.0.0.1', #{worker.port})") # Citus creates the functions there again
    expect(stale_routes(worker)).to be > 0 # the case at hand: its copy of the routes names OIDs that are gone

    log = File.join(cluster.coordinator.dir, "again.log")
    pids = [spawn_sidecar(log), spawn_sidecar(log)]
    wait_for("every event done", bound: 120) { states("again") == "done 0 x300" }
    expect(runs("again")).to eq("300 300")
    expect(File.read(log)).not_to include("42601", "batch_failed", "handler_missing")
  ensure
    (pids || []).each { |pid| stop_process(pid) }
  end

  it "holds the events of a worker that lacks the handler, uncharged, and handles them once it has it" do
    worker = cluster.workers[1] # not the one a later example adds
    worker.psql("SET citus.enable_ddl_propagation = off; DROP FUNCTION nodes_handler(webhook_inbox)")
    receive("lacks", 300)
    missing = on_node("lacks", worker.port)
    expect(missing).to be > 50

    log = File.join(cluster.coordinator.dir, "lacks.log")
    pids = Array.new(2) { spawn_sidecar(log, "--unrouted-delay", "1s") } # how soon a waiting event is looked at again
    wait_for("the other worker's events done", bound: 120) { states("lacks") == "done 0 x#{300 - missing}, pending 0 x#{missing}" }
    wait_for("the missing handler logged", bound: 30) { File.read(log).include?("msg=handler_missing") }
    sleep 2 # waited again meanwhile: still nothing charged
    expect(states("lacks")).to eq("done 0 x#{300 - missing}, pending 0 x#{missing}")
    text = File.read(log)
    expect(text).to include("public.nodes_handler (127.0.0.1:#{worker.port})")
    expect(text).not_to include("batch_failed", "dispatch_failed")

    worker.psql(<<~SQL)
      SET citus.enable_ddl_propagation = off;
      CREATE FUNCTION nodes_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          INSERT INTO nodes_runs VALUES (ev.source_scope, ev.event_id);
          RETURN 'ran';
      END $$;
    SQL
    wait_for("every event done", bound: 120) { states("lacks") == "done 0 x300" }
    expect(runs("lacks")).to eq("300 300")
  ensure
    (pids || []).each { |pid| stop_process(pid) }
  end

  it "handles every event once while a worker is added and shards are moved to it under running sidecars" do
    log = File.join(cluster.coordinator.dir, "added.log")
    pids = [spawn_sidecar(log), spawn_sidecar(log)]
    receive("before", 200)
    added = ThrowawayPostgres.new(dbname: "webhook_inbox", settings: CitusCluster::SETTINGS)
    cluster.workers << added # destroyed with the cluster
    added.psql("CREATE EXTENSION citus")
    sql("SELECT citus_add_node('127.0.0.1', #{added.port})")
    sql("SELECT replicate_reference_tables()") # what citus_rebalance_start does first: the routes' copy, by binary COPY
    from = cluster.workers.first
    # Two shards of that worker that hold scopes of these events (a move takes their co-located shards along).
    shards = sql("SELECT string_agg(DISTINCT p.shardid::text, ',') FROM generate_series(0, 49) i " \
                 "JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('webhook_inbox', 'scope_' || i) " \
                 "WHERE p.nodeport = #{from.port}").split(",").first(2)
    receiving = Thread.new { 4.times { |i| receive("during#{i}", 100) && sleep(0.2) } } # receipts during the moves
    shards.each do |id|
      sql("SELECT citus_move_shard_placement(#{id}, '127.0.0.1', #{from.port}, '127.0.0.1', #{added.port}, " \
          "shard_transfer_mode := 'force_logical')")
    end
    receiving.join
    expect(stale_routes(added)).to be > 0 # its copy of the routes came with another node's OIDs
    receive("after", 200)
    expect(on_node("after", added.port)).to be > 0
    wait_for("every event done", bound: 180) do
      sql("SELECT count(*) FILTER (WHERE status = 'done') || ' ' || count(*) FROM webhook_inbox " \
          "WHERE event_id ~ '^(before|during|after)'") == "800 800"
    end
    expect(sql("SELECT max(attempts) FROM webhook_inbox WHERE event_id ~ '^(before|during|after)'")).to eq("0")
    expect(sql("SELECT count(*) || ' ' || count(DISTINCT (source_scope, event_id)) FROM nodes_runs " \
               "WHERE event_id ~ '^(before|during|after)'")).to eq("800 800")
    expect(File.read(log)).not_to include("42601", "handler_missing")
  ensure
    (pids || []).each { |pid| stop_process(pid) }
  end
end
