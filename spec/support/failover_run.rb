# frozen_string_literal: true

require "json"
require "open3"
require "securerandom"
require "fileutils"
require "webhook_inbox"
require "webhook_inbox/test_helpers"
require_relative "replicated_postgres"
require_relative "receiver_helpers" # PumaProcess

# FailoverRun - the primary fails hard under load: a primary and a synchronous standby on
# real streaming replication, the Rack Endpoint under Puma and sidecar processes all on a
# multi-host URL (target_session_attrs=read-write); senders post signed Stripe events and,
# like Stripe, retry each until it is answered 200; once a share of them is acknowledged the
# primary is stopped with -m immediate, the standby promoted and its
# synchronous_standby_names cleared. Then every acknowledged event must be on the new primary
# and its handler must have run exactly once. Used by spec/integration/failover_spec.rb
# (small) and bin/failover (any size).
class FailoverRun
  ROOT = File.expand_path("../..", __dir__)
  SIDECAR = File.join(ROOT, "lib/webhook_inbox/webhook-inbox-sidecar")
  SECRET = "whsec_failover_run_secret"
  SCOPE = "stripe:acct_failover:live"
  TYPE = "failover.counted"

  # The business table: one row per event, runs counts every committed handler run.
  HANDLER_SQL = <<~SQL
    CREATE TABLE IF NOT EXISTS failover_runs (
        event_id text PRIMARY KEY,
        runs     integer NOT NULL
    );
    COMMENT ON TABLE failover_runs IS 'Failover test: committed handler runs per event (exactly 1 each).';
    CREATE OR REPLACE FUNCTION failover_count_run(ev webhook_inbox) RETURNS text
    LANGUAGE sql AS $$
        INSERT INTO failover_runs AS r (event_id, runs) VALUES (ev.event_id, 1)
        ON CONFLICT (event_id) DO UPDATE SET runs = r.runs + 1
        RETURNING 'run ' || r.runs
    $$;
    INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('#{TYPE}', 'failover_count_run')
    ON CONFLICT (event_type) DO UPDATE SET handler = EXCLUDED.handler;
  SQL

  # sent/acknowledged/lost/doubled/unprocessed: distinct events. http_200 (duplicates among
  # them), http_503, http_other, transport_errors: HTTP attempts. Times in seconds from the
  # crash (the primary down): promoted (pg_ctl promote returned), sync_cleared (the new
  # primary's synchronous_standby_names reset: commits stop waiting), puma_recovered (first
  # 200 to a request sent after the crash; a duplicate needs no commit), puma_first_accepted
  # (first new row acknowledged), sidecar_recovered (first event done on the new primary);
  # drain: from the last acknowledgement until every acknowledged event was done.
  Report = Struct.new(:events, :senders, :sidecars, :sent, :acknowledged, :lost, :doubled, :unprocessed,
                      :http_200, :duplicates, :http_503, :http_other, :transport_errors, :acked_before_crash,
                      :promoted_s, :sync_cleared_s, :puma_recovered_s, :puma_first_accepted_s, :sidecar_recovered_s, :drain_s, :seconds,
                      :puma_restarted, :sidecars_restarted, keyword_init: true) do
    def ok?
      lost.zero? && doubled.zero? && unprocessed.zero? && acknowledged == sent && http_other.zero? &&
        !puma_restarted && !sidecars_restarted
    end
  end

  attr_reader :log_dir

  # crash_at: share of the events acknowledged before the primary is stopped.
  def initialize(events:, senders: 8, sidecars: 2, crash_at: 0.3, log_dir: nil)
    @events = events
    @senders = senders
    @sidecars = sidecars
    @crash_at = crash_at
    @log_dir = log_dir || Dir.mktmpdir("wi-failover-")
    @lock = Mutex.new
  end

  def run
    start
    report = load_and_fail_over
    stop
    report
  ensure
    stop
  end

  private

  def start
    @cluster = ReplicatedPostgres.new do |primary|
      out, st = Open3.capture2e(SIDECAR, "migrate", "--database-url", primary.url)
      raise "migrate failed: #{out}" unless st.success?

      primary.psql(HANDLER_SQL)
    end
    @url = @cluster.url
    @puma = PumaProcess.new(rackup: File.join(ROOT, "spec/fixtures/receiver/config.ru"), threads: "8:8",
                            log: File.join(@log_dir, "puma.log"),
                            env: { "WI_DATABASE_URL" => @url, "WI_SCOPE" => SCOPE, "WI_STRIPE_SECRET" => SECRET,
                                   "WI_POOL" => "8" }).start
    @sidecar_pids = Array.new(@sidecars) do |i|
      Process.spawn(SIDECAR, "run", "--database-url", @url, "--concurrency", "2", "--poll-interval", "200ms",
                    "--backoff-base", "200ms", "--backoff-cap", "2s",
                    out: File::NULL, err: [File.join(@log_dir, "sidecar-#{i}.log"), "a"])
    end
  end

  def stop
    (@sidecar_pids || []).each do |pid|
      Process.kill("TERM", pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
    @sidecar_pids = nil
    @puma&.stop
    @puma = nil
    @cluster&.destroy
    @cluster = nil
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def body_for(id, n)
    %({"id":"#{id}","object":"event","type":"#{TYPE}","data":{"object":{"n":#{n}}}})
  end

  # Posts one event until it is answered 200 (or give_up_at passes); counts every attempt.
  def deliver(id, n, give_up_at)
    body = body_for(id, n)
    until now > give_up_at
      sent_at = now
      begin
        status, _, text = @puma.post("/webhooks/stripe", body, WebhookInbox::TestHelpers.stripe_headers(body, secret: SECRET))
      rescue StandardError
        status = nil
      end
      @lock.synchronize do
        case status
        when 200
          @counts[:http_200] += 1
          @acked << id
          @last_ack = now
          answer = JSON.parse(text)["status"]
          @counts[:duplicate] += 1 if answer == "duplicate"
          if @crash_t && sent_at > @crash_t
            @first_ack_after_crash ||= now - @crash_t
            @first_accepted_after_crash ||= now - @crash_t if answer == "accepted"
          end
        when 503 then @counts[:http_503] += 1
        when nil then @counts[:transport_errors] += 1
        else @counts[:http_other] += 1
        end
      end
      return if status == 200

      sleep 0.1 # a sender's retry, compressed
    end
  end

  def load_and_fail_over
    t0 = now
    @counts = Hash.new(0)
    @acked = []
    queue = Queue.new
    ids = Array.new(@events) { |i| "evt_fo_#{i}_#{SecureRandom.hex(3)}" }
    ids.each_with_index { |id, i| queue << [id, i] }
    @senders.times { queue << nil }
    puma_pid = @puma.pid
    give_up_at = now + 120 + @events / 20.0
    threads = Array.new(@senders) do
      Thread.new do
        while (job = queue.pop)
          deliver(*job, give_up_at)
        end
      end
    end

    sleep 0.02 until @lock.synchronize { @acked.size } >= (@events * @crash_at).ceil || threads.none?(&:alive?)
    acked_before = @lock.synchronize { @acked.size }
    promoted = @cluster.fail_over!(clear_sync: false) do
      @crash_wall = Time.now.utc
      @lock.synchronize { @crash_t = now }
    end
    @cluster.clear_synchronous_standby_names
    cleared = now - @crash_t
    sidecar_recovered = wait_first_done_after_crash
    threads.each(&:join)
    drain = wait_drained

    report(ids, acked_before, [promoted, cleared], sidecar_recovered, drain, now - t0, puma_pid)
  end

  # Seconds from the crash to the first event done on the new primary, or nil.
  def wait_first_done_after_crash
    deadline = now + 60
    sql = "SELECT count(*) FROM webhook_inbox WHERE status = 'done' AND processed_at > " \
          "'#{@crash_wall.strftime('%F %T.%6N')}+00'"
    loop do
      return now - @crash_t if @cluster.current_primary.psql(sql).to_i.positive?
      return nil if now > deadline

      sleep 0.05
    end
  end

  def wait_drained
    start = @last_ack || now
    acked = @acked.size
    deadline = now + 120
    loop do
      done = @cluster.current_primary.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{SCOPE}' " \
                                           "AND status = 'done'").to_i
      return now - start if done >= acked
      return nil if now > deadline

      sleep 0.1
    end
  end

  def report(ids, acked_before, (promoted, cleared), sidecar_recovered, drain, seconds, puma_pid)
    db = @cluster.current_primary
    rows = db.psql("SELECT event_id, status FROM webhook_inbox WHERE source_scope = '#{SCOPE}'")
             .split("\n").to_h { |l| l.split("|", 2) }
    runs = db.psql("SELECT event_id, runs FROM failover_runs").split("\n").to_h { |l| l.split("|", 2) }
                 .transform_values(&:to_i)
    acked = @acked.uniq
    Report.new(events: @events, senders: @senders, sidecars: @sidecars, sent: ids.size, acknowledged: acked.size,
               lost: acked.count { |id| !rows.key?(id) },
               doubled: runs.count { |_, n| n > 1 },
               unprocessed: acked.count { |id| rows[id] != "done" || runs[id] != 1 },
               http_200: @counts[:http_200], duplicates: @counts[:duplicate], http_503: @counts[:http_503], http_other: @counts[:http_other],
               transport_errors: @counts[:transport_errors], acked_before_crash: acked_before,
               promoted_s: promoted.round(2), sync_cleared_s: cleared.round(2), puma_recovered_s: @first_ack_after_crash&.round(2),
               puma_first_accepted_s: @first_accepted_after_crash&.round(2),
               sidecar_recovered_s: sidecar_recovered&.round(2), drain_s: drain&.round(2), seconds: seconds.round(1),
               puma_restarted: @puma.pid != puma_pid || !alive?(puma_pid),
               sidecars_restarted: !@sidecar_pids.all? { |pid| alive?(pid) })
  end

  def alive?(pid)
    Process.waitpid(pid, Process::WNOHANG).nil?
  rescue Errno::ECHILD
    false
  end
end
