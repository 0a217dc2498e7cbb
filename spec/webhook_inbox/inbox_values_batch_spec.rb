# frozen_string_literal: true

require "spec_helper"
require_relative "../support/receiver_helpers"
require_relative "../support/pg_proxy"

# The VALUES batch (Connection.new's 4th argument, which group_by_scope sets for Citus): a
# group-commit batch of unordered rows as one multi-row INSERT ... VALUES instead of the
# arrays' INSERT ... SELECT FROM unnest. On one node it must store and answer exactly what
# the arrays form does; pg_stat_statements tells which statement ran.
RSpec.describe WebhookInbox::Inbox, "VALUES batches" do
  include ReceiverHelpers

  before(:all) do
    @pg = ThrowawayPostgres.new(settings: { "shared_preload_libraries" => "pg_stat_statements",
                                            "log_min_duration_statement" => "0" }) # the parses, by session
    ReceiverHelpers.apply_schema(@pg)
    @pg.psql("CREATE EXTENSION pg_stat_statements")
  end
  after(:all) { @pg&.destroy }

  def connection(values)
    WebhookInbox::Inbox::Connection.new(@pg.url, 5000, 5000, values)
  end

  # Every column a receipt sets, times relative to received_at (the statement's now()).
  def stored(scope)
    @pg.psql(<<~SQL).split("\n")
      SELECT concat_ws('|', event_id, event_type, status, payload::text, encode(raw_body, 'hex'), last_error,
                       request_headers::text, ordering_key, ordering_at, next_attempt_at - received_at,
                       processed_at - received_at, attempts, attempt_log::text)
        FROM webhook_inbox WHERE source_scope = '#{scope}' ORDER BY event_id
    SQL
  end

  # Batch statements since the last reset: "values" or "arrays", with calls and rows.
  def batch_statements
    @pg.psql("SELECT form || ' ' || sum(calls) || ' ' || sum(rows) FROM (SELECT calls, rows, " \
             "CASE WHEN query LIKE '%unnest%' THEN 'arrays' ELSE 'values' END AS form FROM pg_stat_statements " \
             "WHERE query LIKE 'INSERT INTO webhook_inbox%RETURNING source_scope, event_id') s GROUP BY form ORDER BY form").split("\n")
  end

  def rows(scope)
    [
      ["a", %({"id": "a", "n": 1.50, "s": "\u00e9\u4e2d"}), false, false, nil, %({"x-id": "a"})],
      ["old", %({"id": "old"}), false, false, nil, nil], # stored before: a duplicate
      ["form", "a=1&b=%00", true, false, nil, nil], # raw: raw_body, pending
      ["q", "{}", false, true, "unknown account", %({"x-id": "q"})], # quarantined with its reason
      ["a", %({"id": "a", "again": true}), false, false, nil, nil], # the same key again in the batch
      ["b", "[1, 2]", false, false, nil, nil]
    ].map { |id, payload, raw, quarantined, err, headers| [scope, id, "t.x", payload, raw, quarantined, err, headers] }
  end

  it "stores and answers a batch exactly as the arrays form, in one VALUES statement" do
    codes = { false => "arrays", true => "values" }.to_h do |values, tag|
      scope = unique_scope(tag)
      conn = connection(values)
      conn.insert(scope, "old", "t.x", %({"id": "old", "first": true}), false, false, nil, nil)
      @pg.psql("SELECT pg_stat_statements_reset()")
      answer = conn.insert_batch(rows(scope))
      expect(batch_statements).to eq(["#{tag} 1 4"]) # one statement, four rows inserted
      conn.close
      [tag, [answer, stored(scope)]]
    end
    expect(codes["values"]).to eq(codes["arrays"])
    expect(codes["values"][0]).to eq([1, 0, 3, 5, 0, 1]) # bit 0 inserted, bit 1 stored raw, bit 2 quarantined
    expect(codes["values"][1].size).to eq(5)
  end

  it "numbers the parameters of the largest VALUES batch (32 rows); a larger batch goes as arrays" do
    conn = connection(true)
    @pg.psql("SELECT pg_stat_statements_reset()")
    { 32 => unique_scope("v32"), 33 => unique_scope("v33") }.each do |n, scope|
      answer = conn.insert_batch(Array.new(n) { |i| [scope, "e#{i}", "t", %({"i": #{i}}), false, i == 7, nil, %({"h": "#{i}"})] })
      expect(answer).to eq(Array.new(n) { |i| i == 7 ? 5 : 1 })
      expect(@pg.psql("SELECT count(*) FILTER (WHERE payload->>'i' = substr(event_id, 2) AND request_headers->>'h' = payload->>'i') " \
                      "FROM webhook_inbox WHERE source_scope = '#{scope}'").chomp).to eq(n.to_s)
    end
    expect(batch_statements).to eq(["arrays 1 33", "values 1 32"])
  ensure
    conn&.close
  end

  # A row whose ordering key and time the extension read goes in the VALUES batch (the key and
  # time as parameters, no ordering function); one it leaves to the SQL functions (here a key
  # path through an array) sends the batch as arrays, where the derivation is planned once.
  it "takes rows whose ordering C read; a row left to the ordering functions keeps the arrays form" do
    conn = connection(true)
    body = ->(id, object) { %({"id": "#{id}", "created": 1700000000, "data": {"object": #{object}}}) }
    ordered = ["data.object.id", "created"]
    { "values" => ['{"id": "cus_1"}', '{"id": "cus_2"}'], "arrays" => ['{"id": "cus_1"}', '[{"id": "cus_2"}]'] }
      .each do |tag, (first, second)|
        scope = unique_scope(tag)
        @pg.psql("SELECT pg_stat_statements_reset()")
        answer = conn.insert_batch([[scope, "o1", "t", body.("o1", first), false, false, nil, nil, ordered],
                                    [scope, "o2", "t", body.("o2", second), false, false, nil, nil, ["data.object.0.id", nil]],
                                    [scope, "u1", "t", body.("u1", first), false, false, nil, nil]])
        expect(answer).to eq([1, 1, 1])
        expect(batch_statements).to eq(["#{tag} 1 3"])
        # o2: no member "0" in an object (decided in C: no key), or the array's element (SQL's key,
        # its time the receipt's)
        o2 = tag == "values" ? "o2=-=-=t" : "o2=cus_2=#{received(scope, 'o2')}=t"
        expect(@pg.psql("SELECT string_agg(concat_ws('=', event_id, coalesce(ordering_key, '-'), " \
                        "coalesce(extract(epoch FROM ordering_at)::bigint::text, '-'), " \
                        "next_attempt_at = least(received_at, ordering_at)), ',' ORDER BY event_id) " \
                        "FROM webhook_inbox WHERE source_scope = '#{scope}'").chomp)
          .to eq("o1=cus_1=1700000000=t,#{o2},u1=-=-=t")
      end
  ensure
    conn&.close
  end

  def received(scope, id)
    @pg.psql("SELECT extract(epoch FROM received_at)::bigint FROM webhook_inbox " \
             "WHERE source_scope = '#{scope}' AND event_id = '#{id}'").chomp
  end

  it "is what an Inbox with group_by_scope sends; the default sends arrays" do
    { false => "arrays", true => "values" }.each do |by_scope, tag|
      inbox = described_class.new(database_url: @pg.url, pool_size: 1, group_by_scope: by_scope)
      scope = unique_scope(tag)
      @pg.psql("SELECT pg_stat_statements_reset()")
      inbox.with_connection { |c| c.insert_batch([[scope, "x", "t", "{}", false, false, nil, nil], [scope, "y", "t", "{}", false, false, nil, nil]]) }
      expect(batch_statements).to eq(["#{tag} 1 2"])
    ensure
      inbox&.close
    end
  end

  # Prepared once per session and row count (Citus' coordinator then parses and plans it once,
  # not at every batch), and again when the server dropped it (a pooler's DISCARD ALL: 26000).
  it "prepares each VALUES batch size once per session, and again after the server dropped it" do
    proxy = PgProxy.new(@pg.port)
    conn = WebhookInbox::Inbox::Connection.new(@pg.tcp_url.sub("port=#{@pg.port}", "port=#{proxy.port}"), 5000, 5000, true)
    scope = unique_scope("prepared")
    batch = ->(*ids) { conn.insert_batch(ids.map { |id| [scope, id, "t", %({"id": "#{id}"}), false, false, nil, nil] }) }
    expect(batch.("a1", "a2", "a3")).to eq([1, 1, 1])
    expect(batch.("b1", "b2", "b3")).to eq([1, 1, 1])
    expect(batch.("c1", "c2")).to eq([1, 1])
    expect(batch.("a1", "d1", "d2")).to eq([0, 1, 1]) # a1: a duplicate
    pid = conn.backend_pid
    parses = -> { @pg.log_tail(1_000_000).scan(/\[#{pid}\] LOG:  duration: \S+ ms  parse wi_inbox_values_(\d+):/).flatten.tally }
    expect(parses.()).to eq("3" => 1, "2" => 1)
    proxy.inject("DISCARD ALL")
    expect(batch.("e1", "e2", "e3")).to eq([1, 1, 1])
    expect(conn.backend_pid).to eq(pid) # the same session, set up again
    expect(parses.()).to eq("3" => 2, "2" => 1)
    expect(@pg.psql("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox " \
                    "WHERE source_scope = '#{scope}' AND payload->>'id' = event_id").chomp)
      .to eq("a1,a2,a3,b1,b2,b3,c1,c2,d1,d2,e1,e2,e3")
  ensure
    conn&.close
    proxy&.close
  end
end
