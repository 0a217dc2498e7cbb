# frozen_string_literal: true

require "spec_helper"
require "pg"
require_relative "../support/receiver_helpers"
require_relative "../support/pg_proxy"
require_relative "../support/forked"

RSpec.describe WebhookInbox::Inbox do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("inbox") }
  let(:inbox) { described_class.new(database_url: pg.url, pool_size: 4) }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }
  after { inbox.close }

  def insert(id, payload = %({"id":"#{id}"}), **opts)
    inbox.insert(source_scope: scope, event_id: id, event_type: "charge.succeeded", payload: payload, **opts)
  end

  it "stores a new event as pending jsonb and reports :accepted" do
    receipt = insert("evt_1", %({"id": "evt_1", "amount": 100}))
    expect(receipt).to have_attributes(status: :accepted, source_scope: scope, event_id: "evt_1",
                                       stored_raw: false, quarantined: false)
    expect(inbox_rows(pg, scope)).to eq([{ event_id: "evt_1", event_type: "charge.succeeded", status: "pending",
                                           payload: %({"id": "evt_1", "amount": 100}), raw_body: "",
                                           last_error: "", processed: false }])
  end

  it "reports :duplicate for the same key and leaves the first row untouched" do
    insert("evt_1", %({"v": 1}))
    pg.psql("UPDATE webhook_inbox SET status = 'done' WHERE source_scope = '#{scope}'")
    expect(insert("evt_1", %({"v": 2})).status).to eq(:duplicate)
    expect(inbox_rows(pg, scope).map { |r| [r[:status], r[:payload]] }).to eq([["done", %({"v": 1})]])
  end

  it "keeps the same event id apart in different scopes" do
    insert("evt_1")
    other = inbox.insert(source_scope: "#{scope}:other", event_id: "evt_1", payload: "{}")
    expect(other.status).to eq(:accepted)
  end

  it "stores a body that is not JSON raw and quarantined, with the reason" do
    receipt = insert("evt_bad", "{not json")
    expect(receipt).to have_attributes(status: :accepted, stored_raw: true, quarantined: true)
    row = inbox_rows(pg, scope).first
    expect(row).to include(status: "quarantined", payload: "", raw_body: "{not json",
                           last_error: "payload is not valid JSON", processed: true)
  end

  it "quarantines JSON that jsonb refuses (\\u0000) and bytes that are not UTF-8" do
    insert("evt_nul", %({"a": "\\u0000"}))
    insert("evt_bin", "{\"a\": \"\xff\"}".b)
    insert("evt_zero", "{\"a\":\0}")
    rows = inbox_rows(pg, scope)
    expect(rows.map { |r| [r[:event_id], r[:status], r[:last_error]] })
      .to eq([%w[evt_bin quarantined] + ["payload is not valid JSON"],
              %w[evt_nul quarantined] + ["payload is not valid JSON"],
              %w[evt_zero quarantined] + ["payload is not valid JSON"]])
    bytes = pg.psql("SELECT encode(raw_body, 'hex') FROM webhook_inbox WHERE source_scope = '#{scope}' AND event_id = 'evt_zero'")
    expect([bytes.strip].pack("H*")).to eq("{\"a\":\0}".b)
  end

  # The pre-check that skips a doomed jsonb round trip must never send to quarantine a body
  # PostgreSQL stores as jsonb. Each number is asked of the server itself (SELECT $1::jsonb),
  # then inserted: stored as jsonb exactly when the server accepts it.
  JSONB_NUMBERS = [
    "0", "-0", "1E+2", "1e400", "-1e400", "1e-400", "1e0000000000000000000005", "1.5e-16382",
    "1e100001", "-1e100001", "9.9e131071", "12345e131067", "0.0001e131075", "1e-16383",
    "0e999999999", "0e1073741822", "0e-16383", "0.000e-16380",
    "1" * 100_000, "1" * 131_072, "0.#{'0' * 16_383}", "1.#{'1' * 16_383}",
    # refused by PostgreSQL (numeric range): quarantined either way
    "1e131072", "12345e131068", "0.0001e131076", "1e-16384", "1.5e-16383", "0e-16384", "0.000e-16381",
    "0e1073741823", "1e1073741822", "1e2147483647", "1e-1073741822", "1" * 131_073, "0.#{'0' * 16_384}"
  ].freeze

  it "stores as jsonb every number PostgreSQL's jsonb accepts, and quarantines only the others" do
    conn = PG.connect(pg.url)
    accepted = JSONB_NUMBERS.to_h do |n|
      ok = begin
        conn.exec_params("SELECT $1::jsonb", [%({"n":#{n}})])
        true
      rescue PG::Error
        false
      end
      [n, ok]
    end
    expect(accepted.values.tally.keys).to contain_exactly(true, false) # the table covers both sides
    mismatches = JSONB_NUMBERS.each_with_index.filter_map do |n, i|
      receipt = insert("evt_num_#{i}", %({"n":#{n}}))
      short = n.size > 24 ? "#{n[0, 12]}...(#{n.size} chars)" : n
      "#{short}: server #{accepted[n] ? 'accepts' : 'refuses'}, stored_raw=#{receipt.stored_raw}" if receipt.stored_raw == accepted[n]
    end
    expect(mismatches).to be_empty
  ensure
    conn&.close
  end

  it "stores a form body raw and pending when asked (raw: true)" do
    receipt = insert("evt_form", "payload=%7B%22a%22%3A1%7D", raw: true)
    expect(receipt).to have_attributes(status: :accepted, stored_raw: true, quarantined: false)
    expect(inbox_rows(pg, scope).first).to include(status: "pending", raw_body: "payload=%7B%22a%22%3A1%7D", payload: "")
  end

  it "stores a row quarantined at receipt with the caller's reason and processed_at" do
    insert("evt_q", "{}", status: :quarantined, last_error: "unknown account")
    expect(inbox_rows(pg, scope).first).to include(status: "quarantined", last_error: "unknown account", processed: true)
  end

  it "rejects text fields that are not UTF-8 or hold NUL, before touching the database" do
    expect { insert("evt_\xff".b) }.to raise_error(ArgumentError, /event_id is not valid UTF-8/)
    expect { insert("evt\0x") }.to raise_error(ArgumentError, /NUL/)
    expect { insert("") }.to raise_error(ArgumentError, /empty/)
    expect { insert("x", status: :done) }.to raise_error(ArgumentError, /status/)
    expect(inbox_count(pg, scope)).to eq(0)
  end

  it "inserts exactly one row when 32 threads deliver the same event at once" do
    barrier = Queue.new
    threads = Array.new(32) { Thread.new { barrier.pop; insert("evt_race").status } }
    32.times { barrier << true }
    statuses = threads.map(&:value)
    expect(statuses.count(:accepted)).to eq(1)
    expect(statuses.count(:duplicate)).to eq(31)
    expect(inbox_count(pg, scope)).to eq(1)
    expect(inbox.backend_pids.size).to be <= 4
  end

  it "keeps inserting while 16 threads compete for the GVL and 4 connections (time-slice interrupts)" do
    threads = Array.new(16) { |t| Thread.new { Array.new(50) { |i| insert("evt_#{t}_#{i}").status } } }
    expect(threads.flat_map(&:value).tally).to eq(accepted: 800)
    expect(inbox_count(pg, scope)).to eq(800)
  end

  it "releases the GVL while waiting on a locked key, and times out by statement_timeout" do
    blocker = PG.connect(pg.url)
    blocker.exec("BEGIN")
    blocker.exec_params("INSERT INTO webhook_inbox (source_scope, event_id) VALUES ($1, 'evt_locked')", [scope])
    slow = described_class.new(database_url: pg.url, pool_size: 1, statement_timeout: 1)
    ticks = 0
    ticker = Thread.new { loop { ticks += 1; sleep 0.01 } }
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    expect { slow.insert(source_scope: scope, event_id: "evt_locked", payload: "{}") }
      .to raise_error(WebhookInbox::StoreError, /57014|statement timeout/)
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    ticker.kill
    expect(elapsed).to be_between(0.9, 3)
    expect(ticks).to be > 40 # the ticker ran while the insert waited
    blocker.exec("ROLLBACK")
    # The connection survived the SQL error and is reused.
    expect(slow.insert(source_scope: scope, event_id: "evt_locked", payload: "{}").status).to eq(:accepted)
  ensure
    blocker&.close
    slow&.close
  end

  it "gives up promptly when the waiting thread is killed (unblocking function)" do
    blocker = PG.connect(pg.url)
    blocker.exec("BEGIN")
    blocker.exec_params("INSERT INTO webhook_inbox (source_scope, event_id) VALUES ($1, 'evt_kill')", [scope])
    patient = described_class.new(database_url: pg.url, pool_size: 1, statement_timeout: 60)
    waiter = Thread.new { patient.insert(source_scope: scope, event_id: "evt_kill", payload: "{}") }
    sleep 0.3
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    waiter.kill.join
    expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).to be < 1
    # The abandoned insert is not cancelled (a cancel request can block): its connection is
    # closed and the server aborts it (client_connection_check_interval), before the lock
    # is released - otherwise it would commit evt_kill once the blocker rolls back. Watched
    # from another session: inside blocker's transaction pg_stat_activity is a snapshot.
    watcher = PG.connect(pg.url)
    waiting = lambda do
      watcher.exec("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'" \
                   " AND query LIKE 'INSERT INTO webhook_inbox%'").getvalue(0, 0).to_i
    end
    give_up = t0 + 20 # far less than statement_timeout: the server's own timeout does not count
    sleep 0.05 while waiting.call.positive? && Process.clock_gettime(Process::CLOCK_MONOTONIC) < give_up
    expect(waiting.call).to eq(0), "the server still runs the abandoned insert"
    blocker.exec("ROLLBACK")
    expect(insert("evt_kill").status).to eq(:accepted)
  ensure
    blocker&.close
    watcher&.close
    patient&.close
  end

  # The unblocking function is declared async-signal-safe (rb_nogvl UBF_ASYNC_SAFE): on
  # the main thread of a single-threaded process Ruby calls it from the signal handler
  # instead of running a helper thread per insert. A trap must still run during the wait,
  # not after it. The scenario runs in a forked child: that process has exactly one thread,
  # whatever threads earlier specs left in this one (with more threads Ruby delivers the
  # trap by another path, and may do so only when the wait ends).
  it "runs a signal trap on the main thread while it waits on a locked key, then inserts" do
    result = Forked.call do
      Thread.list.each { |t| t.kill unless t == Thread.current }
      trap_during_insert
    end
    expect(result[:threads]).to eq(1)
    expect(result[:error]).to be_nil
    expect(result[:sender]).to eq(0), "the insert never waited on the row lock"
    expect(result[:trapped]).to eq(["ROLLBACK"])
    expect(result[:status]).to eq(:accepted)
  end

  def trap_during_insert
    blocker = PG.connect(pg.url)
    blocker.exec("BEGIN")
    blocker.exec_params("INSERT INTO webhook_inbox (source_scope, event_id) VALUES ($1, 'evt_trap')", [scope])
    trapped = []
    previous_trap = trap("USR1") { trapped << blocker.exec("ROLLBACK").cmd_status if trapped.empty? }
    # A separate process (not a Ruby thread) signals once the insert waits on the row lock.
    sender = Process.spawn("sh", "-c", <<~SH)
      for i in $(seq 1 400); do
        n=$(#{pg.psql_command} -XAtc "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO webhook_inbox%'")
        if [ "${n:-0}" -ge 1 ]; then kill -USR1 #{Process.pid}; exit 0; fi
        sleep 0.05
      done
      exit 1
    SH
    threads = Thread.list.size
    slow = described_class.new(database_url: pg.url, pool_size: 1, statement_timeout: 30)
    status = slow.insert(source_scope: scope, event_id: "evt_trap", payload: "{}").status
    Process.wait(sender)
    { threads: threads, sender: $?.exitstatus, trapped: trapped, status: status, error: nil }
  rescue StandardError => e
    { threads: threads, trapped: trapped, error: "#{e.class}: #{e.message}" }
  ensure
    trap("USR1", previous_trap || "DEFAULT") # later examples (and their forked children) get no stale handler
    blocker&.close
    slow&.close
  end

  # A pooler that resets server sessions (DISCARD ALL) or hands the client another session
  # drops the prepared statement under us: SQLSTATE 26000 on every insert until restart,
  # unless the store prepares it again. The proxy runs DISCARD ALL on the very session the
  # inbox uses, between two inserts.
  it "prepares the statement again and retries once when the server dropped it (DISCARD ALL: 26000)" do
    proxy = PgProxy.new(pg.port)
    pooled = described_class.new(database_url: pg.tcp_url.sub("port=#{pg.port}", "port=#{proxy.port}"), pool_size: 1)
    expect(pooled.insert(source_scope: scope, event_id: "evt_p1", payload: "{}").status).to eq(:accepted)
    pids = pooled.backend_pids
    proxy.inject("DISCARD ALL")
    expect(pooled.insert(source_scope: scope, event_id: "evt_p2", payload: "{}").status).to eq(:accepted)
    expect(pooled.insert(source_scope: scope, event_id: "evt_p3", payload: "{}").status).to eq(:accepted)
    expect(pooled.backend_pids).to eq(pids) # same session, not a reconnect
    expect(inbox_rows(pg, scope).map { |r| r[:event_id] }).to eq(%w[evt_p1 evt_p2 evt_p3])
  ensure
    pooled&.close
    proxy&.close
  end

  it "raises StoreError without the password when the server is unreachable" do
    url = "postgresql://app:s3cr3t-pw@127.0.0.1:#{ReceiverHelpers.free_port}/db"
    down = described_class.new(database_url: url, connect_timeout: 1)
    expect(down.inspect).not_to include("s3cr3t-pw")
    expect(down.inspect).to include("app:***@")
    expect { down.insert(source_scope: scope, event_id: "e", payload: "{}") }
      .to raise_error(WebhookInbox::StoreError) { |e| expect(e.message).not_to include("s3cr3t-pw") }
  end

  it "refuses a malformed database_url without echoing it" do
    expect { described_class.new(database_url: "postgresql://u:pw%zz@h/db") }
      .to raise_error(WebhookInbox::ConfigurationError) { |e| expect(e.message).not_to include("pw") }
    expect { described_class.new(database_url: pg.url, pool_size: 0) }.to raise_error(WebhookInbox::ConfigurationError)
  end

  it "redacts passwords in URL and key=value forms" do
    expect(described_class.redact("host=x password=abc user=u")).to eq("host=x password=*** user=u")
    expect(described_class.redact("postgres://u:abc@h/d?password=zz")).to eq("postgres://u:***@h/d?password=***")
    expect(described_class.redact("postgres://h:5432/d?user=a@b")).to eq("postgres://h:5432/d?user=a@b")
    expect(described_class.redact("postgres://u@h/d")).to eq("postgres://u@h/d")
  end

  # libpq ends a URL's password at the first '@' (and finds no user info at all before a
  # '/'): the rest of the password becomes the host, port or database name - looked up in
  # DNS, and quoted in libpq's messages, StoreError, logs and inspect.
  SPLIT_PASSWORD_URLS = {
    "@" => "postgres://app:hunter2@Xyzzy-frag@127.0.0.1:%d/db",
    "/" => "postgresql://app:hunter2/Xyzzy-frag@127.0.0.1:%d/db",
    "@ and ?" => "postgres://app:hunter2?x@Xyzzy-frag@127.0.0.1:%d/db?sslmode=disable"
  }.freeze

  SPLIT_PASSWORD_URLS.each do |what, template|
    it "shows no part of a password with an unencoded #{what}: refused up front, redacted in inspect" do
      url = format(template, ReceiverHelpers.free_port)
      fragments = %w[hunter2 Xyzzy-frag]
      texts = [described_class.redact(url)]
      config = WebhookInbox::Configuration.new.tap { |c| c.database_url = url }
      texts << config.inspect
      begin
        split = described_class.new(database_url: url, connect_timeout: 1)
        texts << split.inspect
        split.insert(source_scope: scope, event_id: "e", payload: "{}")
      rescue WebhookInbox::Error => e
        texts << "#{e.class}: #{e.message}"
      end
      expect(texts.last).to match(/ConfigurationError: .*percent-encode/)
      texts.each { |t| fragments.each { |f| expect(t).not_to include(f), "#{f} shown in: #{t}" } }
    end
  end

  it "keeps a percent-encoded password out of StoreError, as written and decoded" do
    url = "postgresql://app:Xy%40zzy-pw@127.0.0.1:#{ReceiverHelpers.free_port}/db"
    down = described_class.new(database_url: url, connect_timeout: 1)
    expect(down.inspect).not_to include("Xy")
    expect { down.insert(source_scope: scope, event_id: "e", payload: "{}") }
      .to raise_error(WebhookInbox::StoreError) { |e| expect(e.message).not_to include("Xy") }
  end

  it "works in one process with the pg gem (same libpq)" do
    conn = PG.connect(pg.url)
    insert("evt_pg")
    expect(conn.exec_params("SELECT status FROM webhook_inbox WHERE source_scope = $1", [scope]).values)
      .to eq([["pending"]])
    expect(PG.library_version).to be >= 100_000
    expect(insert("evt_pg2").status).to eq(:accepted)
  ensure
    conn&.close
  end

  it "is fork-safe: the child opens its own session and the parent's survives" do
    insert("evt_parent_1")
    parent_pids = inbox.backend_pids
    expect(parent_pids.size).to eq(1)
    child_status, child_pids = Forked.call { [insert("evt_child").status, inbox.backend_pids] }
    expect(child_status).to eq(:accepted)
    expect(child_pids & parent_pids).to be_empty
    expect(insert("evt_parent_2").status).to eq(:accepted)
    expect(inbox.backend_pids).to eq(parent_pids) # same session: not terminated by the child
    expect(inbox_rows(pg, scope).map { |r| r[:event_id] }).to eq(%w[evt_child evt_parent_1 evt_parent_2])
  end

  it "after fork, concurrent first inserts in the child share one fresh pool (never over pool_size)" do
    insert("evt_before_fork")
    statuses, pooled = Forked.call do
      [Array.new(12) { |i| Thread.new { insert("evt_forked_#{i}").status } }.map(&:value).uniq, inbox.backend_pids.size]
    end
    expect(statuses).to eq([:accepted])
    expect(pooled).to be_between(1, 4) # pool_size 4
    expect(inbox_count(pg, scope)).to eq(13)
  end

  # A frozen host, a stopped postmaster, a black-holing middlebox: TCP still accepts, nothing
  # answers. SIGSTOP on the postmaster and on the inbox's backend makes exactly that: the
  # kernel completes new TCP handshakes (a cancel request would connect) and buffers what
  # we send, and no process ever answers. Every wait must end by the deadline or an
  # interrupt; the bounds are generous multiples, not timing checks.
  context "when the server stops answering (SIGSTOP)" do
    before(:all) do
      @frozen = ThrowawayPostgres.new
      ReceiverHelpers.apply_schema(@frozen)
    end
    after(:all) { @frozen&.destroy }

    def frozen_inbox(statement_timeout:)
      described_class.new(database_url: @frozen.tcp_url, pool_size: 1, connect_timeout: 1,
                          statement_timeout: statement_timeout)
    end

    # Stops the postmaster and the inbox's backend for the block; always resumes them (a
    # thread still stuck afterwards is then released, so a failure cannot hang the run).
    def while_frozen(inbox)
      expect(inbox.insert(source_scope: scope, event_id: "warm", payload: "{}").status).to eq(:accepted)
      pids = [@frozen.postmaster_pid, *inbox.backend_pids]
      expect(pids.size).to eq(2)
      Process.kill("STOP", *pids)
      begin
        yield
      ensure
        Process.kill("CONT", *pids)
      end
    end

    def elapsed
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      yield
      Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    end

    it "raises StoreError by the deadline (statement + connect timeout), never hanging in a cancel request" do
      inbox = frozen_inbox(statement_timeout: 1) # each wait: 1 s + 1 s
      outcome = nil
      while_frozen(inbox) do
        worker = Thread.new do
          inbox.insert(source_scope: scope, event_id: "frozen", payload: "{}")
        rescue StandardError => e
          e
        end
        took = elapsed { worker.join(6) } # deadline * 3
        outcome = [worker.alive? ? :still_waiting : worker.value, took]
      end
      error, took = outcome
      expect(error).to be_a(WebhookInbox::StoreError), "insert still blocked #{took.round(1)} s after a 2 s deadline"
      expect(error.message).to match(/did not answer within 2000 ms/)
      expect(took).to be < 6
      # The server is back: the next insert reconnects.
      expect(inbox.insert(source_scope: scope, event_id: "after_thaw", payload: "{}").status).to eq(:accepted)
    ensure
      inbox&.close
    end

    it "gives up at once on Thread#raise, whatever the deadline" do
      inbox = frozen_inbox(statement_timeout: 30)
      stop = Class.new(StandardError)
      outcome = nil
      while_frozen(inbox) do
        worker = Thread.new do
          inbox.insert(source_scope: scope, event_id: "frozen_raise", payload: "{}")
        rescue StandardError, stop => e
          e
        end
        sleep 0.8 # the insert is sent and waiting without the GVL
        took = elapsed do
          worker.raise(stop, "give up")
          worker.join(3)
        end
        outcome = [worker.alive? ? :still_waiting : worker.value, took]
      end
      error, took = outcome
      expect(error).to be_a(stop), "Thread#raise was ignored for #{took.round(1)} s"
      expect(inbox.insert(source_scope: scope, event_id: "after_raise", payload: "{}").status).to eq(:accepted)
    ensure
      inbox&.close
    end
  end

  context "when the server restarts" do
    before(:all) do
      @own = ThrowawayPostgres.new
      ReceiverHelpers.apply_schema(@own)
    end
    after(:all) { @own&.destroy }

    it "reconnects once and inserts, without a StoreError" do
      own = described_class.new(database_url: @own.url, pool_size: 1)
      expect(own.insert(source_scope: scope, event_id: "before", payload: "{}").status).to eq(:accepted)
      @own.restart
      expect(own.insert(source_scope: scope, event_id: "after", payload: "{}").status).to eq(:accepted)
      expect(inbox_count(@own, scope)).to eq(2)
      @own.stop
      expect { own.insert(source_scope: scope, event_id: "down", payload: "{}") }.to raise_error(WebhookInbox::StoreError)
      @own.start
      expect(own.insert(source_scope: scope, event_id: "down", payload: "{}").status).to eq(:accepted)
    ensure
      own&.close
    end
  end
end
