# frozen_string_literal: true

require "open3"
require "json"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# Pause, resume and rate limits (db/015) and per-object ordering (db/014) on a real Citus
# cluster (db/citus/004_flow: webhook_inbox_flow a reference table; citus/001's claim with the
# ordering filter; the core's outbox and Ruby claims with the pause checks, one scope at a time there). Every call is
# the one the sidecar, the deliverer or the Ruby worker makes on Citus. Skipped with the
# reason when Citus is not installed.
RSpec.describe "pause, rate limits and ordering on Citus" do
  include CitusClusterSpec

  before(:all) do
    migrate_citus!

    @cluster.psql(<<~SQL)
      CREATE FUNCTION flow_handler(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          IF ev.payload ? 'fail' THEN RAISE EXCEPTION 'bad payload' USING ERRCODE = 'WIQ01'; END IF;
          RETURN 'ran';
      END $$;
    SQL
  end

  def cli(*args)
    out, st = Open3.capture2e(SidecarHelper.binary, *args, "--database-url", @cluster.url)
    expect(st).to be_success, out
    out
  end

  # One sidecar transaction on Citus (one scope's due events): "event_id result" each, by
  # event id; nil when nothing was due.
  def dispatch
    got = sql("SELECT string_agg(event_id || ' ' || result, ', ' ORDER BY event_id) " \
              "FROM webhook_inbox_citus_dispatch_batch(10, 'ignore', 10, 0, 0, 60000)")
    got unless got.empty?
  end

  def insert(scope, id, type, payload = "{}", key: nil, at: nil)
    cols = key ? ", ordering_key, ordering_at, next_attempt_at" : ""
    vals = key ? ", '#{key}', '#{at}', '#{at}'" : ""
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload#{cols}) " \
        "VALUES ('#{scope}', '#{id}', '#{type}', '#{payload}'#{vals})")
  end

  it "pauses, throttles and resumes the event path, the deliverer and the Ruby worker; stats count what is held" do
    expect(sql("SELECT partmethod::text FROM pg_dist_partition WHERE logicalrelid = 'webhook_inbox_flow'::regclass")).to eq("n")
    sql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('p.*', 'flow_handler')")
    sql("SELECT webhook_inbox_pause('scope', 'sp', 'ops'), webhook_inbox_pause('route', 'p.*', 'ops')")
    insert("sp", "e_scope", "q.x")
    insert("sr", "e_route", "p.x")
    expect([dispatch, dispatch].sort).to eq(["e_route paused", "e_scope paused"])
    expect(dispatch).to be_nil # both held: nothing due
    flow = JSON.parse(cli("stats", "--json"))["flow"].to_h { |r| [r["target"], [r["paused"], r["pending"]]] }
    expect(flow).to eq("p.*" => [true, 1], "sp" => [true, 1]) # stats read the reference table with the inbox
    expect(sql("SELECT string_agg(event_id || ' ' || attempts || ' ' || (held_at IS NOT NULL), ', ' ORDER BY event_id) " \
               "FROM webhook_inbox WHERE source_scope IN ('sp', 'sr')"))
      .to eq("e_route 0 true, e_scope 0 true") # held, uncharged

    expect(sql("SELECT released FROM webhook_inbox_resume('scope', 'sp', NULL, 'ops')")).to eq("1")
    expect(dispatch).to eq("e_scope done")
    # At 0.01 events/s the first event takes the free slot, the next one waits 100 s for its own.
    insert("sr2", "e_route2", "p.x")
    expect(sql("SELECT released FROM webhook_inbox_resume('route', 'p.*', 0.01, 'ops')")).to eq("1")
    got = [dispatch, dispatch]
    expect(got.map { |r| r.split.last }.sort).to eq(%w[done throttled])
    throttled = got.find { |r| r.end_with?("throttled") }.split.first
    expect(sql("SELECT event_id FROM webhook_inbox WHERE status = 'pending' AND rate_slot_at > now() AND attempts = 0"))
      .to eq(throttled) # holds its slot, uncharged
    expect(dispatch).to be_nil
    expect(sql("SELECT released FROM webhook_inbox_resume('route', 'p.*', NULL, 'ops')")).to eq("1") # the limit lifted
    expect(dispatch).to eq("#{throttled} done")

    # The deliverer: a paused destination's effects are not leased and nothing is due.
    sql("SELECT webhook_inbox_emit('op_1', 'receipts', '{}'), webhook_inbox_pause('destination', 'receipts', 'ops')")
    claim = "SELECT count(*) FROM webhook_inbox_outbox_claim('receipts', 10, 'me', 60000, 5)"
    expect([sql(claim), sql("SELECT webhook_inbox_outbox_next_due(ARRAY['receipts']) IS NULL")]).to eq(%w[0 t])
    sql("SELECT webhook_inbox_resume('destination', 'receipts', NULL, 'ops')")
    expect([sql("SELECT webhook_inbox_outbox_next_due(ARRAY['receipts']) IS NULL"), sql(claim)]).to eq(%w[f 1])

    # The Ruby worker: no run starts (nor is claimed by a worker of before v13) while 'ruby' is paused.
    sql(%(SELECT webhook_inbox_ruby_register('[["r.x", "h"]]')))
    insert("sy", "e_ruby", "r.x")
    expect(dispatch).to eq("e_ruby handed")
    sql("SELECT webhook_inbox_pause('destination', 'ruby', 'ops')")
    expect(sql("SELECT count(*) FROM webhook_inbox_ruby_start(10, 0, 0)")).to eq("0")
    expect(sql("BEGIN; SELECT count(*) FROM webhook_inbox_ruby_claim(10); ROLLBACK;")).to eq("0")
    expect(sql("SELECT attempts FROM webhook_inbox_outbox WHERE source_scope = 'sy'")).to eq("0") # not charged
    sql("SELECT webhook_inbox_resume('destination', 'ruby', NULL, 'ops')")
    expect(sql("SELECT attempt FROM webhook_inbox_ruby_start(10, 0, 0)")).to eq("1")
    expect(sql("SELECT string_agg(action || ' ' || (filter->>'target'), ', ' ORDER BY id) FROM webhook_inbox_actions " \
               "WHERE action IN ('pause', 'resume')"))
      .to eq("pause sp, pause p.*, resume sp, resume p.*, resume p.*, pause receipts, resume receipts, pause ruby, resume ruby")
  end

  it "writes the SQL route's once-marker with its event's key when the type also has Ruby handlers, and prunes it with the event (db/013)" do
    sql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('m.x', 'flow_handler')")
    sql(%(SELECT webhook_inbox_ruby_register('[["m.x", "hm"]]')))
    insert("sm", "e_marker", "m.x")
    expect(dispatch).to eq("e_marker handed")
    expect(sql("SELECT name || ' ' || source_scope || ' ' || source_event_id FROM webhook_inbox_effects_received"))
      .to eq("sql:flow_handler sm e_marker")
    # Retention takes the marker with its event (prune.c's v13 forms, citus_prune on Citus).
    sql("UPDATE webhook_inbox SET status = 'done', received_at = now() - interval '10 days' WHERE event_id = 'e_marker'")
    expect(cli("prune", "--older-than", "4d", "--scope", "sm", "--actor", "spec")).to start_with("pruned 1 ")
    expect(sql("SELECT count(*) FROM webhook_inbox_effects_received WHERE source_scope = 'sm'")).to eq("0")
  end

  it "claims one event per ordering key, in order, and holds a key behind a quarantined event only under a strict route (db/014)" do
    sql("INSERT INTO webhook_inbox_routes (event_type, handler, strict) VALUES ('lax.*', 'flow_handler', false), " \
        "('strict.*', 'flow_handler', true)")
    fail = '{"fail": 1}'
    insert("so", "l1", "lax.created", fail, key: "obj_l", at: "2026-01-01 00:00:01+00")
    insert("so", "l2", "lax.updated", key: "obj_l", at: "2026-01-01 00:00:02+00")
    insert("so", "s2", "strict.updated", key: "obj_s", at: "2026-01-01 00:00:02+00")
    insert("so", "s1", "strict.created", fail, key: "obj_s", at: "2026-01-01 00:00:01+00")
    insert("so", "s3", "strict.updated", key: "obj_s", at: "2026-01-01 00:00:03+00")
    insert("so", "u1", "strict.other")
    # One scope: each call claims every due event of it that may run.
    expect(dispatch).to eq("l1 quarantined, s1 quarantined, u1 done") # the first of each key only
    expect(dispatch).to eq("l2 done") # lax: past its quarantined predecessor; strict: s2 held
    expect(dispatch).to be_nil
    sql("UPDATE webhook_inbox SET status = 'pending', payload = '{}', next_attempt_at = now() WHERE event_id = 's1'")
    expect([dispatch, dispatch, dispatch, dispatch]).to eq(["s1 done", "s2 done", "s3 done", nil]) # in event-time order
  end
end
