# frozen_string_literal: true

require "spec_helper"
require "json"
require "securerandom"
require "digest"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"
require_relative "../support/schema_statements_connection"

# Per-object ordering at receipt (db/014): the endpoint's ordering spec travels with the
# insert and ordering_key / ordering_at are read from the stored payload (by ordering.c, or by
# PostgreSQL for what it leaves to SQL), in the one-row and the batch statement; the provider entries name the defaults, the app overrides
# them per type. Rows are read back with psql.
RSpec.describe WebhookInbox::Ordering do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("order") }
  let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url) }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }
  after { inbox.close }

  # event id => [ordering_key, ordering_at as epoch, next_attempt_at < received_at]
  def ordering_rows
    pg.psql(<<~SQL).split("\n").to_h { |l| id, key, at, early = l.split("|"); [id, [key, at, early]] }
      SELECT event_id, coalesce(ordering_key, '-'), coalesce(extract(epoch FROM ordering_at)::bigint::text, '-'),
             (next_attempt_at < received_at)::text
        FROM webhook_inbox WHERE source_scope = '#{scope}'
    SQL
  end

  def stripe_body(id, object, created, type: "customer.updated")
    JSON.generate("id" => id, "type" => type, "created" => created, "data" => { "object" => { "id" => object } })
  end

  it "stores the provider entry's key and event time, and starts a keyed row's claim at its event time" do
    ordering = described_class.new(:stripe)
    inbox.insert(source_scope: scope, event_id: "evt_1", payload: stripe_body("evt_1", "cus_9", 1_700_000_000),
                 event_type: "customer.updated", ordering: ordering.for("customer.updated"))
    inbox.insert(source_scope: scope, event_id: "evt_2", payload: %({"id":"evt_2","data":{}}),
                 ordering: ordering.for("customer.updated"))
    inbox.insert(source_scope: scope, event_id: "evt_3", payload: "not json", ordering: ordering.for("x"))
    inbox.insert(source_scope: scope, event_id: "evt_4", payload: stripe_body("evt_4", "cus_9", 1_700_000_001))
    expect(ordering_rows).to eq("evt_1" => ["cus_9", "1700000000", "true"], # the path, the time, due since then
                                "evt_2" => ["-", "-", "false"],             # no data.object.id: unordered
                                "evt_3" => ["-", "-", "false"],             # kept raw: unordered
                                "evt_4" => ["-", "-", "false"])             # no ordering: given
  end

  it "reads several parts and alternatives (GitHub: repository + issue or pull request) and receipt time without one" do
    ordering = described_class.new(:github)
    expect(ordering.for("issues")).to eq(["repository.id,issue.number|pull_request.number", nil])
    issue = %({"action":"opened","issue":{"number":7},"repository":{"id":42}})
    pull = %({"action":"closed","pull_request":{"number":7},"repository":{"id":42}})
    push = %({"ref":"refs/heads/main","repository":{"id":42}})
    { "d1" => issue, "d2" => pull, "d3" => push }.each do |id, body|
      inbox.insert(source_scope: scope, event_id: id, payload: body, ordering: ordering.for("issues"))
    end
    rows = ordering_rows
    expect(rows.transform_values(&:first)).to eq("d1" => '["42", "7"]', "d2" => '["42", "7"]', "d3" => "-")
    expect(rows["d1"][1]).not_to eq("-") # the receipt time stands in for the event time
  end

  it "computes the key in the batch statement too (group commit)" do
    ordering = described_class.new(:stripe)
    rows = [1, 2, 3].map do |i|
      [scope, "evt_b#{i}", "customer.updated", stripe_body("evt_b#{i}", "cus_#{i % 2}", 1_700_000_000 + i), false, false,
       nil, nil, ordering.for("customer.updated")]
    end
    codes = inbox.send(:with_connection) { |conn| conn.insert_batch(rows) }
    expect(codes).to eq([1, 1, 1])
    expect(ordering_rows.transform_values { |k, at, _| [k, at] })
      .to eq("evt_b1" => %w[cus_1 1700000001], "evt_b2" => %w[cus_0 1700000002], "evt_b3" => %w[cus_1 1700000003])
  end

  # db/023: 014's SQL functions could not be inlined, so each call planned its body again
  # (bench/pipeline: the receipt INSERT's PostgreSQL time per receipt 502 us against 35 us
  # before v14). Function statistics count every call that is not inlined: per row of the
  # group-commit statement only the PL/pgSQL key (its plans kept for the session) may be
  # called. (The one-row statement's custom plans fold the calls on its parameters into
  # constants once per plan, not per row.)
  it "reads the usual keys and times in C: no SQL function called for them, one called for a row left to SQL" do
    funcs = "p.proname IN ('webhook_inbox_ordering_key', 'webhook_inbox_ordering_time')"
    pg.psql("SELECT pg_stat_reset_single_function_counters(p.oid) FROM pg_proc p WHERE #{funcs}")
    tracked = WebhookInbox::Inbox.new(database_url: "#{pg.url} options='-c track_functions=all'")
    spec = described_class.new(:stripe).for("customer.updated")
    rows = (1..4).map do |i|
      [scope, "evt_f#{i}", "customer.updated", stripe_body("evt_f#{i}", "cus_#{i}", 1_700_000_000 + i), false, false, nil, nil, spec]
    end
    # a path through an array: jsonb reads "0" as an index there, which ordering.c leaves to SQL
    left = [scope, "evt_f5", "t", %({"data":[{"id":"cus_5"}]}), false, false, nil, nil, ["data.0.id", nil]]
    tracked.send(:with_connection) do |conn|
      conn.insert_batch(rows)
      conn.insert(*left)
    end
    tracked.close # an exiting backend reports its function counts
    calls = ""
    deadline = Time.now + 10
    until !calls.empty? || Time.now > deadline
      calls = pg.psql("SELECT string_agg(p.proname || ' ' || l.lanname || ' ' || s.calls, ', ' ORDER BY p.proname) " \
                      "FROM pg_stat_user_functions s JOIN pg_proc p ON p.oid = s.funcid " \
                      "JOIN pg_language l ON l.oid = p.prolang WHERE #{funcs}")
      sleep 0.05
    end
    # the one row left to SQL calls the key function once for each column it feeds (3) and the
    # time function for the two that take the time; the four read in C would add calls of their own
    expect(calls).to match(/\Awebhook_inbox_ordering_key plpgsql [123](, webhook_inbox_ordering_time sql [12])?\Z/)
    stored = ordering_rows
    expect(stored.values_at("evt_f1", "evt_f4").map { |k, at, _| [k, at] }).to eq([%w[cus_1 1700000001], %w[cus_4 1700000004]])
    expect(stored["evt_f5"][0]).to eq("cus_5")
  end

  it "derives the same keys and times as 014's SQL definitions, edge cases included" do
    # 014's definitions as a v20 database holds them (pg_dump's form; db/ keeps only today's).
    old = File.read(File.expand_path("../fixtures/schema_v20.sql", __dir__))
    defs = %w[key time].map do |what|
      old[/CREATE FUNCTION public\.webhook_inbox_ordering_#{what}\(.*?\$\$;/m]
        .sub("CREATE FUNCTION public.webhook_inbox_ordering_#{what}(", "CREATE FUNCTION pg_temp.ordering_#{what}_014(")
    end
    long = "x" * 300
    payloads = [%({"data":{"object":{"id":"cus_1","n":5,"f":1.5,"o":{"a":[1,"b"]},"arr":[10,20],"nul":null,"e":""}},) +
                  %("created":1700000000,"ms":1700000000123,"neg":-1,"big":100000000000000,"str":"123","fl":1700000000.5,) +
                  %("repository":{"id":42},"issue":{"number":7},"k":{"l":{"m":"deep"}}}),
                %({"repository":{"id":42},"pull_request":{"number":8},"created":0}),
                %({"data":{"object":{"id":"#{long}"}},"a":"#{long}","b":"#{long}"}),
                '"scalar"', "[1,2,3]", "null", "5", "{}"]
    specs = ["data.object.id", "data.object.n", "data.object.f", "data.object.o", "data.object.arr", "data.object.arr.1",
             "data.object.nul", "data.object.e", "data.object.missing", "data", "k.l.m", "0", "", ".", "a..b", ",", "|",
             "repository.id,issue.number|pull_request.number", "issue.number|pull_request.number", "x|data.object.id",
             "data.object.id,data.object.id", "a,b", "a", "data.object.id,missing", nil]
    paths = ["created", "ms", "neg", "big", "str", "fl", "missing", "data.object.arr.0", "data.object.n", "", "data",
             "data.object.nul", nil]
    lit = ->(v, type) { v.nil? ? "NULL::#{type}" : "'#{v.gsub("'", "''")}'::#{type}" }
    values = ->(list, type) { list.map { |v| "(#{lit.(v, type)})" }.join(", ") }
    out = pg.psql(<<~SQL)
      #{defs.join("\n")}
      SELECT count(*) FILTER (WHERE webhook_inbox_ordering_key(p, s) IS DISTINCT FROM pg_temp.ordering_key_014(p, s)) || ' ' ||
             count(DISTINCT webhook_inbox_ordering_key(p, s)) || ' ' ||
             count(*) FILTER (WHERE webhook_inbox_ordering_key(p, s) LIKE 'sha256:%')
        FROM (VALUES #{values.(payloads, 'jsonb')}) a(p), (VALUES #{values.(specs, 'text')}) b(s);
      SELECT count(*) FILTER (WHERE webhook_inbox_ordering_time(p, t) IS DISTINCT FROM pg_temp.ordering_time_014(p, t)) || ' ' ||
             count(DISTINCT webhook_inbox_ordering_time(p, t))
        FROM (VALUES #{values.(payloads, 'jsonb')}) a(p), (VALUES #{values.(paths, 'text')}) b(t);
    SQL
    keys, times = out.lines.map(&:strip).last(2).map { |l| l.split.map(&:to_i) }
    expect(keys[0]).to eq(0)     # no key differs
    expect(keys[1]).to be >= 15  # and the cases reach many distinct keys,
    expect(keys[2]).to be >= 2   # hashed ones too
    expect(times).to eq([0, 6])  # and many distinct times
  end

  it "lets an app override the key per type, or turn it off" do
    ordering = described_class.new(:stripe, "invoice.paid" => "data.object.subscription", "charge.refunded" => false)
    expect(ordering.for("invoice.paid")).to eq(["data.object.subscription", "created"])
    expect(ordering.for("charge.refunded")).to be_nil
    expect(ordering.for("customer.updated")).to eq(["data.object.id", "created"])
    expect(described_class.new(:stripe, false).for("customer.updated")).to be_nil
    expect(described_class.new(:stripe, "data.object.customer").for("x")).to eq(["data.object.customer", "created"])
    expect(described_class.new(:didit).for("status.updated")).to eq(%w[session_id timestamp])
    expect(described_class.new(:slack).for("x")).to be_nil # no entry key: unordered
  end

  it "refuses a malformed spec with a clear error, in configuration and in Inbox#insert" do
    ["", "data..id", "a,", "a||b", "a b", 5, :sym].each do |bad|
      expect { described_class.new(:stripe, bad) }.to raise_error(WebhookInbox::ConfigurationError, /ordering:/)
    end
    expect { described_class.new(:stripe, "t" => "x;y") }.to raise_error(WebhookInbox::ConfigurationError, /ordering:/)
    expect { inbox.insert(source_scope: scope, event_id: "e", payload: "{}", ordering: ["a b", nil]) }
      .to raise_error(ArgumentError, /ordering:/)
    expect { inbox.insert(source_scope: scope, event_id: "e", payload: "{}", ordering: "data.id") }
      .to raise_error(ArgumentError, /ordering must be/)
    expect(inbox_count(pg, scope)).to eq(0)
  end

  it "orders what an Endpoint receives by the provider entry, or by the endpoint's ordering:" do
    secret = "whsec_order"
    body = stripe_body("evt_e1", "pi_5", 1_700_000_100, type: "payment_intent.created")
    call = lambda do |endpoint, b|
      env = rack_request("/webhooks/stripe", b, WebhookInbox::TestHelpers.stripe_headers(b, secret: secret))
      endpoint.call(env).first
    end
    default = WebhookInbox::Endpoint.new(provider: :stripe, secrets: [secret], source_scope: scope, inbox: inbox)
    custom = WebhookInbox::Endpoint.new(provider: :stripe, secrets: [secret], source_scope: scope, inbox: inbox,
                                        ordering: { "payment_intent.created" => "type" })
    expect(call.(default, body)).to eq(200)
    expect(call.(custom, stripe_body("evt_e2", "pi_5", 1_700_000_101, type: "payment_intent.created"))).to eq(200)
    expect(ordering_rows.transform_values(&:first)).to eq("evt_e1" => "pi_5", "evt_e2" => "payment_intent.created")
    expect { WebhookInbox::Endpoint.new(provider: :stripe, secrets: [secret], source_scope: scope, inbox: inbox, ordering: 1) }
      .to raise_error(WebhookInbox::ConfigurationError, /ordering:/)
  end

  it "stores the same key and time through the ActiveRecordStore (transactional receipts)" do
    require "active_record"
    require "webhook_inbox/rails/active_record_store"
    model = Class.new(ActiveRecord::Base) do
      self.abstract_class = true
      def self.name = "OrderingSpecRecord"
    end
    model.establish_connection(adapter: "postgresql", host: pg.socket_dir, port: pg.port, database: pg.dbname,
                               username: pg.url[/user=(\S+)/, 1], min_messages: "error")
    store = WebhookInbox::ActiveRecordStore.new(model: model)
    ordering = described_class.new(:stripe)
    store.insert(source_scope: scope, event_id: "evt_ar", payload: stripe_body("evt_ar", "cus_ar", 1_700_000_000),
                 ordering: ordering.for("customer.updated"))
    store.insert(source_scope: scope, event_id: "evt_ar_raw", payload: "not json", ordering: ordering.for("x"))
    expect(ordering_rows).to eq("evt_ar" => ["cus_ar", "1700000000", "true"], "evt_ar_raw" => ["-", "-", "false"])
  ensure
    model&.remove_connection
  end

  it "keeps storing receipts against a schema older than v14 (the ordering is left out)" do
    db = "wi_order_old_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{db}", db: "postgres")
    ReceiverHelpers.schema_files.reject { |f| File.basename(f).to_i >= 14 }.each { |f| pg.psql(File.read(f), db: db) }
    old = WebhookInbox::Inbox.new(database_url: pg.url(db))
    receipt = old.insert(source_scope: scope, event_id: "evt_old", payload: stripe_body("evt_old", "cus_1", 1_700_000_000),
                         ordering: described_class.new(:stripe).for("customer.updated"))
    expect(receipt.status).to eq(:accepted)
    codes = old.send(:with_connection) do |conn|
      conn.insert_batch([[scope, "evt_old2", "t", "{}", false, false, nil, nil, ["data.object.id", "created"]],
                         [scope, "evt_old3", "t", "{}", false, false, nil, nil, nil]])
    end
    expect(codes).to eq([1, 1])
    expect(pg.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{scope}'", db: db).to_i).to eq(3)
  ensure
    old&.close
  end

  it "stores a key too long for an index entry as its SHA-256, so the receipt is never refused for it" do
    long = "cus_#{SecureRandom.alphanumeric(8000)}" # incompressible: past the index entry limit
    receipt = inbox.insert(source_scope: scope, event_id: "evt_long", payload: stripe_body("evt_long", long, 1_700_000_000),
                           ordering: described_class.new(:stripe).for("customer.updated"))
    expect(receipt.status).to eq(:accepted)
    expect(ordering_rows["evt_long"].first).to eq("sha256:#{Digest::SHA256.hexdigest(long)}")
  end

  it "keeps a route's strict flag through the Rails schema statements (what db/schema.rb dumps and loads)" do
    type = "ord_#{SecureRandom.hex(3)}.*"
    SchemaStatementsConnection.with(pg) do |conn|
      conn.add_webhook_inbox_route(type, "webhook_inbox_ignore", strict: true)
      expect(conn.webhook_inbox_route_rows.assoc(type)).to eq([type, "webhook_inbox_ignore", nil, true, nil])
      conn.add_webhook_inbox_route(type, "webhook_inbox_ignore") # the route restated: strict as given
      expect(conn.webhook_inbox_route_rows.assoc(type)).to eq([type, "webhook_inbox_ignore", nil, false, nil])
    ensure
      conn&.remove_webhook_inbox_route(type)
    end
  end
end
