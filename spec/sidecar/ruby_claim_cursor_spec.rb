# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"

# The Ruby worker's batch claim under a long-open snapshot (webhook_inbox_ruby_start_batch in
# db/functions/ruby_handlers.sql, issue 33): while a REPEATABLE READ transaction holds back
# VACUUM, the claim resumes from the session's cursor instead of the head of the pending index
# (webhook_inbox_outbox_claim_idx). What it may claim stays the same: due order, a retry run
# alone, a run that appears before the cursor, pause, exactly once. The examples claim in one
# session with the read from the head priced out (webhook_inbox.ruby_cursor's last head read
# "cost" 1,000,000 s), so every claim after the first reads from the cursor; runs are marked
# delivered directly (the handlers are not under test).
RSpec.describe "webhook_inbox_ruby_start_batch under a long-open snapshot", :sidecar do
  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  before do
    db.psql("TRUNCATE webhook_inbox_outbox, webhook_inbox_flow")
    @holder = open_snapshot(db.url, "webhook_inbox_outbox") # the snapshot VACUUM must keep rows for
    @worker = PG.connect(db.url)
  end

  after do
    @worker&.close
    @holder&.close
  end

  # Ruby runs due at base + i ms (base: an hour ago), created in that order.
  def runs(ids, at: "now() - interval '1 hour'", attempts: 0)
    values = ids.map.with_index { |id, i| "('#{id}', 'ruby', '{}', #{at} + #{i} * interval '1 ms', #{at} + #{i} * interval '1 ms', #{attempts})" }
    db.psql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, next_attempt_at, created_at, attempts) " \
            "VALUES #{values.join(', ')}")
  end

  # One claim in the worker's session, the read from the head priced out (the session's last
  # one "cost" 1,000,000 s; without a cursor yet, one before every run: the first claim reads
  # what the head would), unless head; returns the operation ids it charged (in order) and the
  # claim index entries its scans read. Its runs are then delivered.
  def claim(limit = 10, head: false)
    unless head
      @worker.exec("SELECT set_config('webhook_inbox.ruby_cursor', CASE WHEN c <> '' THEN split_part(c, ' ', 1) || ' ' || " \
                   "split_part(c, ' ', 2) ELSE '0 0' END || ' ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint " \
                   "|| ' 1000000000000', false) FROM coalesce(current_setting('webhook_inbox.ruby_cursor', true), '') c")
    end
    @worker.exec("BEGIN")
    before = entries_read
    ids = @worker.exec_params("SELECT operation_id FROM webhook_inbox_ruby_start_batch($1, 10, 3600000, 3600000)", [limit])
                 .column_values(0)
    read = entries_read - before
    @worker.exec("COMMIT")
    deliver(ids)
    [ids, read]
  end

  # The claim index entries this session's scans read and has not reported yet (reported at most
  # once a second, between transactions: within one transaction a difference is exact).
  def entries_read
    @worker.exec("SELECT pg_stat_get_xact_tuples_returned('webhook_inbox_outbox_claim_idx'::regclass)").getvalue(0, 0).to_i
  end

  def deliver(ids)
    return if ids.empty?

    db.psql("UPDATE webhook_inbox_outbox SET status = 'delivered', processed_at = now() " \
            "WHERE operation_id IN (#{ids.map { |i| "'#{i}'" }.join(', ')})")
  end

  it "reads from the cursor: a claim after 3,000 runs processed under the snapshot reads about a batch, the head all of them" do
    db.psql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, next_attempt_at, created_at) " \
            "SELECT 'r' || lpad(i::text, 5, '0'), 'ruby', '{}', now() - interval '1 hour' + i * interval '1 ms', " \
            "now() - interval '1 hour' + i * interval '1 ms' FROM generate_series(1, 3200) i")
    claimed = []
    reads = []
    30.times do
      ids, read = claim(100)
      claimed.concat(ids)
      reads << read
    end
    expect(claimed).to eq((1..3_000).map { |i| format("r%05d", i) }) # due order, each once
    expect(reads.drop(1).max).to be < 500, reads.inspect # from the cursor: the batch and a few entries around it
    @worker.exec("RESET webhook_inbox.ruby_cursor") # a new session: no cursor, the head
    expect(@worker.exec("SELECT current_setting('webhook_inbox.ruby_cursor', true)").getvalue(0, 0).to_s).to eq("")
    ids, read = claim(100, head: true)
    expect(ids).to eq((3_001..3_100).map { |i| format("r%05d", i) })
    expect(read).to be >= 3_000 # the dead entries the snapshot keeps, walked from the head
  end

  it "claims a run that appears before the cursor once the cursor's read comes up short, and a retry run alone" do
    runs((1..30).map { |i| "a#{i}" })
    expect(claim.first).to eq((1..10).map { |i| "a#{i}" })
    runs(["late"], at: "now() - interval '2 hours'") # due before everything claimed so far
    runs(["retry"], at: "now() - interval '50 minutes'", attempts: 1)
    expect(claim.first).to eq((11..20).map { |i| "a#{i}" }) # from the cursor: late is behind it
    expect(claim.first).to eq((21..30).map { |i| "a#{i}" }) # retry is next, and comes alone
    expect(claim.first).to eq(["retry"])
    expect(claim.first).to eq(["late"]) # the cursor's read came up short: the head for the rest
    expect(claim.first).to eq([])
    expect(db.int("SELECT count(*) FROM webhook_inbox_outbox WHERE status = 'delivered'")).to eq(32)
  end

  it "claims nothing while the destination ruby is paused, and resumes from the cursor" do
    runs((1..20).map { |i| "p#{i}" })
    expect(claim.first).to eq((1..10).map { |i| "p#{i}" })
    db.psql("INSERT INTO webhook_inbox_flow (kind, target, paused, changed_by) VALUES ('destination', 'ruby', true, 'spec')")
    expect(claim.first).to eq([])
    db.psql("DELETE FROM webhook_inbox_flow")
    expect(claim.first).to eq((11..20).map { |i| "p#{i}" })
  end
end
