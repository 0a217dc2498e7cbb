# frozen_string_literal: true

require "spec_helper"
require "pg"
require "timeout"
require_relative "../support/receiver_helpers"

# Group commit: concurrent Inbox#insert calls of one process share one statement and one
# commit, each caller still gets its own answer once its row is committed.
RSpec.describe WebhookInbox::Inbox, "group commit" do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("group") }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }

  def wait_until(what, bound: 30)
    give_up = Process.clock_gettime(Process::CLOCK_MONOTONIC) + bound
    sleep 0.01 until yield || Process.clock_gettime(Process::CLOCK_MONOTONIC) > give_up
    raise "never happened: #{what}" unless yield
  end

  # Server sessions waiting on a row lock in an inbox insert (single or batch statement).
  def lock_waiters
    pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'" \
            " AND query LIKE 'INSERT INTO webhook_inbox%'").to_i
  end

  # A session holding keys of scope in an open transaction: an insert of one of them waits.
  def hold(*ids)
    conn = PG.connect(pg.url)
    conn.exec("BEGIN")
    ids.each { |id| conn.exec_params("INSERT INTO webhook_inbox (source_scope, event_id) VALUES ($1, $2)", [scope, id]) }
    conn
  end

  def insert_in_thread(inbox, id, payload = "{}")
    Thread.new do
      inbox.insert(source_scope: scope, event_id: id, payload: payload)
    rescue Exception => e # rubocop:disable Lint/RescueException
      e
    end
  end

  [false, true].each do |by_scope|
    it "gives every leader slot back once idle, however batches end (group_by_scope: #{by_scope})" do
      inbox = described_class.new(database_url: pg.url, pool_size: 4, group_leaders: 3, group_by_scope: by_scope)
      scopes = Array.new(8) { |i| unique_scope("slots#{i}") }
      left = Array.new(12) do |round|
        Array.new(64) do |t|
          Thread.new { 8.times { |i| inbox.insert(source_scope: scopes[(t + i) % 8], event_id: "e_#{round}_#{t}_#{i}", payload: "{}") } }
        end.each(&:join)
        inbox.leaders_in_flight
      end
      expect(left.uniq).to eq([0]) # a slot handed twice to one waiting caller was lost for good
    ensure
      inbox&.close
    end
  end

  it "is on by default and off on request" do
    on = described_class.new(database_url: pg.url)
    off = described_class.new(database_url: pg.url, group_commit: false)
    expect([on.group_commit?, off.group_commit?]).to eq([true, false])
    expect(off.insert(source_scope: scope, event_id: "evt_off", payload: "{}").status).to eq(:accepted)
  ensure
    on&.close
    off&.close
  end

  it "answers each of 64 threads for its own row: every key accepted once, duplicates otherwise, the accepted caller's row stored" do
    inbox = described_class.new(database_url: pg.url, pool_size: 4)
    barrier = Queue.new
    threads = Array.new(64) do |t|
      Thread.new do
        barrier.pop
        # 40 keys of its own, 20 shared by all threads, 5 repeated by itself
        ids = Array.new(40) { |i| "own_#{t}_#{i}" } + Array.new(20) { |i| "shared_#{i}" } + Array.new(5) { |i| "own_#{t}_#{i}" }
        ids.shuffle.map do |id|
          r = inbox.insert(source_scope: scope, event_id: id, payload: %({"by": #{t}}))
          [id, t, r.status]
        end
      end
    end
    64.times { barrier << true }
    answers = threads.flat_map(&:value)
    by_id = answers.group_by(&:first)
    expect(by_id.size).to eq(64 * 40 + 20)
    expect(by_id.values.map { |list| list.count { |_, _, s| s == :accepted } }.tally).to eq(1 => by_id.size)
    expect(answers.count { |_, _, s| s == :duplicate }).to eq(answers.size - by_id.size)
    stored = pg.psql("SELECT event_id, payload->>'by' FROM webhook_inbox WHERE source_scope = '#{scope}'")
               .split("\n").to_h { |l| l.split("|") }
    winners = answers.select { |_, _, s| s == :accepted }.to_h { |id, t, _| [id, t.to_s] }
    expect(stored).to eq(winners)
    expect(inbox.backend_pids.size).to be <= 4
  ensure
    inbox&.close
  end

  # Both batch statements: arrays (the default), VALUES rows (group_by_scope, for Citus).
  { "arrays" => false, "VALUES rows" => true }.each do |form, by_scope|
    it "stores a batch with rows jsonb refuses exactly as single inserts would, the others untouched (#{form})" do
      # A payload the client-side check passes but the server refuses (class 22) - here by a
      # trigger, as a jsonb limit the check does not know would - sends the batch row by row.
      refusing_trigger(pg, scope, "NEW.payload ? 'refuse'", "22P02")
      inbox = described_class.new(database_url: pg.url, pool_size: 1, group_by_scope: by_scope)
      rows = [
        ["ok_1", %({"a": 1}), false, false, nil],
        ["bad_json", "{not json", false, false, nil],
        ["nul", %({"a": "\\u0000"}), false, false, nil],
        ["form", "a=1&b=2", true, false, nil],
        ["quarantined", "{}", false, true, "unknown account"],
        ["ok_1", %({"a": 2}), false, false, nil], # the same key again in the batch
        ["ok_2", %({"b": 2}), false, false, nil]
      ]
      batch = ->(list) { list.map { |id, payload, raw, q, err| [scope, id, "t", payload, raw, q, err, %({"x-id": "#{id}"})] } }
      codes = inbox.with_connection { |c| c.insert_batch(batch.(rows)) }
      # bit 0 inserted, bit 1 stored raw, bit 2 quarantined
      expect(codes).to eq([1, 7, 7, 3, 5, 0, 1])
      refused = rows + [["refused", %({"refuse": true}), false, false, nil], ["ok_3", "{}", false, false, nil]]
      codes = inbox.with_connection { |c| c.insert_batch(batch.(refused)) }
      expect(codes).to eq([0, 6, 6, 2, 4, 0, 0, 7, 1])
      stored = inbox_rows(pg, scope).to_h { |r| [r[:event_id], r.values_at(:status, :payload, :raw_body, :last_error)] }
      expect(stored).to eq(
        "ok_1" => ["pending", %({"a": 1}), "", ""], "ok_2" => ["pending", %({"b": 2}), "", ""],
        "ok_3" => ["pending", "{}", "", ""],
        "bad_json" => ["quarantined", "", "{not json", "payload is not valid JSON"],
        "nul" => ["quarantined", "", %({"a": "\\\\u0000"}), "payload is not valid JSON"],
        "form" => ["pending", "", "a=1&b=2", ""], "quarantined" => ["quarantined", "{}", "", "unknown account"],
        "refused" => ["quarantined", "", %({"refuse": true}), "payload is not valid JSON"]
      )
      # Each row keeps its own headers, but the one the server refused: its raw retry leaves
      # them out too, as they might have been the cause.
      headers = pg.psql("SELECT event_id || '=' || coalesce(request_headers->>'x-id', 'NULL') FROM webhook_inbox " \
                        "WHERE source_scope = '#{scope}' ORDER BY event_id").split("\n")
      expect(headers).to eq(%w[bad_json=bad_json form=form nul=nul ok_1=ok_1 ok_2=ok_2 ok_3=ok_3 quarantined=quarantined refused=NULL])
    ensure
      drop_refusing_trigger(pg)
      inbox&.close
    end
  end

  it "mixes invalid JSON into concurrent batches without failing the valid rows" do
    inbox = described_class.new(database_url: pg.url, pool_size: 2)
    threads = Array.new(32) do |t|
      Thread.new do
        Array.new(20) do |i|
          bad = (t + i).odd?
          r = inbox.insert(source_scope: scope, event_id: "e_#{t}_#{i}", payload: bad ? "{bad #{i}" : %({"i": #{i}}))
          [bad, r.status, r.stored_raw, r.quarantined]
        end
      end
    end
    expect(threads.flat_map(&:value).tally).to eq([true, :accepted, true, true] => 320, [false, :accepted, false, false] => 320)
    counts = pg.psql("SELECT status, count(*) FROM webhook_inbox WHERE source_scope = '#{scope}' GROUP BY 1 ORDER BY 1")
    expect(counts.split("\n")).to eq(%w[pending|320 quarantined|320])
  ensure
    inbox&.close
  end

  # One batch in flight at a time, its leader waiting on a row lock: the other callers queue.
  context "with the batch in flight held on a row lock" do
    let(:inbox) do
      described_class.new(database_url: pg.url, pool_size: 2, group_leaders: 1, statement_timeout: 30, checkout_timeout: 20)
    end
    after { inbox.close }

    it "lets a queued follower leave on Thread#raise and Timeout, sending nothing for it; the others are answered" do
      blocker = hold("locked")
      leader = insert_in_thread(inbox, "locked")
      wait_until("the leader waits on the lock") { lock_waiters == 1 }
      raised = insert_in_thread(inbox, "raised")
      kept = insert_in_thread(inbox, "kept")
      wait_until("two callers queued") { inbox.queued_inserts == 2 }
      timed = Thread.new do
        Timeout.timeout(2) { inbox.insert(source_scope: scope, event_id: "timed", payload: "{}") }
      rescue Timeout::Error => e
        e
      end
      wait_until("three callers queued") { inbox.queued_inserts == 3 || !timed.alive? }
      expect(timed.join(10)&.value).to be_a(Timeout::Error)
      expect(inbox.queued_inserts).to eq(2)
      stop = Class.new(StandardError)
      raised.raise(stop, "give up")
      expect(raised.join(2)&.value).to be_a(stop)
      expect(inbox.queued_inserts).to eq(1)
      blocker.exec("ROLLBACK")
      expect(leader.value.status).to eq(:accepted)
      expect(kept.value.status).to eq(:accepted)
      expect(inbox_rows(pg, scope).map { |r| r[:event_id] }).to eq(%w[kept locked])
    ensure
      blocker&.close
    end

    it "gives a queued follower StoreError when its batch does not start by its deadline (checkout_timeout)" do
      short = described_class.new(database_url: pg.url, pool_size: 2, group_leaders: 1, statement_timeout: 30,
                                  checkout_timeout: 0.5)
      blocker = hold("locked")
      leader = insert_in_thread(short, "locked")
      wait_until("the leader waits on the lock") { lock_waiters == 1 }
      follower = insert_in_thread(short, "late")
      error = follower.join(10)&.value
      expect(error).to be_a(WebhookInbox::StoreError)
      expect(error.message).to match(/no inbox batch started within 0.5s/)
      blocker.exec("ROLLBACK")
      expect(leader.value.status).to eq(:accepted)
      expect(inbox_rows(pg, scope).map { |r| r[:event_id] }).to eq(%w[locked]) # nothing sent for "late"
    ensure
      blocker&.close
      short&.close
    end

    # Two locks: the first holds a lone leader while two callers queue; releasing it hands
    # them one batch, which the second lock then holds in flight.
    def batch_in_flight(first_id, second_id)
      b1 = hold("lock_1")
      b2 = hold("lock_2")
      lone = insert_in_thread(inbox, "lock_1")
      wait_until("the lone leader waits") { lock_waiters == 1 }
      first = insert_in_thread(inbox, first_id) # queued first: it will lead the batch
      wait_until("one caller queued") { inbox.queued_inserts == 1 }
      second = insert_in_thread(inbox, second_id)
      wait_until("two callers queued") { inbox.queued_inserts == 2 }
      b1.exec("ROLLBACK")
      expect(lone.value.status).to eq(:accepted)
      wait_until("the batch waits on lock_2") { lock_waiters == 1 && inbox.queued_inserts.zero? }
      [b2, first, second]
    ensure
      b1&.close
    end

    it "lets a follower whose row is in flight leave on Thread#raise; its row still commits and a retry is a duplicate" do
      blocker, leader, follower = batch_in_flight("lock_2", "in_flight")
      stop = Class.new(StandardError)
      follower.raise(stop, "give up")
      expect(follower.join(2)&.value).to be_a(stop)
      blocker.exec("ROLLBACK")
      expect(leader.value.status).to eq(:accepted)
      expect(inbox_rows(pg, scope).map { |r| r[:event_id] }).to eq(%w[in_flight lock_1 lock_2])
      expect(inbox.insert(source_scope: scope, event_id: "in_flight", payload: "{}").status).to eq(:duplicate)
    ensure
      blocker&.close
    end

    it "sends the followers again under a new leader when the leader is interrupted mid-batch" do
      blocker, leader, follower = batch_in_flight("lock_2", "rescued")
      stop = Class.new(StandardError)
      leader.raise(stop, "give up")
      expect(leader.join(2)&.value).to be_a(stop)
      # The follower leads its row again on a new connection; the abandoned statement is
      # aborted by the server (the leader closed its connection), so it commits nothing.
      expect(follower.join(10)&.value&.status).to eq(:accepted)
      wait_until("the server aborted the abandoned statement") { lock_waiters.zero? }
      blocker.exec("ROLLBACK")
      expect(inbox_rows(pg, scope).map { |r| r[:event_id] }).to eq(%w[lock_1 rescued])
      expect(inbox.insert(source_scope: scope, event_id: "after", payload: "{}").status).to eq(:accepted)
    ensure
      blocker&.close
    end
  end

  context "on a server with pg_stat_statements" do
    before(:all) do
      @stats = ThrowawayPostgres.new(settings: { "shared_preload_libraries" => "pg_stat_statements" })
      ReceiverHelpers.apply_schema(@stats)
      @stats.psql("CREATE EXTENSION pg_stat_statements")
    end
    after(:all) { @stats&.destroy }

    it "commits many rows per statement under concurrency, and a lone caller's row alone" do
      inbox = described_class.new(database_url: @stats.url, pool_size: 4)
      inbox.insert(source_scope: scope, event_id: "warm", payload: "{}")
      @stats.psql("SELECT pg_stat_statements_reset()")
      3.times { |i| inbox.insert(source_scope: scope, event_id: "lone_#{i}", payload: "{}") }
      stats = lambda do
        @stats.psql("SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0) FROM pg_stat_statements" \
                    " WHERE query LIKE 'INSERT INTO webhook_inbox%' GROUP BY query LIKE '%unnest%' ORDER BY 1")
              .split("\n").map { |l| l.split("|").map(&:to_i) }
      end
      expect(stats.call).to eq([[3, 3]]) # three single-row statements, no batch
      @stats.psql("SELECT pg_stat_statements_reset()")
      threads = Array.new(64) { |t| Thread.new { 50.times { |i| inbox.insert(source_scope: scope, event_id: "c_#{t}_#{i}", payload: "{}") } } }
      threads.each(&:join)
      batch = @stats.psql("SELECT calls, rows FROM pg_stat_statements WHERE query LIKE '%unnest%'").split("|").map(&:to_i)
      statements = @stats.psql("SELECT sum(calls) FROM pg_stat_statements WHERE query LIKE 'INSERT INTO webhook_inbox%'").to_i
      expect(batch.first).to be_positive
      expect(batch.last.fdiv(batch.first)).to be > 1.5 # rows per batch statement (one commit each)
      expect(statements).to be < 3200 / 2 # statements (= commits) for 3,200 rows
      expect(inbox_count(@stats, scope)).to eq(1 + 3 + 3200)
    ensure
      inbox&.close
    end
  end

  context "when the server restarts under concurrent inserts" do
    before(:all) do
      @own = ThrowawayPostgres.new
      ReceiverHelpers.apply_schema(@own)
    end
    after(:all) { @own&.destroy }

    it "loses nothing acknowledged: receipts match the table, failures are StoreError and their retries land" do
      inbox = described_class.new(database_url: @own.url, pool_size: 4, connect_timeout: 2)
      stop_at = nil
      threads = Array.new(32) do |t|
        Thread.new do
          out = []
          i = 0
          until stop_at && Process.clock_gettime(Process::CLOCK_MONOTONIC) > stop_at
            id = "r_#{t}_#{i += 1}"
            out << begin
              [id, inbox.insert(source_scope: scope, event_id: id, payload: "{}").status]
            rescue WebhookInbox::StoreError
              sleep 0.05 # the server is down: do not spin
              [id, :failed]
            end
          end
          out
        end
      end
      wait_until("batches flowing") { inbox_count(@own, scope) > 200 }
      @own.restart
      stop_at = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1
      outcomes = threads.flat_map { |th| th.join(60)&.value or raise "an insert hung across the restart" }
      stored = @own.psql("SELECT event_id FROM webhook_inbox WHERE source_scope = '#{scope}'").split("\n")
      acknowledged = outcomes.reject { |_, s| s == :failed }.map(&:first)
      expect(outcomes.map(&:last).uniq - %i[accepted duplicate failed]).to be_empty
      expect(acknowledged - stored).to be_empty # nothing acknowledged is lost
      expect(stored - outcomes.map(&:first)).to be_empty
      expect(stored.size).to eq(stored.uniq.size)
      # The senders retry what failed: it lands (or was committed after all: duplicate).
      retried = outcomes.select { |_, s| s == :failed }.map { |id, _| inbox.insert(source_scope: scope, event_id: id, payload: "{}").status }
      expect(retried - %i[accepted duplicate]).to be_empty
      expect(inbox_count(@own, scope)).to eq(outcomes.size)
      expect(inbox.insert(source_scope: scope, event_id: "after", payload: "{}").status).to eq(:accepted)
    ensure
      inbox&.close
    end
  end
end
