# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# Receipts straight to the shard's node (Inbox citus_nodes, issue 30): each scope's receipts go
# to the worker holding its shard, where Citus runs the INSERT locally; a shard moved is
# followed, a node down refuses its shards' receipts (never an acknowledgement for a row not
# committed), and every acknowledged receipt is stored exactly once. Skipped with the reason
# when Citus is not installed.
RSpec.describe "Citus receipts straight to the shard's node" do
  include CitusClusterSpec

  before(:all) { migrate_citus! }

  let(:nodes) { cluster.workers.to_h { |w| ["127.0.0.1:#{w.port}", w.url] } }

  def inbox(**opts)
    WebhookInbox::Inbox.new(database_url: cluster.url, pool_size: 4, group_by_scope: true, citus_nodes: nodes,
                            connect_timeout: 2, statement_timeout: 5, **opts)
  end

  # The port of the worker holding scope's shard, from the coordinator's metadata.
  def port_of(scope)
    sql("SELECT p.nodeport FROM pg_dist_shard_placement p " \
        "WHERE p.shardid = get_shard_id_for_distribution_column('webhook_inbox', '#{scope}')").to_i
  end

  # "rows distinct" of the events with this prefix.
  def stored(prefix)
    sql("SELECT count(*) || ' ' || count(DISTINCT (source_scope, event_id)) FROM webhook_inbox " \
        "WHERE event_id LIKE '#{prefix}\\_%'")
  end

  # Sends keys ([scope, id]) from threads; returns the statuses by key (Symbols, in order).
  def send_all(box, keys, threads: 8)
    queue = Queue.new
    keys.each { |k| queue << k }
    got = Hash.new { |h, k| h[k] = [] }
    lock = Mutex.new
    Array.new(threads) do
      Thread.new do
        while (k = (queue.pop(true) rescue nil))
          st = box.insert(source_scope: k[0], event_id: k[1], event_type: "direct.one", payload: "{}").status
          lock.synchronize { got[k] << st }
        end
      end
    end.each(&:join)
    got
  end

  it "stores each receipt once on its shard's node, even when the map's answer is stale" do
    box = inbox
    keys = Array.new(300) { |i| ["dscope_#{i % 20}", "direct_#{i}"] }
    got = send_all(box, (keys + keys).shuffle(random: Random.new(30)))
    expect(got.values.map(&:sort).uniq).to eq([%i[accepted duplicate]]) # each key accepted once, then a duplicate
    expect(stored("direct")).to eq("300 300")
    expect(box.direct_counts).to eq(direct: 600, fallback: 0) # none through the coordinator
    expect(box.citus_node("dscope_3")).to eq("127.0.0.1:#{port_of('dscope_3')}")

    # A map that sends every scope to the wrong worker (as a stale answer would): Citus on that
    # worker forwards the INSERT to the shard's node; still stored once.
    swapped = cluster.workers.to_h { |w| ["127.0.0.1:#{w.port}", (cluster.workers - [w]).first.url] }
    wrong = WebhookInbox::Inbox.new(database_url: cluster.url, group_by_scope: true, citus_nodes: swapped)
    got = send_all(wrong, keys.first(40).map { |s, id| [s, "wrong_#{id}"] } * 2)
    expect(got.values.map(&:sort).uniq).to eq([%i[accepted duplicate]])
    expect(stored("wrong_direct")).to eq("40 40")
    expect(wrong.direct_counts[:fallback]).to eq(0)
  ensure
    box&.close
    wrong&.close
  end

  it "gives a forked child (a Puma worker) its own lookups, the parent's session untouched" do
    box = inbox
    expect(box.insert(source_scope: "fscope_0", event_id: "fork_0", payload: "{}").status).to eq(:accepted)
    router = box.instance_variable_get(:@router)
    lookup = router.instance_variable_get(:@conn)
    before = lookup.backend_pid
    child = fork do
      ok = box.insert(source_scope: "fscope_1", event_id: "fork_1", payload: "{}").status == :accepted &&
           box.direct_counts == { direct: 2, fallback: 0 } &&
           router.instance_variable_get(:@conn).backend_pid != before
      box.close
      exit!(ok ? 0 : 1)
    end
    Process.wait(child)
    expect($?.exitstatus).to eq(0) # the child stored its receipt straight on the node, over its own lookup
    expect(router.instance_variable_get(:@conn)).to equal(lookup)
    expect(lookup.exec("SELECT pg_backend_pid()").getvalue(0, 0).to_i).to eq(before) # the parent's session lives
    expect(box.insert(source_scope: "fscope_2", event_id: "fork_2", payload: "{}").status).to eq(:accepted)
    expect(box.direct_counts).to eq(direct: 2, fallback: 0)
    expect(stored("fork")).to eq("3 3")
  ensure
    box&.close
  end

  # Resident memory (kB) of the newest session of this gem on node.
  def session_rss(node)
    pid = node.psql("SELECT pid FROM pg_stat_activity WHERE application_name = 'webhook_inbox' " \
                    "AND backend_type = 'client backend' ORDER BY backend_start DESC LIMIT 1").strip
    File.read("/proc/#{pid}/status")[/VmRSS:\s+(\d+)/, 1].to_i
  end

  # kB the node's session grew by over 2,000 receipts of one scope, after 200.
  def growth(box, node, scope, tag)
    200.times { |i| box.insert(source_scope: scope, event_id: "#{tag}_warm_#{i}", payload: "{}") }
    before = session_rss(node)
    2000.times { |i| box.insert(source_scope: scope, event_id: "#{tag}_#{i}", payload: "{}") }
    session_rss(node) - before
  end

  it "plans each receipt on the node for its parameters, so the node's session does not grow with every receipt" do
    scope = "lscope_0"
    node = cluster.workers.find { |w| w.port == port_of(scope) }
    # The control: the same prepared INSERT on the node, its plan reused - Citus 13.2 plans and
    # caches the shard's statement again at every local execution and never frees it.
    plain = WebhookInbox::Inbox.new(database_url: node.url, pool_size: 1, group_commit: false)
    leaked = growth(plain, node, scope, "leak")
    plain.close
    box = inbox(pool_size: 1, group_commit: false)
    grown = growth(box, node, scope, "custom")
    RSpec.configuration.reporter.message("  citus direct: a node session grew #{leaked} kB over 2,000 receipts " \
                                         "with its plan reused, #{grown} kB with custom plans")
    expect(leaked).to be > 20_000 # the check can fail: this is what the direct path's sessions avoid
    expect(grown).to be < 10_000
    expect(box.direct_counts).to eq(direct: 2200, fallback: 0)
  ensure
    plain&.close
    box&.close
  end

  it "follows a shard moved while receiving: nothing lost, nothing stored twice" do
    box = inbox(citus_route_ttl: 0.5)
    scope = "mscope_1"
    from = cluster.workers.find { |w| w.port == port_of(scope) }
    to = (cluster.workers - [from]).first
    expect(box.citus_node(scope)).to eq("127.0.0.1:#{from.port}")
    acked = Queue.new
    stop = false
    receiving = Array.new(4) do |t|
      Thread.new do
        i = 0
        until stop
          key = ["mscope_#{i % 3}", "moved_#{t}_#{i}"]
          begin
            st = box.insert(source_scope: key[0], event_id: key[1], event_type: "direct.one", payload: "{}").status
            acked << [key, st]
          rescue WebhookInbox::StoreError
            sleep 0.05 # not acknowledged: a provider sends it again
            retry
          end
          i += 1
        end
      end
    end
    wait_for("receipts flowing", bound: 60) { acked.size > 200 }
    shard = sql("SELECT get_shard_id_for_distribution_column('webhook_inbox', '#{scope}')")
    sql("SELECT citus_move_shard_placement(#{shard}, '127.0.0.1', #{from.port}, '127.0.0.1', #{to.port}, " \
        "shard_transfer_mode := 'force_logical')")
    # The path follows the shard within the ttl (a lookup made just before the switch is kept that long).
    wait_for("the scope routed to its new node", bound: 5) { box.citus_node(scope) == "127.0.0.1:#{to.port}" }
    count = acked.size
    wait_for("receipts after the move", bound: 60) { acked.size > count + 200 }
    stop = true
    receiving.each(&:join)
    results = Array.new(acked.size) { acked.pop }
    expect(results.map(&:last).uniq).to eq([:accepted]) # each key sent once: accepted once
    expect(port_of(scope)).to eq(to.port)
    expect(stored("moved")).to eq("#{results.size} #{results.size}")
    stored_keys = sql("SELECT source_scope || '/' || event_id FROM webhook_inbox WHERE event_id LIKE 'moved\\_%'").split("\n")
    expect(stored_keys.sort).to eq(results.map { |k, _| k.join("/") }.sort)
    expect(box.direct_counts[:direct]).to eq(results.size)
  ensure
    stop = true
    box&.close
  end

  it "refuses the receipts of a node that is down (never acknowledged) and stores them once it is back" do
    box = inbox
    down = cluster.workers.first
    on_down = (0..200).map { |i| "nscope_#{i}" }.find { |s| port_of(s) == down.port }
    on_up = (0..200).map { |i| "nscope_#{i}" }.find { |s| port_of(s) != down.port }
    expect(box.insert(source_scope: on_down, event_id: "node_warm", payload: "{}").status).to eq(:accepted)
    down.stop
    begin
      expect { box.insert(source_scope: on_down, event_id: "node_1", payload: "{}") }
        .to raise_error(WebhookInbox::StoreError)
      expect(box.direct_counts[:fallback]).to eq(1) # tried through the coordinator too: refused there as well
      expect(box.insert(source_scope: on_up, event_id: "node_2", payload: "{}").status).to eq(:accepted)
    ensure
      down.start
    end
    wait_for("the node back", bound: 60) { (sql("SELECT count(*) FROM webhook_inbox") rescue nil) }
    expect(box.insert(source_scope: on_down, event_id: "node_1", payload: "{}").status).to eq(:accepted) # never stored before
    expect(stored("node")).to eq("3 3")
    expect(box.citus_node(on_down)).to eq("127.0.0.1:#{down.port}")
  ensure
    box&.close
  end
end
