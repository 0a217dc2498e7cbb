# frozen_string_literal: true

require "open3"
require "time"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# A held key never hides another scope's due work on Citus (issue 35). 300 due events of one
# key wait behind its first event (in backoff, or quarantined under a strict route); they are
# the oldest due rows. The coordinator is restarted while the sidecar's batch runs a slow
# handler (until a time it carries), so the sidecar enters careful mode, whose one-event claim
# (webhook_inbox_citus_claim) chooses its scope among the oldest due rows: an event of another
# scope received then is done within seconds, and careful mode ends by its deadline though
# nothing more is ever due. Skipped with the reason when Citus is not installed.
RSpec.describe "a held key on Citus through a coordinator restart" do
  include CitusClusterSpec

  let(:bin) { SidecarHelper.binary }
  let(:held) { 300 }

  before(:all) do
    next unless cluster

    migrate_citus!
    cluster.psql(<<~SQL)
      CREATE FUNCTION held_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          IF ev.payload ? 'slow_until' THEN PERFORM pg_sleep_until((ev.payload->>'slow_until')::timestamptz); END IF;
          RETURN 'ran';
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler, strict) VALUES
          ('held.backoff', 'held_handler', false), ('held.strict', 'held_handler', true),
          ('slow.one', 'held_handler', false), ('other.one', 'held_handler', false);
    SQL
  end

  # The key's first event in state first_status (due in an hour when pending), then `held`
  # later events of the key, due a minute ago: the oldest due rows of the inbox.
  def hold_key(type, first_status)
    sql("DELETE FROM webhook_inbox")
    sql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, attempts, next_attempt_at,
                                 ordering_key, ordering_at, received_at)
      SELECT 'held', 'k_' || i, '#{type}', '{}', CASE WHEN i = 0 THEN '#{first_status}' ELSE 'pending' END,
             CASE WHEN i = 0 THEN 1 ELSE 0 END,
             CASE WHEN i = 0 THEN now() + interval '1 hour' ELSE now() - interval '1 minute' END,
             'obj', now() - interval '1 hour' + i * interval '1 second', now() - interval '1 hour' + i * interval '1 second'
        FROM generate_series(0, #{held}) i
    SQL
  end

  def alive?(pid) = Process.waitpid(pid, Process::WNOHANG).nil?

  # Restarts the coordinator while the sidecar's batch runs the slow event; then an event of
  # another scope arrives. Returns [seconds until it was done, the sidecar's log]; the
  # sidecar's pid in @pid.
  def other_scope_after_restart
    slow_until = Time.now + 12
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
        "VALUES ('slow', 's1', 'slow.one', jsonb_build_object('slow_until', '#{slow_until.utc.iso8601(3)}'))")
    log = File.join(cluster.coordinator.dir, "held_#{SecureRandom.hex(3)}.log")
    # --citus-direct=false: the batch through the coordinator, so that its restart loses it (a
    # batch sent straight to its worker runs on through a coordinator restart)
    @pid = Process.spawn(bin, "run", "--database-url", cluster.url, "--concurrency", "1", "--poll-interval", "0.1s",
                        "--batch-size", "50", "--backoff-base", "100ms", "--backoff-cap", "200ms", "--log-level", "info",
                        "--citus-direct=false", out: log, err: log)
    wait_for("the slow handler running", bound: 60) do
      sql("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%webhook_inbox_citus_dispatch%' " \
          "AND now() - query_start > interval '0.5 seconds' AND pid <> pg_backend_pid()") != "0"
    end
    cluster.coordinator.stop
    sleep 1
    cluster.coordinator.start
    wait_for("careful mode after the lost batch", bound: 60) { File.read(log).include?("msg=careful_mode ") }
    # The lost batch is not charged (a shard's batch does not say which event ran): its slow
    # event, pending again, sleeps no more once its time has passed.
    sleep [slow_until - Time.now, 0].max
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('other', 'o1', 'other.one', '{}')")
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    begin
      wait_for("the other scope's event done", bound: 10) do
        sql("SELECT status FROM webhook_inbox WHERE source_scope = 'other'") == "done"
      end
    rescue RuntimeError
      nil
    end
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    [took, log]
  end

  it "runs another scope's event within seconds while 300 later events of a key wait out its first one's backoff" do
    hold_key("held.backoff", "pending")
    took, log = other_scope_after_restart
    expect(sql("SELECT status FROM webhook_inbox WHERE source_scope = 'other'")).to eq("done"), File.read(log)
    expect(took).to be < 5
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE source_scope = 'held' AND status = 'pending' AND attempts = 0"))
      .to eq(held.to_s) # the key's later events still wait for its first one
    # Nothing more the one-event claim may take: careful mode ends by its deadline.
    wait_for("careful mode ended by its deadline", bound: 45) { File.read(log).include?("msg=careful_mode_end") }
    expect(File.read(log)).to match(/msg=careful_mode_end .*reason=deadline/)
    expect(alive?(@pid)).to be(true)
    RSpec.configuration.reporter.message("  held key (backoff): the other scope's event done #{took.round(2)} s after it arrived")
  ensure
    stop_process(@pid) if @pid
  end

  it "runs another scope's event within seconds while 300 later events of a key wait behind its quarantined first one (strict route)" do
    hold_key("held.strict", "quarantined")
    took, log = other_scope_after_restart
    expect(sql("SELECT status FROM webhook_inbox WHERE source_scope = 'other'")).to eq("done"), File.read(log)
    expect(took).to be < 5
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE source_scope = 'held' AND status = 'pending'")).to eq(held.to_s)
    RSpec.configuration.reporter.message("  held key (strict, quarantined): the other scope's event done #{took.round(2)} s after it arrived")
  ensure
    stop_process(@pid) if @pid
  end
end
