# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../support/citus_events"
require_relative "../sidecar/sidecar_helper"

# The sidecar's batches sent straight to the worker holding each shard (--citus-direct, the
# default; sidecar/src/citus/citus.c): the coordinator out of the claim path, and the
# coordinator taking over a node's shards while that node fails (down, unreachable, or its
# call refused) - a batch is one transaction on one node either way, so no event runs twice
# and none is lost. Every handler run is a row in a co-located table. Skipped with the reason
# when Citus is not installed.
RSpec.describe "Citus: batches straight on the shard's worker" do
  include CitusClusterSpec
  include CitusEvents

  let(:bin) { SidecarHelper.binary }

  before(:all) do
    migrate_citus!
    CitusEvents.create_handler(@cluster, "direct")
    @cluster.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements") # Citus creates it on the workers too
  end

  def events_name = "direct"

  def run_once(*extra)
    out, st = Open3.capture2e(bin, "run", "--once", "--database-url", cluster.url, "--concurrency", "2",
                              "--batch-size", "20", "--log-level", "warn", "--log-events=false", *extra)
    raise out unless st.success?

    out
  end

  # Calls of the shard batch function a client sent to node (pg_stat_statements, top level).
  def shard_calls(node)
    node.psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements " \
              "WHERE query LIKE '%FROM webhook_inbox_citus_dispatch_shard($1%' AND toplevel").strip.to_i
  end

  def reset_calls = cluster.nodes.each { |n| n.psql("SELECT pg_stat_statements_reset()") }

  it "handles every event once with the coordinator out of the batches' path, and through it with --citus-direct=false" do
    receive("direct", 400)
    reset_calls
    run_once
    expect(states("direct")).to eq("done 0 x400")
    expect(runs("direct")).to eq("400 400")
    expect(shard_calls(cluster.coordinator)).to eq(0)
    expect(cluster.workers.map { |w| shard_calls(w) }).to all(be > 0)

    receive("coord", 400)
    reset_calls
    run_once("--citus-direct=false")
    expect(states("coord")).to eq("done 0 x400")
    expect(runs("coord")).to eq("400 400")
    expect(shard_calls(cluster.coordinator)).to be > 0
  end

  it "falls back to the coordinator for a node it cannot reach (--citus-node to a closed port), every event once" do
    worker = cluster.workers.first
    closed = TCPServer.open("127.0.0.1", 0).then { |s| s.addr[1].tap { s.close } }
    receive("unreached", 400)
    expect(on_node("unreached", worker.port)).to be > 50
    reset_calls
    out = run_once("--citus-node", "127.0.0.1:#{worker.port}=127.0.0.1:#{closed}")
    expect(states("unreached")).to eq("done 0 x400")
    expect(runs("unreached")).to eq("400 400")
    expect(out).to include("msg=citus_node_fallback", "node=127.0.0.1:#{worker.port}")
    expect(out).not_to include("password")
    expect(shard_calls(cluster.coordinator)).to be > 0 # that node's shards
    expect(shard_calls(cluster.workers.last)).to be > 0 # the other's, direct
  end

  it "handles every event once while shards move between the workers under running sidecars" do
    log = File.join(cluster.coordinator.dir, "direct-move.log")
    pids = [spawn_sidecar(log), spawn_sidecar(log)]
    a, b = cluster.workers
    receive("mv0", 300)
    shards = sql("SELECT string_agg(DISTINCT p.shardid::text, ',') FROM generate_series(0, 49) i " \
                 "JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('webhook_inbox', 'scope_' || i) " \
                 "WHERE p.nodeport = #{a.port}").split(",").first(2)
    receiving = Thread.new { 6.times { |i| receive("mv#{i + 1}", 100) && sleep(0.2) } }
    shards.each do |id|
      sql("SELECT citus_move_shard_placement(#{id}, '127.0.0.1', #{a.port}, '127.0.0.1', #{b.port}, " \
          "shard_transfer_mode := 'force_logical')")
    end
    receiving.join
    sql("CALL citus_cleanup_orphaned_resources()")
    shards.each do |id| # and back, the old placements gone
      sql("SELECT citus_move_shard_placement(#{id}, '127.0.0.1', #{b.port}, '127.0.0.1', #{a.port}, " \
          "shard_transfer_mode := 'force_logical')")
    end
    receive("mv7", 300)
    wait_for("every event done", bound: 180) do
      sql("SELECT count(*) FILTER (WHERE status = 'done') || ' ' || count(*) FROM webhook_inbox WHERE event_id LIKE 'mv%'") == "1200 1200"
    end
    expect(sql("SELECT max(attempts) FROM webhook_inbox WHERE event_id LIKE 'mv%'")).to eq("0")
    expect(sql("SELECT count(*) || ' ' || count(DISTINCT (source_scope, event_id)) FROM direct_runs WHERE event_id LIKE 'mv%'"))
      .to eq("1200 1200")
  ensure
    (pids || []).each { |pid| stop_process(pid) }
  end

  it "lets a stopped worker's events wait, none charged, and handles them once after its restart" do
    worker = cluster.workers.first
    log = File.join(cluster.coordinator.dir, "direct-restart.log")
    pids = [spawn_sidecar(log), spawn_sidecar(log)]
    receive("rs", 400)
    held = on_node("rs", worker.port)
    expect(held).to be > 50
    wait_for("the events handled", bound: 120) { states("rs") == "done 0 x400" }
    receive("down", 400)
    held = on_node("down", worker.port)
    # The scopes on the other worker: a statement naming only them is pruned to its shards.
    live = sql("SELECT string_agg(quote_literal('scope_' || i), ',') FROM generate_series(0, 49) i " \
               "JOIN pg_dist_shard_placement p ON p.shardid = get_shard_id_for_distribution_column('webhook_inbox', 'scope_' || i) " \
               "WHERE p.nodeport <> #{worker.port}")
    worker.stop
    expect { sql("SELECT count(*) FROM webhook_inbox") }.to raise_error(/./) # its shards are really gone
    wait_for("the running worker's events done", bound: 120) do
      sql("SELECT count(*) FROM webhook_inbox WHERE source_scope IN (#{live}) AND event_id LIKE 'down\\_%' " \
          "AND status = 'done'") == (400 - held).to_s
    end
    wait_for("the fallback logged", bound: 30) { File.read(log).include?("msg=citus_node_fallback") }
    sleep 1 # tried again meanwhile, through the coordinator too
    worker.start
    wait_for("every event done", bound: 180) { states("down") == "done 0 x400" }
    expect(runs("down")).to eq("400 400")
    expect(pids.map { |p| Process.waitpid(p, Process::WNOHANG) }).to eq([nil, nil]) # the sidecars carried on
  ensure
    (pids || []).each { |pid| stop_process(pid) }
  end
end
