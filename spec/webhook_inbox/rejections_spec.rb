# frozen_string_literal: true

require "spec_helper"
require "securerandom"
require_relative "../support/receiver_helpers"
require_relative "../support/forked"

# Issue 10 item 5: rejected deliveries counted in memory, flushed at most every few seconds,
# so a flood of forged requests never becomes a flood of writes.
RSpec.describe WebhookInbox::Rejections do
  let(:t) { Time.utc(2026, 1, 2, 3, 4, 35) }

  it "adds up per scope, reason and minute, and hands one batch to the flusher" do
    batches = []
    r = described_class.new(flush_interval: 3600)
    1000.times { r.add("stripe:a:live", :signature_mismatch, now: t) }
    r.add("stripe:a:live", :timestamp_out_of_tolerance, now: t + 60)
    r.add("stripe:a:live", :method_not_allowed, now: t) # crawlers: not counted
    r.flusher = ->(rows) { batches << rows }
    expect(r.flush).to eq(2)
    expect(batches).to eq([[["stripe:a:live", "signature_mismatch", Time.utc(2026, 1, 2, 3, 4), 1000],
                            ["stripe:a:live", "timestamp_out_of_tolerance", Time.utc(2026, 1, 2, 3, 5), 1]]])
    expect(r.flush).to eq(0) # nothing new
    expect(r.totals).to eq(%w[stripe:a:live].product(%i[signature_mismatch timestamp_out_of_tolerance]).zip([1000, 1]).to_h)
  end

  it "in a forked child flushes only its own counts: the parent's waiting ones are the parent's to flush" do
    r = described_class.new(flush_interval: 3600, flusher: ->(_rows) {})
    r.add("s", :signature_mismatch, now: t) # starts the parent's thread; waits for its flush
    child_rows = Forked.call do
      rows = nil
      r.flusher = ->(batch) { rows = batch }
      r.add("s", :no_secret, now: t)
      r.flush
      rows
    end
    expect(child_rows).to eq([["s", "no_secret", Time.utc(2026, 1, 2, 3, 4), 1]]) # it flushed the parent's too
  end

  it "keeps the counts of a failed flush for the next one" do
    r = described_class.new
    r.add("s", :signature_mismatch, now: t)
    r.flusher = ->(_rows) { raise "database down" }
    expect(r.flush).to eq(0)
    got = nil
    r.flusher = ->(rows) { got = rows }
    r.flush
    expect(got).to eq([["s", "signature_mismatch", Time.utc(2026, 1, 2, 3, 4), 1]])
  end

  it "bounds what waits between flushes (MAX_KEYS), counting the rest as dropped" do
    r = described_class.new
    (described_class::MAX_KEYS + 5).times { |i| r.add("tenant:a", :signature_mismatch, now: t + 60 * i) }
    expect(r.dropped).to eq(5)
  end

  # Issue 16 item 3: with a scope built from the request, 50,000 junk requests left 50,000
  # keys (19 -> 71 MiB) and a 12 MB line on the dashboard.
  it "names at most max_scopes scopes and counts every other one as (other): the totals still add up" do
    r = described_class.new
    cap = described_class::MAX_SCOPES
    50_000.times { |i| r.add("shopify:junk-#{i}:live", :signature_mismatch, now: t) }
    totals = r.totals
    expect(totals.size).to eq(cap + 1)
    expect(totals.values.sum).to eq(50_000)
    expect(totals[[described_class::OTHER_SCOPE, :signature_mismatch]]).to eq(50_000 - cap)
    r.add("shopify:junk-0:live", :signature_mismatch, now: t) # a named scope keeps its name
    expect(r.totals[["shopify:junk-0:live", :signature_mismatch]]).to eq(2)
    rows = nil
    r.flusher = ->(got) { rows = got }
    expect(r.flush).to eq(cap + 1)
    expect([rows.sum(&:last), r.dropped]).to eq([50_001, 0])
    expect(r.largest(3).map(&:first)).to eq([[described_class::OTHER_SCOPE, :signature_mismatch],
                                             ["shopify:junk-0:live", :signature_mismatch],
                                             ["shopify:junk-1:live", :signature_mismatch]])
  end

  it "takes max_scopes from the operator" do
    r = described_class.new
    r.max_scopes = 2
    %w[a b c d].each { |s| r.add(s, :signature_mismatch, now: t) }
    expect(r.totals.keys.map(&:first)).to eq(["a", "b", described_class::OTHER_SCOPE])
  end

  it "counts a scope the flush could not store (too long, NUL, not UTF-8) as (other), so the flush still lands" do
    pg = TestDatabase.cluster
    db = "rej_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{db}", db: "postgres")
    ReceiverHelpers.schema_files.each { |f| pg.psql(File.read(f), db: db) }
    r = described_class.new
    ["stripe:ok:live", "x:#{SecureRandom.hex(3000)}", "nul:\0:live", "bad:\xFF:live".b].each do |s|
      r.add(s, :signature_mismatch, now: Time.now)
    end
    sent = nil
    connection = Object.new
    connection.define_singleton_method(:exec_query) { |_sql, _name, binds| sent = binds.first }
    pool = Object.new
    pool.define_singleton_method(:with_connection) { |&blk| blk.call(connection) }
    r.flusher = described_class.active_record_flusher(-> { pool })
    expect(r.flush).to eq(2)
    pg.psql("SELECT webhook_inbox_record_rejections('#{sent.gsub("'", "''")}'::jsonb)", db: db)
    expect(pg.psql("SELECT source_scope, count FROM webhook_inbox_rejections ORDER BY 1", db: db).split("\n"))
      .to eq(["(other)|3", "stripe:ok:live|1"])
  end

  it "flushes from a background thread, not the request" do
    got = Queue.new
    r = described_class.new(flusher: ->(rows) { got << [rows, Thread.current.name] }, flush_interval: 0.05)
    r.add("s", :signature_mismatch, now: t)
    deadline = Time.now + 5
    sleep 0.01 while got.empty? && Time.now < deadline
    rows, thread = got.pop
    expect([rows.size, thread]).to eq([1, "webhook_inbox-rejections"])
  end

  it "the receiver counts a signature failure, with no body or headers" do
    inbox = Object.new
    rec = WebhookInbox::Receiver.new(provider: :stripe, secrets: ["whsec_x"], source_scope: "stripe:spec:#{rand(1e9)}", inbox: inbox)
    env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/json", "HTTP_STRIPE_SIGNATURE" => "t=1,v1=00" }
    expect(rec.receive(%({"id":"evt_1"}), env).http_status).to eq(401)
    counted = WebhookInbox.rejections.totals.select { |(s, _), _| s == rec.source_scope }
    expect(counted.size).to eq(1)
    expect(WebhookInbox::Receiver::UNAUTHORIZED).to include(counted.keys.first.last)
  end
end
