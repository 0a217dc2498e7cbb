# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# The sidecar's batches on Citus run on the worker that holds their shard: one call of
# webhook_inbox_citus_dispatch_shard() per batch, pushed down by Citus (db/citus/001), so the
# claim, the handlers and the done marks are statements local to that node. A handler records
# the port of the server it runs on: the worker's when pushed down, none (a Unix socket) on
# the coordinator; and the lock_timeout it runs under (the sidecar's --lock-timeout, which
# the coordinator session does not carry to the worker). Skipped with the reason when Citus is not installed (CI).
RSpec.describe "the sidecar's batches on Citus" do
  include CitusClusterSpec

  before(:all) do
    migrate_citus!

    @cluster.psql(<<~SQL)
      SET citus.multi_shard_modify_mode TO sequential;
      CREATE TABLE delegate_runs (source_scope text NOT NULL, event_id text NOT NULL, port integer, lock_timeout text);
      SELECT create_distributed_table('delegate_runs', 'source_scope', colocate_with => 'webhook_inbox');
      CREATE FUNCTION delegate_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO delegate_runs VALUES (ev.source_scope, ev.event_id, inet_server_port(), current_setting('lock_timeout'));
        RETURN 'ran';
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('delegate.*', 'delegate_handler');
    SQL
  end

  def receive(prefix, count, scopes: 50)
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
        "SELECT 'scope_' || (i % #{scopes}), '#{prefix}_' || i, 'delegate.one', '{}' FROM generate_series(1, #{count}) i")
  end

  # The receipt examples' rows are still pending (no sidecar runs there): removed, so that a
  # later example's claim of "the due rows of one scope" meets only its own events.
  def forget_scopes(*scopes)
    sql("DELETE FROM webhook_inbox WHERE source_scope IN (#{scopes.map { |s| "'#{s}'" }.join(", ")})")
  end

  # Runs of events with this prefix: "rows|distinct events|on their shard's worker".
  def runs(prefix)
    sql("SELECT count(*) || '|' || count(DISTINCT (r.source_scope, r.event_id)) || '|' || count(*) FILTER (WHERE r.port = " \
        "(SELECT p.nodeport FROM pg_dist_shard_placement p " \
        "  WHERE p.shardid = get_shard_id_for_distribution_column('webhook_inbox', r.source_scope))) " \
        "FROM delegate_runs r WHERE r.event_id LIKE '#{prefix}\\_%'")
  end

  # `run --once` of the sidecar at batch 20 (its batches pushed down to the workers); its output.
  def run_once!(concurrency: 2)
    out, st = Open3.capture2e(SidecarHelper.binary, "run", "--once", "--database-url", cluster.url, "--concurrency",
                              concurrency.to_s, "--batch-size", "20", "--log-events=false", "--log-level", "warn")
    expect(st).to be_success, out
    out
  end

  it "claims and runs each batch on the worker holding its shard, every event once, every shard visited" do
    receive("d", 600)
    out = run_once!
    expect(sql("SELECT count(*) FILTER (WHERE status = 'done') || '|' || count(*) FROM webhook_inbox WHERE event_id LIKE 'd\\_%'"))
      .to eq("600|600")
    expect(runs("d")).to eq("600|600|600") # each handler once, each on the node of its event's shard
    expect(sql("SELECT DISTINCT lock_timeout FROM delegate_runs WHERE event_id LIKE 'd\\_%'")).to eq("500ms")
    expect(out).not_to include("batch_failed")
  end

  # Issue 30: the shard's batch on the worker is the core batch dispatch (one node's
  # webhook_inbox_dispatch_batch after its claim), so a route's batch handler takes a run of
  # events in one call there, as on one node (before, each event went through the row handler).
  it "calls a route's batch handler once per run of events on the worker holding the shard, each event once, done with its log" do
    sql(<<~SQL)
      SET citus.multi_shard_modify_mode TO sequential;
      CREATE TABLE delegate_batches (source_scope text NOT NULL, events integer, port integer);
      SELECT create_distributed_table('delegate_batches', 'source_scope', colocate_with => 'webhook_inbox');
      CREATE FUNCTION delegate_batch_handler(evs webhook_inbox[]) RETURNS text[] LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO delegate_runs SELECT e.source_scope, e.event_id, inet_server_port(), current_setting('lock_timeout') FROM unnest(evs) e;
        INSERT INTO delegate_batches VALUES (evs[1].source_scope, cardinality(evs), inet_server_port());
        RETURN array_fill('ran in a batch'::text, ARRAY[cardinality(evs)]);
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler, batch_handler) VALUES ('delegateb.*', 'delegate_handler', 'delegate_batch_handler');
    SQL
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
        "SELECT 'scope_' || (i % 10), 'b_' || i, 'delegateb.one', '{}' FROM generate_series(1, 300) i")
    run_once!
    expect(sql("SELECT count(*) FILTER (WHERE status = 'done' AND outcome = 'ran in a batch' " \
               "AND attempt_log -> -1 ->> 'result' = 'done') || '|' || count(*) FROM webhook_inbox WHERE event_id LIKE 'b\\_%'"))
      .to eq("300|300")
    expect(runs("b")).to eq("300|300|300") # each event once, on its shard's worker
    # every event through the batch handler, in calls of more than one event (10 scopes, batches of up to 20)
    expect(sql("SELECT sum(events) || '|' || (max(events) > 1) || '|' || (count(*) < 300) FROM delegate_batches")).to eq("300|true|true")
  end

  # The worker's batch reads the pause and rate rules and the once-markers from its own copies
  # of those reference tables (webhook_inbox_batch_clear_from): a rule or marker written on the
  # coordinator must hold there as it does through Citus.
  it "holds paused scopes and routes and runs a marked event's route no second time in the worker's batch" do
    sql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('delegateh.*', 'delegate_handler')")
    sql("SELECT webhook_inbox_pause('scope', 'hold_s', 'ops'), webhook_inbox_pause('route', 'delegateh.*', 'ops')")
    sql("INSERT INTO webhook_inbox_effects_received (operation_id, name) " \
        "VALUES (webhook_inbox_handler_operation_id('mark_s', 'h_m1', 'sql:delegate_handler'), 'ran_before')")
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES " \
        "('hold_s', 'h_s1', 'delegate.one', '{}'), ('hold_s', 'h_s2', 'delegate.one', '{}'), " \
        "('free_s', 'h_r1', 'delegateh.one', '{}'), ('free_s', 'h_f1', 'delegate.one', '{}'), " \
        "('mark_s', 'h_m1', 'delegate.one', '{}'), ('mark_s', 'h_m2', 'delegate.one', '{}')")
    run_once!
    expect(sql("SELECT string_agg(event_id || ' ' || status || ' ' || (held_at IS NOT NULL) || ' ' || coalesce(outcome, '-'), ', ' " \
               "ORDER BY event_id) FROM webhook_inbox WHERE event_id LIKE 'h\\_%'"))
      .to eq("h_f1 done false ran, h_m1 done false SQL route delegate_handler already ran for this event, h_m2 done false ran, " \
             "h_r1 pending true -, h_s1 pending true -, h_s2 pending true -")
    expect(runs("h")).to eq("2|2|2") # h_f1 and h_m2, on their shards' workers; the marked h_m1 not again
  ensure
    sql("SELECT webhook_inbox_resume('scope', 'hold_s', NULL, 'ops'), webhook_inbox_resume('route', 'delegateh.*', NULL, 'ops')")
    sql("DELETE FROM webhook_inbox WHERE event_id LIKE 'h\\_%'")
  end

  it "claims through the coordinator when the call is not pushed down (inside a transaction block): one scope" do
    receive("t", 40, scopes: 2)
    key = sql("SELECT webhook_inbox_citus_shard_keys() LIMIT 1")
    got = sql("BEGIN; SELECT count(*) || '|' || count(DISTINCT source_scope) || '|' || bool_and(result = 'done') " \
              "FROM webhook_inbox_citus_dispatch_shard('#{key}', '500ms', 100, 'ignore', 10, 1000, 60000, 1000); COMMIT;")
    expect(got).to eq("20|1|true") # webhook_inbox_citus_dispatch_batch: the due rows of one scope
    expect(runs("t")).to eq("20|20|0") # run from the coordinator
  end

  # The sidecar's call for a shard of a worker without Citus metadata is not pushed down: it
  # runs on the coordinator, where the shard is not a local table, and takes
  # webhook_inbox_dispatch_shard's fallback (webhook_inbox_citus_dispatch_batch through the
  # coordinator: the due rows of one scope, of whichever shard).
  it "claims through the coordinator for a worker without Citus metadata, the other worker's batches still pushed down" do
    worker = cluster.workers.first
    receive("m", 200)
    # the node keeps its copy of the metadata (its shards' triggers use it); the coordinator no
    # longer counts it as a node with metadata, so Citus pushes no call down to it
    sql("SELECT stop_metadata_sync_to_node('127.0.0.1', #{worker.port}, clear_metadata := false)")
    run_once!(concurrency: 1)
    expect(sql("SELECT count(*) FILTER (WHERE status = 'done') FROM webhook_inbox WHERE event_id LIKE 'm\\_%'")).to eq("200")
    expect(runs("m")).to match(/\A200\|200\|\d+\z/) # each handler once
    # "events on the worker without metadata|of them run on the coordinator|the other worker's run on it"
    expect(sql("SELECT count(*) FILTER (WHERE node = #{worker.port}) || '|' || count(*) FILTER (WHERE node = #{worker.port} AND port IS NULL) " \
               "|| '|' || (count(*) FILTER (WHERE node <> #{worker.port} AND port = node) > 0) FROM (SELECT r.port, (SELECT p.nodeport " \
               "FROM pg_dist_shard_placement p WHERE p.shardid = get_shard_id_for_distribution_column('webhook_inbox', r.source_scope)) AS node " \
               "FROM delegate_runs r WHERE r.event_id LIKE 'm\\_%') x"))
      .to match(/\A(\d+)\|\1\|true\z/)
    expect(Integer(sql("SELECT count(*) FROM delegate_runs r WHERE r.event_id LIKE 'm\\_%' AND (SELECT p.nodeport FROM pg_dist_shard_placement p " \
                       "WHERE p.shardid = get_shard_id_for_distribution_column('webhook_inbox', r.source_scope)) = #{worker.port}")))
      .to be_positive # the worker without metadata had events
  ensure
    if worker
      sql("SELECT start_metadata_sync_to_node('127.0.0.1', #{worker.port})")
      # Citus created the functions on the node again, with new OIDs: the routes' regprocs there
      # name the old ones until migrate writes the routes again by name (the dispatch reads the
      # names, v29: citus_nodes_spec.rb; docs/capacity.md)
      migrate_citus!
      expect(worker.psql("SELECT count(*) FROM webhook_inbox_routes r JOIN pg_proc p ON p.oid = r.handler").strip)
        .to eq(sql("SELECT count(*) FROM webhook_inbox_routes"))
    end
  end

  it "takes up the shards of a split while it runs (the keys loaded again when idle)" do
    bin = SidecarHelper.binary
    log = File.join(cluster.coordinator.dir, "delegate_split.log")
    pid = Process.spawn(bin, "run", "--database-url", cluster.url, "--concurrency", "1", "--poll-interval", "0.1s",
                        "--log-level", "warn", out: log, err: log)
    receive("before_split", 50)
    wait_for("the first events done") { sql("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'") == "0" }
    shard, low, high = sql("SELECT shardid, shardminvalue, shardmaxvalue FROM pg_dist_shard " \
                           "WHERE logicalrelid = 'webhook_inbox'::regclass ORDER BY shardminvalue::bigint LIMIT 1").split("|")
    node = sql("SELECT nodeid FROM pg_dist_node WHERE groupid <> 0 ORDER BY nodeid LIMIT 1")
    sql("SELECT citus_split_shard_by_split_points(#{shard}, ARRAY['#{(Integer(low) + Integer(high)) / 2}'], " \
        "ARRAY[#{node}, #{node}], shard_transfer_mode := 'block_writes')")
    receive("after_split", 500, scopes: 500) # about 8 in each half of the split shard
    halves = sql("SELECT count(*) FROM webhook_inbox w WHERE w.event_id LIKE 'after\\_split\\_%' AND " \
                 "get_shard_id_for_distribution_column('webhook_inbox', w.source_scope) > #{shard} AND " \
                 "get_shard_id_for_distribution_column('webhook_inbox', w.source_scope) IN " \
                 "(SELECT s.shardid FROM pg_dist_shard s WHERE s.logicalrelid = 'webhook_inbox'::regclass " \
                 " AND s.shardminvalue::bigint >= #{low} AND s.shardmaxvalue::bigint <= #{high})")
    expect(Integer(halves)).to be > 0
    wait_for("every event done, those of both halves too") do
      sql("SELECT count(*) FROM webhook_inbox WHERE status <> 'done'") == "0"
    end
    expect(runs("after_split")).to eq("500|500|500")
  ensure
    if pid
      Process.kill(:TERM, pid)
      Process.wait(pid)
    end
  end

  it "gives one key per shard, each hashing into its own shard" do
    expect(sql("SELECT count(*) || '|' || count(DISTINCT get_shard_id_for_distribution_column('webhook_inbox', k)) " \
               "FROM webhook_inbox_citus_shard_keys() k"))
      .to eq("#{sql("SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'webhook_inbox'::regclass")}|" \
             "#{sql("SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'webhook_inbox'::regclass")}")
  end

  it "routes a one-row receipt straight to its shard (INSERT ... VALUES; v14's INSERT ... SELECT went through the coordinator)" do
    sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT citus_stat_statements_reset()")
    inbox = WebhookInbox::Inbox.new(database_url: cluster.url)
    inbox.insert(source_scope: "route_1", event_id: "r1", event_type: "delegate.x", payload: '{"id":"r1"}')
    inbox.insert(source_scope: "route_2", event_id: "r2", event_type: "delegate.x", payload: '{"id":"r2","data":{"object":{"id":"o"}}}',
                 ordering: ["data.object.id", nil])
    expect(sql("SELECT string_agg(executor || ' ' || coalesce(partition_key, '-') || ' ' || calls, ',' ORDER BY partition_key) " \
               "FROM citus_stat_statements WHERE query LIKE 'INSERT INTO webhook_inbox %'")).to eq("adaptive route_1 1,adaptive route_2 1")
    expect(sql("SELECT count(*) FILTER (WHERE ordering_key IS NOT NULL) || '/' || count(*) FROM webhook_inbox WHERE event_id IN ('r1', 'r2')")).to eq("1/2")
  ensure
    inbox&.close
    forget_scopes("route_1", "route_2")
  end

  it "routes a group-commit batch of one scope straight to its shard (multi-row VALUES; the arrays' INSERT ... SELECT went through the coordinator)" do
    sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT citus_stat_statements_reset()")
    inbox = WebhookInbox::Inbox.new(database_url: cluster.url, pool_size: 2, group_by_scope: true)
    batch = ->(scope, n) { Array.new(n) { |i| [scope, "#{scope}_#{i}", "delegate.x", %({"i": #{i}}), false, false, nil, nil] } }
    codes = inbox.with_connection { |c| [c.insert_batch(batch.("batch_1", 3)), c.insert_batch(batch.("batch_2", 5) + batch.("batch_2", 1))] }
    expect(codes).to eq([[1, 1, 1], [1, 1, 1, 1, 1, 0]]) # the last row repeats the first key: a duplicate
    # the leader's batch of concurrent receipts (group_by_scope: one scope a batch)
    Array.new(16) { |t| Thread.new { 5.times { |i| inbox.insert(source_scope: "batch_3", event_id: "c_#{t}_#{i}", event_type: "delegate.x", payload: "{}") } } }.each(&:join)
    expect(sql("SELECT string_agg(DISTINCT executor || ' ' || coalesce(partition_key, '-'), ',') " \
               "FROM citus_stat_statements WHERE query LIKE 'INSERT INTO webhook_inbox %RETURNING source_scope, event_id'"))
      .to match(/\Aadaptive batch_1,adaptive batch_2(,adaptive batch_3)?\z/) # never insert-select through the coordinator
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE source_scope IN ('batch_1', 'batch_2', 'batch_3')")).to eq("#{3 + 5 + 80}")
  ensure
    inbox&.close
    forget_scopes("batch_1", "batch_2", "batch_3")
  end
end
