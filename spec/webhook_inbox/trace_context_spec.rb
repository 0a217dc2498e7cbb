# frozen_string_literal: true

require "spec_helper"
require_relative "../support/receiver_helpers"
require_relative "../support/forked"
require_relative "../support/in_memory_spans"

# Schema v30: the receipt's W3C trace context (trace_context) on the inbox and on the outbox.
# The native insert (one row, arrays batch, VALUES batch) and the Rails store keep a valid
# version-00 traceparent and store NULL for anything else, never refusing the event; an older
# schema without the column still takes receipts; an effect recorded by a handler inherits its
# event's context in SQL; the Receiver's webhook_inbox.receive span (a real OpenTelemetry SDK,
# in a forked child so this process never loads it) is the context stored.
RSpec.describe "trace_context (schema v30)" do
  include ReceiverHelpers

  VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
  MALFORMED = [
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", # upper case
    "00-00000000000000000000000000000000-b7ad6b7169203331-01", # zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", # zero span id
    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", # another version
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",  # short
    "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01", # separator
    "x" * 55,
    "00-#{'a' * 10_000}", # oversized
    ""
  ].freeze

  before(:all) do
    @pg = ThrowawayPostgres.new
    ReceiverHelpers.apply_schema(@pg)
  end
  after(:all) { @pg&.destroy }

  def traces(scope)
    @pg.psql("SELECT event_id || '=' || coalesce(trace_context, 'NULL') FROM webhook_inbox " \
             "WHERE source_scope = '#{scope}' ORDER BY event_id").split("\n").to_h { |l| l.split("=", 2) }
  end

  def stripe_env(body, secret)
    require "webhook_inbox/testing"
    headers = WebhookInbox::Testing::Signing.headers(:stripe, body, secret: secret)
    rack_request("/webhooks/stripe", body, headers.merge("Content-Type" => "application/json"))
  end

  def row(scope, id, trace)
    [scope, id, "t.x", %({"id": "#{id}"}), false, false, nil, nil, nil, trace]
  end

  [false, true].each do |values|
    it "keeps a valid traceparent and stores NULL for a malformed one (one row and a #{values ? 'VALUES' : 'arrays'} batch)" do
      conn = WebhookInbox::Inbox::Connection.new(@pg.url, 5000, 5000, values)
      scope = unique_scope
      expect(conn.insert(*row(scope, "one", VALID))).to eq(1)
      expect(conn.insert(*row(scope, "none", nil))).to eq(1)
      batch = MALFORMED.each_with_index.map { |t, i| row(scope, "bad#{i}", t) } << row(scope, "good", VALID)
      expect(conn.insert_batch(batch)).to all(eq(1))
      MALFORMED.each_with_index { |t, i| expect(conn.insert(*row(scope, "single_bad#{i}", t))).to eq(1) }
      conn.close

      stored = traces(scope)
      expect(stored.values_at("one", "good")).to eq([VALID, VALID])
      expect(stored.reject { |id, _| %w[one good].include?(id) }.values.uniq).to eq(["NULL"])
      expect(stored.size).to eq(3 + 2 * MALFORMED.size)
    end
  end

  it "stores through Inbox#insert and insert_all (trace:), and an ordered row keeps it too" do
    inbox = WebhookInbox::Inbox.new(database_url: @pg.url)
    scope = unique_scope
    inbox.insert(source_scope: scope, event_id: "a", payload: %({"id": "a", "created": 5}), trace: VALID,
                 ordering: ["data.object.id", "created"])
    inbox.insert_all([{ source_scope: scope, event_id: "b", payload: "{}", trace: VALID },
                      { source_scope: scope, event_id: "c", payload: "{}", trace: "nope" }])
    inbox.close
    expect(traces(scope)).to eq("a" => VALID, "b" => VALID, "c" => "NULL")
  end

  it "stores through the Rails store (ActiveRecordStore, transactional receipts) by the same rule" do
    require "active_record"
    model = Class.new(ActiveRecord::Base) do
      self.abstract_class = true
      def self.name = "TraceContextSpecRecord"
    end
    model.establish_connection(ReceiverHelpers.ar_url(@pg))
    store = WebhookInbox::ActiveRecordStore.new(model: model)
    scope = unique_scope
    store.insert(source_scope: scope, event_id: "a", payload: "{}", trace: VALID, ordering: ["data.object.id", nil])
    store.insert(source_scope: scope, event_id: "b", payload: "{}", trace: MALFORMED.first, ordering: ["data.object.id", nil])
    store.insert(source_scope: scope, event_id: "c", payload: "{}", trace: MALFORMED.last(2).first)
    expect(traces(scope)).to eq("a" => VALID, "b" => "NULL", "c" => "NULL")
  ensure
    model&.remove_connection
  end

  it "still takes receipts on a schema without the column (a gem upgraded before its migration)" do
    @pg.psql("CREATE DATABASE wi_v29")
    ReceiverHelpers.apply_schema(@pg, db: "wi_v29")
    @pg.psql("ALTER TABLE webhook_inbox DROP COLUMN trace_context", db: "wi_v29")
    url = @pg.url("wi_v29")
    [false, true].each do |values|
      conn = WebhookInbox::Inbox::Connection.new(url, 5000, 5000, values)
      scope = unique_scope
      expect(conn.insert(*row(scope, "one", VALID))).to eq(1)
      expect(conn.insert_batch([row(scope, "b1", VALID), row(scope, "b2", nil)])).to eq([1, 1])
      conn.close
      expect(@pg.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{scope}'", db: "wi_v29")).to eq("3\n")
    end
  end

  it "gives an effect its event's context in the SQL that records it (webhook_inbox_emit, Ruby runs)" do
    scope = unique_scope
    @pg.psql(<<~SQL)
      BEGIN;
      SELECT set_config('webhook_inbox.source_scope', '#{scope}', true), set_config('webhook_inbox.source_event_id', 'e1', true),
             set_config('webhook_inbox.trace_context', '#{VALID}', true);
      SELECT webhook_inbox_emit('op:traced', 'receipts', '{"n": 1}');
      SELECT set_config('webhook_inbox.trace_context', 'garbage', true);
      SELECT webhook_inbox_emit('op:garbage', 'receipts', '{"n": 2}');
      SELECT set_config('webhook_inbox.trace_context', '', true);
      SELECT webhook_inbox_emit('op:none', 'receipts', '{"n": 3}');
      COMMIT;
    SQL
    got = @pg.psql("SELECT operation_id || '=' || coalesce(trace_context, 'NULL') FROM webhook_inbox_outbox " \
                   "WHERE source_scope = '#{scope}' ORDER BY operation_id").split("\n")
    expect(got).to eq(["op:garbage=NULL", "op:none=NULL", "op:traced=#{VALID}"])
    expect(@pg.psql("SELECT webhook_inbox_trace_context('#{VALID}') IS NOT NULL, webhook_inbox_trace_context('x') IS NULL"))
      .to eq("t|t\n")
  end

  # The sidecar derives the handle span's id in C (sidecar/test/test_traceparent.c holds the same
  # two vectors); the dispatch hands this context to SQL handlers, so their effects are its children.
  it "derives the handler's context from the receipt's, event and attempt (the sidecar's handle span)" do
    derived = lambda do |scope, id, attempts, receipt = VALID|
      @pg.psql("SELECT coalesce(webhook_inbox_handle_trace_context(#{receipt ? "'#{receipt}'" : 'NULL'}, " \
               "'#{scope}', '#{id}', #{attempts}), 'NULL')").strip
    end
    expect(derived.call("stripe:acct_1:live", "evt_1", 2)).to eq("00-0af7651916cd43dd8448eb211c80319c-428e77060a7f45fe-01")
    expect(derived.call("s", "\u00e9", 0)).to eq("00-0af7651916cd43dd8448eb211c80319c-873418cc503b05ef-01")
    expect(derived.call("stripe:acct_1:live", "evt_1", 3)).not_to eq(derived.call("stripe:acct_1:live", "evt_1", 2))
    expect(derived.call("ab", "c", 0)).not_to eq(derived.call("a", "bc", 0))
    expect(derived.call("s", "e", 0, nil)).to eq("NULL")
  end

  it "stores the Receiver's webhook_inbox.receive span as the context, with the span's attributes (a real SDK)" do
    scope = unique_scope("stripe")
    url = @pg.url
    spans = Forked.call do
      finished = InMemorySpans.configure
      inbox = WebhookInbox::Inbox.new(database_url: url)
      receiver = WebhookInbox::Receiver.new(provider: :stripe, secrets: ["whsec_test"], source_scope: scope, inbox: inbox)
      body = %({"id":"evt_traced","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}})
      expect(receiver.receive(body, stripe_env(body, "whsec_test")).http_status).to eq(200)
      expect(receiver.receive(body, stripe_env(body, "whsec_wrong")).http_status).to eq(401)
      inbox.close
      finished.call
    end
    expect(spans.map { |s| s[:name] }).to eq(%w[webhook_inbox.receive webhook_inbox.receive])
    ok, refused = spans
    expect(ok[:kind]).to eq(:server)
    expect(ok[:attrs]).to include("webhook_inbox.provider" => "stripe", "webhook_inbox.source_scope" => scope,
                                  "webhook_inbox.event_id" => "evt_traced", "webhook_inbox.event_type" => "payment_intent.succeeded",
                                  "webhook_inbox.result" => "accepted", "http.response.status_code" => 200)
    expect(refused[:attrs]).to include("webhook_inbox.result" => "rejected", "http.response.status_code" => 401)
    expect(traces(scope)).to eq("evt_traced" => "00-#{ok[:trace]}-#{ok[:span]}-01")
    spans.each do |s| # never the payload, a header or the secret
      s[:attrs].each_value { |v| expect(v.to_s).not_to match(/pi_1|whsec|t=\d|v1=/) }
    end
  end
end
