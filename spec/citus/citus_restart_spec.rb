# frozen_string_literal: true

require "open3"
require "json"
require "net/http"
require "timeout"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../support/receiver_helpers"
require_relative "../sidecar/sidecar_helper"

# A Citus worker node restarted under load, then the operator's commands on the cluster.
# Receipts arrive from 8 threads (a refused one is sent again, as a provider does) while two
# sidecars process them; one worker's PostgreSQL is stopped and started again mid-run.
# Every acknowledged receipt is stored, every event's handler commits once, the sidecars
# carry on. Then stats, requeue, prune, `run --retain` and /metrics give the answers they
# give on one node. Skipped with the reason when Citus is not installed.
RSpec.describe "the inbox on Citus across a worker restart" do
  include CitusClusterSpec

  let(:events) { Integer(ENV.fetch("CITUS_RESTART_EVENTS", "1500")) }
  let(:scopes) { 50 }

  let(:bin) { SidecarHelper.binary }

  def cli(*args)
    out, st = Open3.capture2e(bin, *args, "--database-url", cluster.url)
    expect(st).to be_success, out
    out
  end

  def spawn_sidecar(log, *extra)
    Process.spawn(bin, "run", "--database-url", cluster.url, "--concurrency", "2", "--poll-interval", "0.1s",
                  "--backoff-base", "100ms", "--backoff-cap", "500ms", "--log-level", "warn", *extra, out: log, err: log)
  end

  def alive?(pid) = Process.waitpid(pid, Process::WNOHANG).nil?

  it "loses no acknowledged receipt and runs no handler twice when a worker restarts; stats, requeue, prune, retention and metrics answer" do
    cli("migrate", "--citus")
    cluster.psql(<<~SQL)
      SET citus.multi_shard_modify_mode TO sequential;
      CREATE TABLE citus_runs (source_scope text NOT NULL, event_id text NOT NULL);
      SELECT create_distributed_table('citus_runs', 'source_scope', colocate_with => 'webhook_inbox');
      CREATE FUNCTION citus_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          IF ev.payload ? 'bad' THEN RAISE EXCEPTION 'bad payload' USING ERRCODE = 'WIQ01'; END IF;
          INSERT INTO citus_runs VALUES (ev.source_scope, ev.event_id);
          RETURN 'ran';
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('test.*', 'citus_handler');
    SQL

    dir = cluster.coordinator.dir
    log = File.join(dir, "restart.log")
    pids = [spawn_sidecar(log), spawn_sidecar(log)]
    inbox = WebhookInbox::Inbox.new(database_url: cluster.url, pool_size: 8, group_by_scope: true)
    queue = Queue.new
    Array.new(events) { |i| ["scope_#{i % scopes}", "evt_#{i}"] }.each { |k| queue << k }
    refused = Queue.new
    acked = Array.new(8) do
      Thread.new do
        got = []
        while (k = (queue.pop(true) rescue nil))
          begin
            status = inbox.insert(source_scope: k[0], event_id: k[1], event_type: "test.one", payload: "{}").status
            got << k if %i[accepted duplicate].include?(status) # a 200 either way (a duplicate: sent again after a lost answer)
          rescue StandardError => e # not acknowledged: the provider sends it again
            refused << e.class
            sleep 0.05
            retry
          end
        end
        got
      end
    end

    worker = cluster.workers.first
    wait_for("a third of the receipts in", bound: 120) { queue.size < events * 2 / 3 }
    worker.stop
    expect { cluster.psql("SELECT count(*) FROM webhook_inbox") }.to raise_error(/./) # its shards are really gone
    sleep 2
    worker.start
    acked = acked.flat_map(&:value)
    expect(acked.size).to eq(events) # each acknowledged once (a refused one was sent again until it was)

    wait_for("every event done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == events.to_s }
    stored = sql("SELECT source_scope || '/' || event_id FROM webhook_inbox").split("\n")
    expect(stored.sort).to eq(acked.map { |k| k.join("/") }.sort) # nothing acknowledged lost, nothing stored twice
    expect(sql("SELECT count(*) || '|' || count(DISTINCT (source_scope, event_id)) FROM citus_runs")).to eq("#{events}|#{events}")
    expect(pids.map { |p| alive?(p) }).to eq([true, true]) # the sidecars carried on
    RSpec.configuration.reporter.message(
      "  citus restart: #{events} receipts acknowledged (#{refused.size} refused while the worker was down and sent again), " \
      "#{stored.size} stored, handler runs #{events}, attempts charged #{sql('SELECT sum(attempts) FROM webhook_inbox')}, " \
      "sidecars alive after the restart"
    )

    # stats: the same numbers as the table.
    stats = JSON.parse(cli("stats", "--json"))
    expect(stats).to include("pending" => 0, "quarantined" => 0, "done" => events, "waiting_for_route" => 0)

    # requeue: events quarantined by their handler, fixed, requeued, done.
    3.times { |i| inbox.insert(source_scope: "scope_bad", event_id: "bad_#{i}", event_type: "test.bad", payload: '{"bad": 1}') }
    wait_for("the bad events quarantined") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'quarantined'") == "3" }
    expect(JSON.parse(cli("stats", "--json"))).to include("quarantined" => 3)
    sql("UPDATE webhook_inbox SET payload = '{}' WHERE source_scope = 'scope_bad'")
    expect(cli("requeue", "--type", "test.bad", "--actor", "spec")).to include("requeued 3")
    wait_for("the requeued events done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == (events + 3).to_s }
    expect(sql("SELECT action || ' ' || count FROM webhook_inbox_actions WHERE actor = 'spec'")).to eq("requeue 3")

    # /metrics from a sidecar on the cluster.
    port = ReceiverHelpers.free_port
    pids << spawn_sidecar(log, "--metrics-listen", "127.0.0.1:#{port}")
    metrics = nil
    wait_for("metrics served", bound: 60) do
      metrics = Net::HTTP.get(URI("http://127.0.0.1:#{port}/metrics")) rescue nil # rubocop:disable Style/RescueModifier
      metrics&.include?("\nwebhook_inbox_stats_up 1\n") # the gauge, not its HELP line
    end
    expect(metrics).to include("webhook_inbox_events_pending 0", "webhook_inbox_events_quarantined 0")

    # prune: the done events of one scope made 10 days old are emptied, their keys kept.
    aged = sql("SELECT count(*) FROM webhook_inbox WHERE source_scope = 'scope_1'").to_i
    sql("UPDATE webhook_inbox SET received_at = now() - interval '10 days' WHERE source_scope IN ('scope_1', 'scope_2')")
    expect(cli("prune", "--older-than", "4d", "--scope", "scope_1", "--actor", "spec")).to start_with("pruned #{aged} ")
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE source_scope = 'scope_1' AND pruned_at IS NOT NULL AND payload IS NULL"))
      .to eq(aged.to_s)
    expect(inbox.insert(source_scope: "scope_1", event_id: "evt_1", event_type: "test.one", payload: "{}").status).to eq(:duplicate)

    # run --retain: a sidecar prunes the other aged scope on its own.
    pids << spawn_sidecar(log, "--retain", "4d", "--retain-interval", "1s")
    wait_for("retention ran", bound: 120) do
      sql("SELECT count(*) FROM webhook_inbox WHERE source_scope = 'scope_2' AND pruned_at IS NULL") == "0"
    end
    expect(File.read(log)).not_to include("0A000")
  ensure
    (pids || []).each { |pid| stop_process(pid) }
    inbox&.close
  end
end
