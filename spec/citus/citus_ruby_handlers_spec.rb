# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# Ruby handlers' registration and retirement (db/009) on a real Citus cluster, where
# webhook_inbox_ruby_handlers is a reference table and the inbox is distributed: a second
# registration of the same pairs (ON CONFLICT on a reference table) and a retire that
# quarantines a handed event's run; the Ruby worker's steps (db/013: start, lock, finish).
# Skipped with the reason when Citus is not installed.
RSpec.describe "Ruby handler registration on Citus" do
  include CitusClusterSpec

  it "registers the same pairs twice (adding only) and retires a handler, audited, its run quarantined" do
    migrate_citus!
    pairs = %(SELECT webhook_inbox_ruby_register('[["t.x", "a"], ["t.x", "b"]]'))
    expect([sql(pairs), sql(pairs)]).to eq(%w[2 2])
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s1', 'e1', 't.x', '{}')")
    expect(sql("SELECT result FROM webhook_inbox_citus_dispatch_batch(10, 'wait', 10, 1000, 3600000, 60000)")).to eq("handed")
    expect(sql("SELECT removed || ' ' || runs_retired FROM webhook_inbox_ruby_retire('b', NULL, 'ops')")).to eq("1 1")
    expect(sql("SELECT string_agg(payload->>'handler' || ' ' || status, ', ' ORDER BY 1) FROM webhook_inbox_outbox"))
      .to eq("a pending, b quarantined")
    expect(sql("SELECT actor || ' ' || action || ' ' || count FROM webhook_inbox_actions")).to eq("ops retire_handler 1")
    expect(sql("SELECT string_agg(handler, ',') FROM webhook_inbox_ruby_handlers")).to eq("a")
  end

  it "runs a Ruby run through the worker's steps (start, lock, finish): the event done (settle's UPDATE refused before 013)" do
    migrate_citus!
    sql(%(SELECT webhook_inbox_ruby_register('[["u.x", "c"]]')))
    sql("UPDATE webhook_inbox_outbox SET next_attempt_at = now() + interval '1 day' WHERE status = 'pending'") # the other example's
    sql("UPDATE webhook_inbox SET next_attempt_at = now() + interval '1 day' WHERE status = 'pending'")
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s2', 'e2', 'u.x', '{}')")
    expect(sql("SELECT result FROM webhook_inbox_citus_dispatch_batch(10, 'wait', 10, 1000, 3600000, 60000)")).to eq("handed")
    op, attempt, exhausted = sql("SELECT operation_id || ' ' || attempt || ' ' || exhausted FROM webhook_inbox_ruby_start(10, 0, 0)").split
    expect([attempt, exhausted]).to eq(%w[1 false]), sql("SELECT string_agg(payload::text || ' ' || status || ' due ' || next_attempt_at, '; ') FROM webhook_inbox_outbox")
    expect(sql("BEGIN; SELECT event_type FROM webhook_inbox_ruby_lock('#{op}', 1); " \
               "SELECT webhook_inbox_ruby_finish('#{op}', 1, 'done', NULL, 1, 10, 0, 0); COMMIT;").lines.map(&:strip))
      .to eq(%w[u.x delivered])
    expect(sql("SELECT status FROM webhook_inbox WHERE event_id = 'e2'")).to eq("done")
  ensure # leave the other example's view of the tables as it was
    sql("DELETE FROM webhook_inbox_outbox WHERE source_scope = 's2'; " \
        "DELETE FROM webhook_inbox_ruby_handlers WHERE handler = 'c'; UPDATE webhook_inbox_outbox SET next_attempt_at = now()")
  end

  it "runs a batch over two scopes (shards) through db/016's batch steps: started together, locked, one retried, the others done" do
    migrate_citus!
    sql(%(SELECT webhook_inbox_ruby_register('[["v.x", "d"]]')))
    sql("UPDATE webhook_inbox_outbox SET next_attempt_at = now() + interval '1 day' WHERE status = 'pending'") # the others'
    sql("UPDATE webhook_inbox SET next_attempt_at = now() + interval '1 day' WHERE status = 'pending'")
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES " \
        "('s3', 'e3', 'v.x', '{}'), ('s4', 'e4', 'v.x', '{}'), ('s4', 'e5', 'v.x', '{}')")
    handed = Array.new(3) { sql("SELECT string_agg(result, ',') FROM webhook_inbox_citus_dispatch_batch(10, 'wait', 10, 1000, 3600000, 60000)") }
    expect(handed.join(",").split(",").reject(&:empty?)).to eq(%w[handed] * 3) # a scope per call
    started = sql("SELECT string_agg(operation_id || ':' || attempt || ':' || exhausted, ' ') " \
                  "FROM webhook_inbox_ruby_start_batch(10, 10, 60000, 3600000)").split.map { |s| s.split(":") }
    expect(started.map { |_, a, e| [a, e] }).to eq([%w[1 false]] * 3)
    ops = "ARRAY['#{started.map(&:first).join("','")}']"
    retry_op = sql("SELECT operation_id FROM webhook_inbox_outbox WHERE source_event_id = 'e4'")
    results = started.map { |op, _, _| op == retry_op ? "'retry'" : "'done'" }.join(", ")
    locked = sql("BEGIN; SELECT string_agg(event_id, ',') FROM webhook_inbox_ruby_lock_batch(#{ops}, ARRAY[1, 1, 1]); " \
                 "SELECT string_agg(coalesce(status, 'NULL'), ',') FROM webhook_inbox_ruby_finish_batch(#{ops}, ARRAY[1, 1, 1], " \
                 "ARRAY[#{results}], ARRAY['boom', 'boom', 'boom'], ARRAY[1, 1, 1]::float8[], 10, 60000, 3600000); COMMIT;")
    statuses = started.map { |op, _, _| op == retry_op ? "pending" : "delivered" }.join(",")
    expect(locked.lines.map(&:strip)).to eq(["e3,e4,e5", statuses]) # locked in the events' order
    expect(sql("SELECT string_agg(event_id || ' ' || status, ',' ORDER BY event_id) FROM webhook_inbox WHERE event_id IN ('e3', 'e4', 'e5')"))
      .to eq("e3 done,e4 pending,e5 done")
  ensure
    sql("DELETE FROM webhook_inbox_outbox WHERE source_scope IN ('s3', 's4'); " \
        "DELETE FROM webhook_inbox_ruby_handlers WHERE handler = 'd'; UPDATE webhook_inbox_outbox SET next_attempt_at = now()")
  end
end
