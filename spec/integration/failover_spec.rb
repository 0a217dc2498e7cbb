# frozen_string_literal: true

require "spec_helper"
require "json"
require "open3"
require "webhook_inbox/test_helpers"
require_relative "../support/failover_run"

# PostgreSQL failover on real streaming replication (ReplicatedPostgres: a primary and a
# synchronous hot standby), with the Rack Endpoint under Puma and sidecars on a multi-host
# URL (target_session_attrs=read-write). The long version is bin/failover --events N.
RSpec.describe "Failover to a synchronous standby" do
  root = FailoverRun::ROOT

  it "bin/failover: the primary stopped hard under load loses nothing acknowledged, runs no handler twice, " \
     "and Puma and the sidecars recover without a restart" do
    out, status = Open3.capture2e(File.join(root, "bin/failover"), "--events", "1200", "--senders", "8",
                                  "--sidecars", "2", "--json")
    report = JSON.parse(out.lines.last.to_s) rescue raise("bin/failover printed no report: #{out}")
    expect(status).to be_success, out
    expect(report).to include("sent" => 1200, "acknowledged" => 1200, "lost" => 0, "doubled" => 0,
                              "unprocessed" => 0, "http_other" => 0, "puma_restarted" => false,
                              "sidecars_restarted" => false, "ok" => true)
    # The crash came under load: events were acknowledged on both sides of it.
    expect(report["acked_before_crash"]).to be_between(1, 1199)
    expect(report.values_at("puma_recovered_s", "puma_first_accepted_s", "sidecar_recovered_s", "drain_s")).to all(be_a(Numeric))
  end

  describe "a promoted primary that still names a synchronous standby (every commit waits forever)" do
    include ReceiverHelpers

    SYNC_SECRET = "whsec_failover_sync_secret"

    before(:all) do
      @cluster = ReplicatedPostgres.new do |primary|
        out, st = Open3.capture2e(FailoverRun::SIDECAR, "migrate", "--database-url", primary.url)
        raise "migrate failed: #{out}" unless st.success?
      end
      @scope = "stripe:acct_syncwait:live"
      # Deadline of one wait: statement_timeout + connect_timeout = 2 s.
      @puma = PumaProcess.new(rackup: File.join(root, "spec/fixtures/receiver/config.ru"), threads: "4:4",
                              env: { "WI_DATABASE_URL" => @cluster.url, "WI_SCOPE" => @scope, "WI_STRIPE_SECRET" => SYNC_SECRET,
                                     "WI_POOL" => "4", "WI_CONNECT_TIMEOUT" => "1", "WI_STATEMENT_TIMEOUT" => "1" }).start
    end
    after(:all) do
      @puma&.stop
      @cluster&.destroy
    end

    def deliver(id)
      body = %({"id":"#{id}","object":"event","type":"charge.succeeded","data":{"object":{"n":1}}})
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      status, headers, text = @puma.post("/webhooks/stripe", body, WebhookInbox::TestHelpers.stripe_headers(body, secret: SYNC_SECRET))
      [status, headers["retry-after"], JSON.parse(text)["status"], Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0]
    end

    def rows(id)
      @cluster.current_primary.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{@scope}' AND event_id = '#{id}'").to_i
    end

    it "answers 503 + Retry-After within the receiver's deadline; the row is committed locally and the " \
       "sender's retry is answered duplicate once the setting is cleared: nothing lost, nothing doubled" do
      expect(deliver("evt_sync_0").first(3)).to eq([200, nil, "accepted"])
      puma_pid = @puma.pid
      @cluster.fail_over!(clear_sync: false)

      status, retry_after, answer, seconds = deliver("evt_sync_1")
      expect([status, retry_after, answer]).to eq([503, "5", "unavailable"])
      expect(seconds).to be < 3.5 # the 2 s deadline (+ one reconnect to the new primary), not forever
      # The commit is in the new primary's WAL, waiting for a standby that does not exist;
      # the receiver gave up on it, the server did not (nothing cancels that wait but the setting).
      waiting = @cluster.standby.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").to_i
      expect(waiting).to eq(1)

      # The sender's retry waits behind that commit (same key): answered 503 again, in time.
      status, _, _, seconds = deliver("evt_sync_1")
      expect(status).to eq(503)
      expect(seconds).to be < 3.5

      @cluster.clear_synchronous_standby_names
      expect(deliver("evt_sync_1").first(3)).to eq([200, nil, "duplicate"]) # it was committed all along
      expect(rows("evt_sync_1")).to eq(1)
      expect(deliver("evt_sync_2").first(3)).to eq([200, nil, "accepted"])
      expect(rows("evt_sync_0")).to eq(1) # acknowledged before the failover, on the standby since
      expect(@puma.pid).to eq(puma_pid)
    end
  end
end
