# frozen_string_literal: true

require "spec_helper"
require "json"
require_relative "../support/receiver_helpers"

# The receiver reads a row's ordering key and time in C (ext/webhook_inbox/ordering.c) when it
# can match db/functions/ordering.sql byte for byte, and leaves the rest to those functions.
# Random JSON texts (duplicate and escaped keys, whitespace, every scalar form, nesting) and
# random specs go through the one-row and the batch statements (arrays and VALUES); every
# stored key and time must be what the SQL functions give for the stored payload.
RSpec.describe "ordering read in C against the SQL functions" do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("ordeq") }
  let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url) }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }
  after { inbox.close }

  NAMES = %w[a b id].freeze # few names: random paths meet random objects often
  # JSON text generator: texts that JSON.generate never writes (duplicate keys, escapes, spaces).
  class JsonText
    def initialize(rng) = @rng = rng

    def pick(list) = list[@rng.rand(list.size)]
    def space = pick(["", "", "", " ", "\n\t ", "\r\n"])

    def key
      name = pick(NAMES)
      case @rng.rand(8)
      when 0 then name.chars.map { |c| format("\\u%04x", c.ord) }.join # the same key, escaped
      when 1 then name.sub(/\A./) { |c| format("\\u%04X", c.ord) }
      when 2 then "#{name}x" # a near miss
      else name
      end
    end

    def string
      pick(["cus_1", "", "x" * 150, "x" * 201, "a\\\"b", "tab\\there", "\\u00e9t\\u00E9", "caf\u00e9", "\\ud83d\\ude00",
            "\\/slash", "ctl\\u0001", "back\\\\slash", "ÿ" * 120, "#{@rng.rand(1000)}"])
    end

    def number
      pick(%w[0 -0 7 -7 42 1700000000 1700000000123 99999999999 100000000000 99999999999999 100000000000000
              123456789012345678901234567890 1.5 -0.0 1e3 1E+2 1.70e9 1700000000.5 2.5e-3 1700000000123.0])
    end

    def value(depth)
      case @rng.rand(depth > 2 ? 6 : 9)
      when 0, 1 then %("#{string}")
      when 2, 3 then number
      when 4 then pick(%w[true false])
      when 5 then "null"
      when 6, 7 then object(depth + 1)
      else "[#{Array.new(@rng.rand(3)) { value(depth + 1) }.join(",#{space}")}]"
      end
    end

    def object(depth = 0)
      members = Array.new(@rng.rand(depth.zero? ? 2..6 : 0..4)) { %(#{space}"#{key}"#{space}:#{space}#{value(depth)}#{space}) }
      "{#{members.join(',')}}"
    end

    def path = Array.new(1 + @rng.rand(3)) { @rng.rand(10).zero? ? pick(%w[0 1]) : pick(NAMES) }.join(".")

    def spec
      Array.new(1 + @rng.rand(3)) { Array.new(1 + @rng.rand(2)) { path }.join("|") }.join(",")
    end
  end

  def quote(text) = "'#{text.to_s.gsub("'", "''")}'"

  # Rows whose stored key or time differs from what the SQL functions give for the stored
  # payload, and how many rows were compared.
  def mismatches(specs)
    pairs = specs.map { |id, (spec, time)| "(#{quote(id)}, #{quote(spec)}, #{time ? quote(time) : 'NULL'})" }
    out = pg.psql(<<~SQL)
      WITH want AS (
        SELECT i.event_id, i.ordering_key AS got_key, i.ordering_at AS got_at, i.received_at,
               webhook_inbox_ordering_key(i.payload, s.spec) AS key, webhook_inbox_ordering_time(i.payload, s.tpath) AS at
          FROM webhook_inbox i JOIN (VALUES #{pairs.join(', ')}) s(event_id, spec, tpath) USING (event_id)
         WHERE i.source_scope = #{quote(scope)})
      SELECT count(*) FILTER (WHERE got_key IS DISTINCT FROM key
                                 OR got_at IS DISTINCT FROM CASE WHEN key IS NOT NULL THEN coalesce(at, received_at) END)
             || ' ' || count(*) || ' ' || count(key) || ' ' || count(at)
             || ' ' || coalesce(string_agg(event_id, ',') FILTER (WHERE got_key IS DISTINCT FROM key
                          OR got_at IS DISTINCT FROM CASE WHEN key IS NOT NULL THEN coalesce(at, received_at) END), '')
        FROM want
    SQL
    bad, total, keyed, timed, ids = out.strip.split(" ", 5)
    [bad.to_i, total.to_i, keyed.to_i, timed.to_i, ids.to_s]
  end

  it "stores what the SQL functions give, one row at a time and in batches, for random payloads and specs" do
    rng = Random.new(RSpec.configuration.seed)
    gen = JsonText.new(rng)
    specs = {}
    rows = Array.new(1_200) do |i|
      body = gen.object
      spec = gen.spec
      time = [nil, gen.path, gen.path].sample(random: rng)
      id = "e#{i}"
      specs[id] = [spec, time]
      [scope, id, "t", body, false, false, nil, nil, [spec, time]]
    end
    inbox.send(:with_connection) do |conn|
      rows.first(300).each { |r| conn.insert(*r) }
      rows[300, 150].each_slice(75) { |batch| conn.insert_batch(batch) }
      # pairs: many are read whole in C and go by the arrays' read statement (BATCH_SQL_READ)
      rows[450, 300].each_slice(2) { |batch| conn.insert_batch(batch) }
    end
    # VALUES batches (group_by_scope): rows whose ordering C read whole; a batch with a row
    # left to SQL goes as arrays
    values = WebhookInbox::Inbox::Connection.new(pg.url, 5000, 5000, true)
    rows.drop(750).each_slice(3) { |batch| values.insert_batch(batch) }
    values.close
    bad, total, keyed, timed, ids = mismatches(specs)
    expect(total).to eq(1_200)
    expect(bad).to eq(0), "rows whose key or time differs from SQL's: #{ids[0, 300]}"
    expect(keyed).to be > 100 # the cases reach keys (about 170 of 1,200),
    expect(timed).to be > 10  # and times (about 25)
  end

  # The cluster's log (log_statement = 'all' on db) from a marker written before the block on.
  def log_of(db)
    marker = "log from #{SecureRandom.hex(6)}"
    pg.psql("SELECT '#{marker}'", db: db)
    yield
    log = pg.log_tail(400)
    log[log.rindex(marker)..]
  end

  it "sends an arrays batch whose every row C read by the statement without the ordering functions" do
    db = ReceiverHelpers.schema_database(pg, "ordread")
    pg.psql("ALTER DATABASE #{db} SET log_statement = 'all'", db: "postgres")
    pg.psql("ALTER DATABASE #{db} SET log_parameter_max_length = 0", db: "postgres")
    row = ->(id, created) { [scope, id, "t", %({"data":{"object":{"id":"pi_#{id}"}},"created":#{created}}), false, false, nil, nil, ["data.object.id", "created"]] }
    log = log_of(db) do
      conn = WebhookInbox::Inbox::Connection.new(pg.url(db), 5000, 5000, false)
      conn.insert_batch([row.("r1", 1_700_000_000), row.("r2", 1_700_000_001)]) # read whole in C
      conn.insert_batch([row.("s1", 1_700_000_000), row.("s2", "1700000000.5")]) # a time left to SQL
      conn.close
    end
    expect(log.scan("execute wi_inbox_insert_batch_read:").size).to eq(1)
    expect(log.scan("execute wi_inbox_insert_batch:").size).to eq(1)
    stored = pg.psql(<<~SQL, db: db).split
      SELECT event_id || '=' || (ordering_key IS NOT DISTINCT FROM webhook_inbox_ordering_key(payload, 'data.object.id')
                                 AND ordering_at IS NOT DISTINCT FROM webhook_inbox_ordering_time(payload, 'created'))
        FROM webhook_inbox ORDER BY event_id
    SQL
    expect(stored).to eq(%w[r1=true r2=true s1=true s2=true])
  ensure
    pg.psql("DROP DATABASE IF EXISTS #{db} WITH (FORCE)", db: "postgres") if db
  end

  it "sends rows without a key by the statements without the ordering's parameters, storing the same" do
    db = ReceiverHelpers.schema_database(pg, "ordnokey")
    pg.psql("ALTER DATABASE #{db} SET log_statement = 'all'", db: "postgres")
    pg.psql("ALTER DATABASE #{db} SET log_parameter_max_length = 0", db: "postgres")
    trace = "00-#{"ab" * 16}-#{"cd" * 8}-01"
    spec = ["data.object.id", "created"]
    row = lambda do |id, ordering: nil, trace: nil, payload: %({"data":{"object":{"id":"pi_#{id}"}},"created":1700000000})|
      [scope, id, "t", payload, false, false, nil, %({"user-agent":"x"}), ordering, trace]
    end
    log = log_of(db) do
      conn = WebhookInbox::Inbox::Connection.new(pg.url(db), 5000, 5000, false)
      conn.insert(*row.("u1"))                                                      # no ordering spec
      conn.insert(*row.("u2", ordering: spec, payload: %({"data":{},"created":1}))) # a spec, no key in it
      conn.insert(*row.("u3", trace: trace))                                        # a trace to store
      conn.insert_batch([row.("b1"), row.("b2", ordering: spec, payload: %({"data":{"object":null}}))])
      conn.insert_batch([row.("m1"), row.("m2", ordering: spec)])                   # one keyed row
      conn.insert_batch([row.("t1"), row.("t2", trace: trace)])                     # one traced row
      conn.close
    end
    expect(log.scan("execute wi_inbox_insert_unkeyed:").size).to eq(2)
    expect(log.scan("execute wi_inbox_insert_read:").size).to eq(1)
    expect(log.scan("execute wi_inbox_insert_batch_unkeyed:").size).to eq(1)
    expect(log.scan("execute wi_inbox_insert_batch_read:").size).to eq(2)
    stored = pg.psql(<<~SQL, db: db).split
      SELECT event_id || '=' || concat_ws(',', coalesce(ordering_key, '-'), (ordering_at IS NULL),
                                          (next_attempt_at = received_at), (request_headers IS NOT NULL),
                                          (trace_context IS NOT NULL))
        FROM webhook_inbox ORDER BY event_id
    SQL
    # key, no time, next_attempt_at = received_at, headers kept, trace kept (m2's time is earlier)
    expect(stored).to eq(%w[b1=-,t,t,t,f b2=-,t,t,t,f m1=-,t,t,t,f m2=pi_m2,f,f,t,f t1=-,t,t,t,f t2=-,t,t,t,t
                            u1=-,t,t,t,f u2=-,t,t,t,f u3=-,t,t,t,t])
  ensure
    pg.psql("DROP DATABASE IF EXISTS #{db} WITH (FORCE)", db: "postgres") if db
  end
end
