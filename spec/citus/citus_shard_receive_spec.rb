# frozen_string_literal: true

require "open3"
require "pg"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# A receipt batch (two rows or more) on the node holding its shard, written into the shard's own
# table (db/citus/006's webhook_inbox_citus_receive, wi_store_set_shard_receive: what citus_nodes'
# node sessions call, issue 30): the rows and answers are those of the INSERT through Citus, Citus
# plans no statement for them on that node, the batch waits while a shard move ends (the shard's
# metadata lock), a node without the shard forwards through Citus, a role that cannot take that
# lock keeps the INSERT through Citus, a node's sessions stay bounded, and a database without the
# function keeps the other statements. A move under load: citus_direct_spec.rb's move example.
# Skipped with the reason when Citus is not installed.
RSpec.describe "Citus receipts written into the shard's table on its node" do
  include CitusClusterSpec

  before(:all) do
    migrate_citus!
    sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements") # citus_stat_statements reads it (every node)
  end

  def port_of(scope)
    sql("SELECT p.nodeport FROM pg_dist_shard_placement p " \
        "WHERE p.shardid = get_shard_id_for_distribution_column('webhook_inbox', '#{scope}')").to_i
  end

  def node_of(scope) = cluster.workers.find { |w| w.port == port_of(scope) }

  # A scope named prefix_N whose shard is on (or, on: false, not on) node.
  def scope_on(node, prefix, on: true)
    (0..500).map { |i| "#{prefix}_#{i}" }.find { |s| (port_of(s) == node.port) == on }
  end

  # Citus' distributed statements on node for scope (its partition key) since the last reset.
  def citus_calls(node, scope)
    node.psql("SELECT coalesce(sum(calls), 0) FROM citus_stat_statements WHERE partition_key = '#{scope}'").strip.to_i
  end

  def connection(url, shard_receive)
    WebhookInbox::Inbox::Connection.new(url, 5000, 5000, true, true, shard_receive)
  end

  # Connection#insert_batch rows: plain, ordered and traced, raw, quarantined, headers, and a key
  # twice. Their answers: accepted (1), + stored raw (2), + quarantined (4); 0 a duplicate.
  # (Values here, not constants: a constant in a describe block is global, and another spec's
  # TRACE replaced this one's.)
  def rows(scope, tag)
    ordered = %({"id": "evt_1", "created": 1700000000, "data": {"object": {"id": "cus_7"}}})
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    [[scope, "#{tag}_1", "r.one", "{}", false, false, nil, nil, nil, nil],
     [scope, "#{tag}_2", "r.two", ordered, false, false, nil, nil, ["data.object.id", "created"], trace],
     [scope, "#{tag}_3", "r.raw", "raw bytes", true, false, nil, nil, nil, nil],
     [scope, "#{tag}_4", "r.bad", "{}", false, true, "refused upstream", nil, nil, nil],
     [scope, "#{tag}_6", "r.headers", "{}", false, false, nil, %({"x-a": ["1"]}), nil, nil],
     [scope, "#{tag}_1", "r.one", "{}", false, false, nil, nil, nil, nil]]
  end
  def answers = [1, 1, 3, 5, 1, 0]
  def duplicates = [0, 0, 2, 4, 0, 0] # sent again: the same flags, none accepted

  # A payload jsonb refuses fails the batch statement: its rows go one by one (the one-row
  # statement), that one raw and quarantined.
  def refused(scope, tag) = [[scope, "#{tag}_5", "r.json", "{not json", false, false, nil, nil, nil, nil],
                              [scope, "#{tag}_7", "r.one", "{}", false, false, nil, nil, nil, nil]]

  # The stored columns of the rows named tag_N (event_id without its tag), as text.
  def stored(scope, tag)
    sql("SELECT string_agg(concat_ws('|', substr(event_id, #{tag.size + 2}), event_type, payload, raw_body, status, " \
        "last_error, processed_at IS NOT NULL, request_headers, ordering_key, ordering_at, " \
        "next_attempt_at = received_at, next_attempt_at = ordering_at, trace_context), E'\\n' ORDER BY event_id) " \
        "FROM webhook_inbox WHERE source_scope = '#{scope}' AND event_id LIKE '#{tag}\\_%'")
  end

  it "stores a batch on its shard's node as the INSERT through Citus does, with no Citus statement planned there" do
    node = cluster.workers.first
    scope = scope_on(node, "rscope")
    node.psql("SELECT citus_stat_statements_reset()")
    direct = connection(node.url, true)
    expect(direct.insert_batch(rows(scope, "shard"))).to eq(answers)
    expect(direct.insert_batch(rows(scope, "shard"))).to eq(duplicates) # ON CONFLICT decides
    expect(citus_calls(node, scope)).to eq(0) # the check can fail: the INSERT through Citus counts
    expect(direct.insert_batch([rows(scope, "one").first])).to eq([1])
    expect(citus_calls(node, scope)).to eq(1) # a row alone keeps the one-row statement (no saving there)

    through = connection(node.url, false)
    expect(through.insert_batch(rows(scope, "citus"))).to eq(answers)
    expect(citus_calls(node, scope)).to be > 0
    expect(stored(scope, "shard")).to eq(stored(scope, "citus"))
    expect(stored(scope, "shard").lines.size).to eq(5)
    expect(direct.insert_batch(refused(scope, "shard"))).to eq([7, 1])
    expect(through.insert_batch(refused(scope, "citus"))).to eq([7, 1])
    expect(stored(scope, "shard")).to eq(stored(scope, "citus"))
  ensure
    direct&.close
    through&.close
  end

  it "waits while a shard move ends (the shard's metadata lock held exclusively) before it writes the shard's table" do
    node = cluster.workers.first
    scope = scope_on(node, "lscope")
    shard = sql("SELECT get_shard_id_for_distribution_column('webhook_inbox', '#{scope}')")
    direct = connection(node.url, true)
    direct.connect
    pid = direct.backend_pid
    holder = PG.connect(node.url)
    holder.exec("BEGIN")
    holder.exec("SELECT lock_shard_metadata(7, ARRAY[#{shard}::bigint])") # ExclusiveLock, as the move's end takes it
    batch = Thread.new { direct.insert_batch(rows(scope, "lock")) }
    wait_for("the batch waiting for the shard's lock", bound: 30) do
      node.psql("SELECT wait_event_type FROM pg_stat_activity WHERE pid = #{pid}").strip == "Lock"
    end
    expect(stored(scope, "lock")).to eq("") # the check can fail: a batch that took no lock is stored by now
    holder.exec("COMMIT")
    expect(batch.value).to eq(answers)
    expect(stored(scope, "lock").lines.size).to eq(5)
  ensure
    holder&.close
    batch&.join
    direct&.close
  end

  it "forwards through Citus on a node that does not hold the shard, and for a role that cannot lock it" do
    node = cluster.workers.first
    scope = scope_on(node, "fscope", on: false)
    direct = connection(node.url, true)
    expect(direct.insert_batch(rows(scope, "away"))).to eq(answers)
    expect(direct.insert_batch(rows(scope, "away"))).to eq(duplicates)
    expect(direct.insert_batch([rows(scope, "away1").first])).to eq([1])
    expect(stored(scope, "away").lines.size).to eq(5)
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE event_id LIKE 'away%'")).to eq("6")

    # Not the table's owner: Citus refuses it lock_shard_metadata, so its sessions keep the INSERT
    # through Citus (the function's own INSERT ... SELECT there would cost more), and the function
    # called by it anyway leaves the shard's table alone. Statements inside functions counted too.
    sql("CREATE ROLE wi_receiver LOGIN; GRANT SELECT, INSERT ON webhook_inbox TO wi_receiver; " \
        "ALTER ROLE wi_receiver SET pg_stat_statements.track = 'all'")
    local = scope_on(node, "oscope")
    role_url = node.url.sub(/user=\S+/, "user=wi_receiver")
    calls = lambda do |like|
      node.psql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid " \
                "WHERE r.rolname = 'wi_receiver' AND s.query LIKE '#{like}'").to_i
    end
    other = connection(role_url, true)
    expect(other.insert_batch(rows(local, "role"))).to eq(answers)
    expect(calls.("%webhook_inbox_citus_receive%")).to eq(0)
    expect(calls.("INSERT INTO webhook_inbox (%")).to eq(1) # the VALUES batch, through Citus
    PG.connect(role_url) do |c|
      c.exec("SELECT * FROM webhook_inbox_citus_receive(ARRAY['#{local}'], ARRAY['role_9'], ARRAY['t'], ARRAY['{}'::jsonb], " \
             "'{NULL}', ARRAY['pending'], '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}')")
    end
    expect(calls.("%INSERT INTO webhook_inbox AS w %")).to eq(1) # the function's, through Citus
    expect(stored(local, "role").lines.size).to eq(6)
  ensure
    direct&.close
    other&.close
  end

  # Resident memory (kB) of the sessions of this gem on node.
  def sessions_rss(node)
    node.psql("SELECT pid FROM pg_stat_activity WHERE application_name = 'webhook_inbox' " \
              "AND backend_type = 'client backend'").split.sum { |pid| File.read("/proc/#{pid}/status")[/VmRSS:\s+(\d+)/, 1].to_i }
  end

  it "keeps a node's sessions bounded over 2,000 receipts in batches, of the node's own shard and of another's" do
    node = cluster.workers.first
    here = scope_on(node, "gscope")
    away = scope_on(node, "gscope", on: false)
    # Every scope sent to node (the other worker's too, as a stale map would): one session each.
    box = WebhookInbox::Inbox.new(database_url: cluster.url, pool_size: 1, group_by_scope: true,
                                  citus_nodes: cluster.workers.to_h { |w| ["127.0.0.1:#{w.port}", node.url] })
    pair = ->(i, tag) { [0, 1].map { |k| { source_scope: i.even? ? here : away, event_id: "#{tag}_#{i}_#{k}", payload: "{}" } } }
    100.times { |i| box.insert_all(pair.(i, "grow_warm")) } # batches of two rows of one scope
    before = sessions_rss(node)
    node.psql("SELECT citus_stat_statements_reset()")
    1000.times { |i| box.insert_all(pair.(i, "grow")) }
    grown = sessions_rss(node) - before
    RSpec.configuration.reporter.message("  citus shard receive: the node's sessions grew #{grown} kB over 2,000 receipts")
    expect(grown).to be < 10_000
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE event_id LIKE 'grow\\_%'")).to eq("2200")
    expect(box.direct_counts).to eq(direct: 1100, fallback: 0)
    expect(citus_calls(node, here)).to eq(0) # the Inbox's node pool wrote the shard's table: Citus planned nothing
  ensure
    box&.close
  end

  it "keeps the other statements where the function is missing (a layout before db/citus/006)" do
    node = cluster.workers.first
    scope = scope_on(node, "mscope")
    sql("DROP FUNCTION webhook_inbox_citus_receive(text[], text[], text[], jsonb[], bytea[], text[], text[], jsonb[], " \
        "text[], text[], text[], text[], text[])")
    direct = connection(node.url, true)
    expect(direct.insert_batch(rows(scope, "nofn"))).to eq(answers)
    expect(direct.insert_batch([rows(scope, "nofn1").first])).to eq([1])
    expect(stored(scope, "nofn").lines.size).to eq(5)
  ensure
    direct&.close
    migrate_citus!
  end
end
