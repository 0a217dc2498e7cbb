# frozen_string_literal: true

require "open3"
require "timeout"
require "active_record"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../support/fake_receipt_api"
require_relative "../support/receiver_helpers"
require_relative "../sidecar/sidecar_helper"
require "webhook_inbox/handlers/worker"

# The outbox and Ruby handlers on a real Citus cluster (db/citus/002: the outbox distributed
# by source_scope with the inbox, effects received a reference table). Every event of one type
# runs a SQL route that emits an effect (delivered by two sidecars' deliverers to an API
# with idempotency keys) and a Ruby handler (the app's worker, in its own processes) that
# writes a business table co-located with the inbox. A Ruby worker is killed (-9) while its
# handler runs. Each event: the route once, the effect sent and made once, the handler's
# write committed once. Skipped with the reason when Citus is not installed.
RSpec.describe "effects and Ruby handlers on Citus" do
  include CitusClusterSpec

  let(:events) { Integer(ENV.fetch("CITUS_EFFECT_EVENTS", "300")) }
  let(:scopes) { 50 }

  before(:all) do
    @api = FakeReceiptApi.new
  end
  after(:all) { @api&.stop }

  let(:api) { @api }
  let(:bin) { SidecarHelper.binary }

  def spawn_sidecar(log)
    Process.spawn(bin, "run", "--database-url", cluster.url, "--concurrency", "2", "--poll-interval", "0.1s",
                  "--destination", "receipts=#{api.url}/receipts", "--log-level", "warn", out: log, err: log)
  end

  # The app's Ruby worker in a process of its own (as `webhook-inbox-sidecar ruby` runs it).
  # Its handler records the event in citus_ledger; an event whose payload names a file
  # creates it and sleeps, so the spec can kill the worker inside the handler.
  def spawn_ruby_worker(log)
    url = ReceiverHelpers.ar_url(cluster.coordinator)
    fork do
      $stdout.reopen(log, "a")
      $stderr.reopen(log, "a")
      ActiveRecord::Base.establish_connection(url)
      WebhookInbox::Handlers.registry.clear
      WebhookInbox.subscribe("test.both", as: :citus_ledger) do |e|
        c = ActiveRecord::Base.connection
        c.exec_insert("INSERT INTO citus_ledger (source_scope, event_id) VALUES ($1, $2)", "ledger", [e.scope, e.id])
        if (file = e.dig("file"))
          File.write(file, Process.pid.to_s)
          sleep 30
        end
      end
      exit!(WebhookInbox::Handlers::Worker.new(concurrency: 2, poll_interval: 0.1, backoff_base_ms: 100,
                                               backoff_cap_ms: 200).run)
    end
  end

  it "runs the SQL route, delivers its effect and runs the Ruby handler once per event, through a Ruby worker's kill -9" do
    out, st = Open3.capture2e(bin, "migrate", "--database-url", cluster.url)
    expect(st).to be_success, out
    # An effect emitted before the conversion, outside any handler: kept, with scope ''.
    sql("SELECT webhook_inbox_emit('before:1', 'receipts', '{\"n\": 1}')")
    out, st = Open3.capture2e(bin, "migrate", "--citus", "--database-url", cluster.url)
    expect(st).to be_success, out
    expect(sql("SELECT logicalrelid::text || ':' || partmethod::text || ':' || coalesce(column_to_column_name(logicalrelid, partkey), '') " \
               "|| ':' || (colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox'::regclass)) " \
               "FROM pg_dist_partition WHERE logicalrelid::text ~ '^webhook_inbox(_outbox|_effects_received)?$' ORDER BY 1").split("\n"))
      .to eq(%w[webhook_inbox:h:source_scope:true webhook_inbox_effects_received:n::false webhook_inbox_outbox:h:source_scope:true])
    expect(sql("SELECT source_scope || '|' || status FROM webhook_inbox_outbox WHERE operation_id = 'before:1'")).to eq("|pending")

    cluster.psql(<<~SQL)
      SET citus.multi_shard_modify_mode TO sequential;
      CREATE TABLE citus_ledger (source_scope text NOT NULL, event_id text NOT NULL, at timestamptz NOT NULL DEFAULT now());
      SELECT create_distributed_table('citus_ledger', 'source_scope', colocate_with => 'webhook_inbox');
      CREATE FUNCTION citus_emit(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          PERFORM webhook_inbox_emit('receipt:' || ev.source_scope || ':' || ev.event_id, 'receipts',
                                     jsonb_build_object('event', ev.event_id));
          RETURN 'emitted';
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('test.both', 'citus_emit');
    SQL

    dir = cluster.coordinator.dir
    log = File.join(dir, "effects.log")
    pids = []
    file = File.join(dir, "ruby_handler_running")
    inbox = WebhookInbox::Inbox.new(database_url: cluster.url, pool_size: 8, group_by_scope: true)
    pids << (killed = spawn_ruby_worker(log))
    # Registered before the first dispatch: else the route alone would do the event.
    wait_for("the Ruby handler registered", bound: 60) { sql("SELECT count(*) FROM webhook_inbox_ruby_handlers") == "1" }
    inbox.insert(source_scope: "scope_slow", event_id: "slow_r", event_type: "test.both", payload: JSON.generate(file: file))
    pids << spawn_sidecar(log) << spawn_sidecar(log)
    wait_for("the slow Ruby handler running", bound: 60) { File.exist?(file) }
    File.delete(file)
    Process.kill(:KILL, pids.delete(killed))
    Process.wait(killed)
    sql("UPDATE webhook_inbox SET payload = '{}' WHERE event_id = 'slow_r'") # its redo does not sleep
    pids << spawn_ruby_worker(log)

    ids = Array.new(events) { |i| ["scope_#{i % scopes}", "evt_#{i}"] }
    receipts = (ids + ids.each_slice(10).map(&:first)).map do |scope, id|
      inbox.insert(source_scope: scope, event_id: id, event_type: "test.both", payload: "{}").status
    end
    expect(receipts.tally).to eq(accepted: events, duplicate: events / 10)

    total = events + 1
    wait_for("every event done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == total.to_s }
    wait_for("every effect delivered") { sql("SELECT count(*) FROM webhook_inbox_outbox WHERE destination = 'receipts' AND status = 'delivered'") == (total + 1).to_s }

    keys = ids.map { |s, e| "receipt:#{s}:#{e}" } + ["receipt:scope_slow:slow_r", "before:1"]
    expect(api.effects.keys.sort).to eq(keys.sort) # each effect made once by the API...
    expect(api.effects.values.uniq).to eq([1])
    expect(api.requests.size).to eq(keys.size) # ...and sent once (no lease ran out)
    expect(sql("SELECT count(*) || '|' || count(DISTINCT (source_scope, event_id)) FROM citus_ledger")).to eq("#{total}|#{total}")
    expect(sql("SELECT count(*) FROM citus_ledger WHERE event_id = 'slow_r'")).to eq("1") # the killed run rolled back
    expect(sql("SELECT count(*) || '|' || count(*) FILTER (WHERE status = 'delivered') FROM webhook_inbox_outbox " \
               "WHERE destination = 'ruby'")).to eq("#{total}|#{total}")
    expect(sql("SELECT count(*) FROM webhook_inbox_effects_received WHERE name = 'sql:citus_emit'")).to eq(total.to_s) # the route once each
    expect(File.read(log)).not_to match(/0A000|XX000|round_failed/)
    RSpec.configuration.reporter.message(
      "  citus effects: #{events} events over #{scopes} scopes + slow_r (Ruby worker killed in its handler): " \
      "receipts #{receipts.tally}, effects made #{api.effects.size} from #{api.requests.size} requests, " \
      "Ruby handler writes #{total}, routes run #{total}"
    )
  ensure
    (pids || []).each { |pid| stop_process(pid) }
    inbox&.close
  end
end
