# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# A handler that fails on Citus: the failure is charged (attempts + 1, last_error, backoff,
# an attempt_log entry) and the event quarantined at the last attempt, through the shard
# dispatch the sidecar pushes down to the worker and through the coordinator's. Citus
# refuses a STABLE clock in a CASE of an UPDATE, so db/citus/001 charges with the time and
# the new status in variables. Skipped with the reason when Citus is not installed.
RSpec.describe "a failing handler on Citus" do
  include CitusClusterSpec

  before(:all) do
    migrate_citus!

    @cluster.psql(<<~SQL)
      CREATE FUNCTION failing_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          IF ev.payload ? 'boom' THEN RAISE EXCEPTION 'card network down'; END IF;
          IF ev.payload ? 'flaky' AND ev.attempts = 0 THEN RAISE EXCEPTION 'first try fails'; END IF;
          RETURN 'ran';
      END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('fail.*', 'failing_handler');
    SQL
  end

  def receive(prefix, count, payload)
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
        "SELECT 'scope_' || (i % 20), '#{prefix}_' || i, 'fail.one', '#{payload}' FROM generate_series(1, #{count}) i")
  end

  def sidecar_once(*extra)
    # bounded: an event whose failure cannot be charged stays due, and --once would not end
    out, st = Open3.capture2e("timeout", "120", SidecarHelper.binary, "run", "--once", "--database-url", cluster.url, "--concurrency", "2",
                              "--batch-size", "20", "--log-events=false", "--log-level", "warn", *extra)
    expect(st).to be_success, out
    out
  end

  # "status attempts has_error log_entries" of the events with this prefix, with a count each.
  def states(prefix)
    sql("SELECT string_agg(s || ' x' || n, ', ' ORDER BY s) FROM (SELECT status || ' ' || attempts || ' ' || " \
        "(last_error IS NOT NULL) || ' ' || coalesce(jsonb_array_length(attempt_log), 0) AS s, count(*) AS n " \
        "FROM webhook_inbox WHERE event_id LIKE '#{prefix}\\_%' GROUP BY 1) x")
  end

  it "charges a failure on the worker holding the shard, with backoff, and runs the event again when due" do
    receive("flaky", 60, '{"flaky": true}')
    out = sidecar_once("--backoff-base", "1ms", "--backoff-cap", "1ms")
    expect(out).not_to include("batch_failed") # the shard's one statement, not the redo
    expect(sql("SELECT count(*) FILTER (WHERE status = 'done') || '|' || count(*) FILTER (WHERE attempts = 1) " \
               "FROM webhook_inbox WHERE event_id LIKE 'flaky\\_%'")).to eq("60|60") # charged once each, run again (due after 1 ms), done
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE event_id LIKE 'flaky\\_%' AND jsonb_array_length(attempt_log) = 2 " \
               "AND attempt_log -> 0 ->> 'result' = 'retry' AND attempt_log -> 0 ->> 'detail' = 'P0001: first try fails' " \
               "AND attempt_log -> 1 ->> 'result' = 'done'")).to eq("60")
  end

  it "quarantines at the last attempt, the error and every attempt recorded" do
    receive("boom", 40, '{"boom": true}')
    3.times { expect(sidecar_once("--max-attempts", "3", "--backoff-base", "1ms", "--backoff-cap", "1ms")).not_to include("batch_failed") }
    expect(states("boom")).to eq("quarantined 3 true 3 x40")
    expect(sql("SELECT count(*) FROM webhook_inbox WHERE event_id LIKE 'boom\\_%' AND processed_at IS NOT NULL " \
               "AND last_error = 'P0001: card network down' AND attempt_log -> 2 ->> 'result' = 'quarantined'")).to eq("40")
  end

  it "charges a failure through the coordinator's dispatch too (one scope, inside a transaction block)" do
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('coord', 'coord_1', 'fail.one', '{\"boom\": true}')")
    got = sql("BEGIN; SELECT string_agg(event_id || ' ' || result, ',') FROM webhook_inbox_citus_dispatch_batch(10, 'ignore', 2, 0, 0, 60000) " \
              "WHERE event_id LIKE 'coord\\_%'; COMMIT;")
    expect(got).to eq("coord_1 retry")
    expect(states("coord")).to eq("pending 1 true 1 x1")
  end
end
