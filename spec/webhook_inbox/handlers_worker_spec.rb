# frozen_string_literal: true

require "spec_helper"
require "fileutils"
require "tmpdir"
require "stringio"
require "active_record"
require "webhook_inbox/handlers"
require "webhook_inbox/handlers/worker"
require_relative "../support/receiver_helpers"
require_relative "../support/overlap_probe"
require_relative "../support/forked_ruby_worker"

# The Ruby worker as a process (Handlers::Worker in a forked child, its own connection,
# committed transactions), for what the in-transaction drain cannot show
# (db/013_ruby_handler_fixes.sql, lib/webhook_inbox/handlers/runner.rb): a batch of first
# attempts commits once; a handler that kills its process is charged and in the end
# quarantined, alone from its second attempt, while its batch-mates are charged once for its
# crash and apply their writes once; and a requeue dispatched while a handler runs waits for
# it instead of deadlocking with its save; a Ruby handler holds its event's ordering key
# (db/021): no other worker, nor the sidecar's claim, runs an event of that key meanwhile.
RSpec.describe WebhookInbox::Handlers::Worker do
  include ForkedRubyWorker # start_worker: backoff 0, a charged run is due again at once

  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "handlers_worker")
    @pg.psql("CREATE TABLE calls (id bigserial PRIMARY KEY, handler text NOT NULL, event_id text NOT NULL, attempt int NOT NULL, " \
              "xid bigint NOT NULL DEFAULT txid_current())", db: @db) # the top transaction, also in a savepoint
    @pg.psql(OverlapProbe::SQL, db: @db)
    @url = ReceiverHelpers.ar_url(@pg).sub(@pg.dbname, @db)
  end

  around do |example|
    @dir = Dir.mktmpdir("handlers_worker")
    @pg.psql("TRUNCATE webhook_inbox, webhook_inbox_outbox, webhook_inbox_ruby_handlers, webhook_inbox_actions, calls", db: @db)
    example.run
  ensure
    @workers&.each { |pid| stop_worker(pid) }
    FileUtils.rm_rf(@dir)
  end

  def sql(text) = @pg.psql(text, db: @db).strip

  # Handlers record each run twice: in calls (rolled back with a failed run) and in a file
  # (what a mail or an API call would be: it stays).
  def registry(handlers)
    WebhookInbox::Handlers::Registry.new.tap do |reg|
      handlers.each do |name, (pattern, body)|
        reg.add([pattern], lambda { |e|
          File.open(File.join(@dir, "ran"), "a") { |f| f.puts("#{name} #{e.id} #{e.attempt}") }
          ActiveRecord::Base.connection.exec_insert("INSERT INTO calls (handler, event_id, attempt) VALUES ($1, $2, $3)",
                                                    "spec", [name.to_s, e.id, e.attempt])
          body&.call(e)
        }, name: name)
      end
    end
  end

  def ran = File.exist?(File.join(@dir, "ran")) ? File.readlines(File.join(@dir, "ran"), chomp: true) : []

  def register(reg) = sql("SELECT webhook_inbox_ruby_register('#{JSON.generate(reg.pairs)}')")

  # Stores events (in this order, one statement each: created in this order) and hands them
  # to the Ruby handlers through the sidecar's dispatch.
  def store_and_dispatch(events)
    events.each do |id, type|
      sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', '#{id}', '#{type}', '{}')")
    end
    sql("SELECT count(*) FROM webhook_inbox_dispatch_batch(100, 'wait', 10, 1000, 3600000, 60000)")
  end

  # The child's exit status, or nil once the block is true while it still runs.
  def wait_exit(pid)
    wait_until("worker #{pid} exited, or done") do
      next [$?.exitstatus] if Process.wait(pid, Process::WNOHANG)

      [nil] if yield
    end.first
  end

  it "commits a batch of first attempts once: every handler's writes and every run's result in one transaction" do
    reg = registry(steady: ["steady.x", nil])
    register(reg)
    store_and_dispatch((1..7).map { |i| ["evt_#{i}", "steady.x"] })
    start_worker(reg, batch_size: 5, backoff_base_ms: 60_000) # a lease of 30..60s: nothing is started twice
    wait_until("the runs done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == "7" }
    # Two rounds of 5 and 2: the handlers' writes in two transactions, the runs saved in them.
    expect(sql("SELECT string_agg(n::text, ',' ORDER BY n) FROM (SELECT count(*) n FROM calls GROUP BY xid) c")).to eq("2,5")
    expect(sql("SELECT count(*) FROM webhook_inbox_outbox o JOIN calls c ON c.event_id = o.source_event_id " \
               "WHERE o.xmin::text = (c.xid % 4294967296)::text AND o.status = 'delivered' AND o.attempts = 1")).to eq("7")
  end

  it "rolls back only the failing handler's writes in a batch of 5: its batch-mates' writes and results commit once, it is retried" do
    reg = registry(steady: ["steady.x", ->(e) { raise "evt_3 failed" if e.id == "evt_3" && e.attempt == 1 }])
    register(reg)
    store_and_dispatch((1..5).map { |i| ["evt_#{i}", "steady.x"] })
    start_worker(reg, batch_size: 5, backoff_base_ms: 60_000) # the retry is leased 30..60s: not in this example
    wait_until("the four done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == "4" }
    wait_until("evt_3's error saved") { sql("SELECT last_error FROM webhook_inbox_outbox WHERE source_event_id = 'evt_3'") != "" }
    expect(ran.sort).to eq((1..5).map { |i| "steady evt_#{i} 1" }) # all five ran, in one batch
    expect(sql("SELECT string_agg(event_id, ',' ORDER BY event_id) || ' ' || count(DISTINCT xid) FROM calls"))
      .to eq("evt_1,evt_2,evt_4,evt_5 1") # evt_3's insert rolled back with its savepoint
    # Its run saved with the others' in one call (one transaction id: after ROLLBACK TO its
    # savepoint stays open, so the save is in it, committed with the batch), pending for a retry.
    expect(sql("SELECT string_agg(source_event_id || ' ' || status || ' ' || attempts, ',' ORDER BY source_event_id) " \
               "|| ' ' || count(DISTINCT xmin::text) FROM webhook_inbox_outbox"))
      .to eq("evt_1 delivered 1,evt_2 delivered 1,evt_3 pending 1,evt_4 delivered 1,evt_5 delivered 1 1")
    expect(sql("SELECT last_error FROM webhook_inbox_outbox WHERE source_event_id = 'evt_3'")).to eq("RuntimeError: evt_3 failed")
    expect(sql("SELECT status || ' ' || last_error FROM webhook_inbox WHERE event_id = 'evt_3'"))
      .to eq("pending Ruby handler steady: RuntimeError: evt_3 failed")
  end

  it "runs a batch in a fixed number of round trips (db/016): one start, then one lock, one finish and one commit, whatever its size" do
    reg = registry(steady: ["steady.x", nil])
    register(reg)
    store_and_dispatch((1..5).map { |i| ["evt_#{i}", "steady.x"] })
    statements = []
    ActiveRecord::Base.establish_connection(@url)
    ActiveRecord::Base.connection.verify! # connected (its settings sent) before counting
    runner = WebhookInbox::Handlers::Runner.new(reg, backoff_base_ms: 60_000)
    counting = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      statements << payload[:sql] unless payload[:sql].include?("calls") # the handlers' own inserts
    end
    results = runner.run_batch(ActiveRecord::Base.connection, 10)
    ActiveSupport::Notifications.unsubscribe(counting)
    expect(results.map(&:status)).to eq(%w[delivered] * 5)
    # Each handler's savepoint is ActiveRecord's (opened by its first query, released after it).
    expect(statements.map { |q| q[/\A\w+(?: \* FROM \w+)?/] }).to eq(
      ["SELECT * FROM webhook_inbox_ruby_start_batch", "BEGIN", "SELECT * FROM webhook_inbox_ruby_lock_batch",
       *(%w[SAVEPOINT RELEASE] * 5), "SELECT * FROM webhook_inbox_ruby_finish_batch", "COMMIT"]
    )
    # Two transactions: the starts (committed alone), then the batch; every run saved in the second.
    expect(sql("SELECT count(DISTINCT xid) FROM calls")).to eq("1")
    expect(sql("SELECT count(*) FROM webhook_inbox_outbox o WHERE o.xmin::text = (SELECT (min(xid) % 4294967296)::text FROM calls) " \
               "AND o.status = 'delivered' AND o.attempts = 1")).to eq("5")
  ensure
    ActiveRecord::Base.remove_connection
  end

  it "closes a failed handler's savepoint, so the next handler's does not nest inside it" do
    reg = registry(steady: ["steady.x", ->(e) { raise "evt_2 failed" if e.id == "evt_2" }])
    register(reg)
    store_and_dispatch((1..3).map { |i| ["evt_#{i}", "steady.x"] })
    statements = []
    ActiveRecord::Base.establish_connection(@url)
    ActiveRecord::Base.connection.verify!
    runner = WebhookInbox::Handlers::Runner.new(reg, backoff_base_ms: 60_000)
    counting = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      statements << payload[:sql][/\A(ROLLBACK TO|\w+)/] if payload[:sql].include?("SAVEPOINT")
    end
    results = runner.run_batch(ActiveRecord::Base.connection, 10)
    ActiveSupport::Notifications.unsubscribe(counting)
    expect(results.map(&:status)).to eq(%w[delivered pending delivered])
    # ActiveRecord alone leaves evt_2's savepoint open after ROLLBACK TO (no RELEASE), so
    # evt_3's SAVEPOINT of the same name would open inside it.
    expect(statements).to eq(["SAVEPOINT", "RELEASE", "SAVEPOINT", "ROLLBACK TO", "RELEASE", "SAVEPOINT", "RELEASE"])
    expect(sql("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM calls")).to eq("evt_1,evt_3")
  ensure
    ActiveRecord::Base.remove_connection
  end

  # Issue 35 item 3: a handler past its time limit, in Ruby code or in a statement, is
  # interrupted and charged a failure; its batch-mates commit; outcomes are reported after the commit.
  def in_process_batch(reg, **options)
    ActiveRecord::Base.establish_connection(@url)
    runner = WebhookInbox::Handlers::Runner.new(reg, backoff_base_ms: 60_000, **options)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    [runner.run_batch(ActiveRecord::Base.connection, 10), Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0]
  ensure
    ActiveRecord::Base.remove_connection
  end

  it "interrupts a handler past its time limit, in Ruby or in a statement, charges it a failure and commits its batch-mates" do
    reg = registry(steady: ["steady.x", nil], slow: ["slow.x", ->(_e) { sleep 30 }],
                   stuck: ["stuck.x", ->(_e) { ActiveRecord::Base.connection.execute("SELECT pg_sleep(30)") }],
                   stubborn: ["stubborn.x", lambda do |_e|
                     sleep 30
                   rescue Exception # rubocop:disable Lint/RescueException -- swallows the interrupt: still charged
                     nil
                   end])
    register(reg)
    store_and_dispatch([%w[evt_1 steady.x], %w[evt_2 slow.x], %w[evt_3 stuck.x], %w[evt_4 stubborn.x], %w[evt_5 steady.x]])
    results, seconds = in_process_batch(reg, time_limit: 0.5)
    expect(results.map { |r| "#{r.event_id} #{r.status}" }).to eq(["evt_1 delivered", "evt_2 pending", "evt_3 pending", "evt_4 pending", "evt_5 delivered"])
    expect(seconds).to be < 10 # three limits of 0.5 s, not 90 s of sleeping
    expect(sql("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM calls")).to eq("evt_1,evt_5") # the slow ones' writes rolled back
    expect(sql("SELECT string_agg(source_event_id || ' ' || status || ' ' || attempts || ' ' || last_error, ' | ' ORDER BY source_event_id) " \
               "FROM webhook_inbox_outbox WHERE status = 'pending'"))
      .to eq(%w[evt_2 evt_3 evt_4].map { |e| "#{e} pending 1 WebhookInbox::Handlers::TimeLimit::Exceeded: the handler ran past its time limit of 0.5 s" }.join(" | "))
    expect(sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'")).to eq("0") # cancelled, not left running
    expect(sql("SELECT string_agg(event_id || ' ' || status, ',' ORDER BY event_id) FROM webhook_inbox"))
      .to eq("evt_1 done,evt_2 pending,evt_3 pending,evt_4 pending,evt_5 done")
  end

  it "quarantines a handler that runs past its time limit on its last attempt" do
    reg = registry(slow: ["slow.x", ->(_e) { sleep 30 }])
    register(reg)
    store_and_dispatch([%w[evt_1 slow.x]])
    results, = in_process_batch(reg, time_limit: 0.2, max_attempts: 1)
    expect(results.map(&:status)).to eq(["quarantined"])
    expect(sql("SELECT status || ' ' || last_error FROM webhook_inbox WHERE event_id = 'evt_1'"))
      .to eq("quarantined Ruby handler slow: WebhookInbox::Handlers::TimeLimit::Exceeded: the handler ran past its time limit of 0.2 s")
  end

  it "reports each run's outcome (the worker's log line) only once its batch committed" do
    reg = registry(steady: ["steady.x", nil])
    register(reg)
    store_and_dispatch([%w[evt_1 steady.x], %w[evt_2 steady.x]])
    seen = []
    report = ->(r) { seen << [r.event_id, r.status, ActiveRecord::Base.connection.transaction_open?, sql("SELECT status FROM webhook_inbox_outbox WHERE source_event_id = '#{r.event_id}'")] }
    in_process_batch(reg, on_result: report)
    expect(seen).to eq([["evt_1", "delivered", false, "delivered"], ["evt_2", "delivered", false, "delivered"]]) # committed: seen by psql
  end

  it "takes --handler-timeout from the command line, else the configuration's handler_timeout (30 s)" do
    limit = lambda do |**opts|
      WebhookInbox::Handlers::Worker.new(registry: registry(steady: ["steady.x", nil]), out: StringIO.new, **opts)
                                    .instance_variable_get(:@runner).time_limit
    end
    expect(limit.call).to eq(30.0)
    expect(limit.call(handler_timeout: 2.5)).to eq(2.5)
    expect(limit.call(handler_timeout: 0)).to be_nil
    WebhookInbox.configuration.handler_timeout = 7
    expect(limit.call).to eq(7.0)
    out = StringIO.new
    expect(WebhookInbox::Handlers::Worker.cli(%w[--handler-timeout soon], out: out)).to eq(2)
    expect(out.string).to include("not a duration: \"soon\"")
  ensure
    WebhookInbox.configuration.handler_timeout = 30
  end

  it "refuses to start against a schema older than its batch steps (v15): level=error, exit 1, nothing registered" do
    old = "handlers_worker_v15_#{SecureRandom.hex(4)}"
    @pg.psql("CREATE DATABASE #{old}", db: "postgres")
    # The gem builds only its own version: a v15 database is today's less the batch steps (db/016's).
    ReceiverHelpers.schema_files.each { |f| @pg.psql(File.read(f), db: old) }
    @pg.psql("DROP FUNCTION #{WebhookInbox::Handlers::Runner::START_BATCH_PROC}", db: old)
    ActiveRecord::Base.establish_connection(@url.sub(@db, old))
    out = StringIO.new
    expect(WebhookInbox::Handlers::Worker.new(registry: registry(steady: ["steady.x", nil]), out: out).run).to eq(1)
    expect(out.string).to include("level=error event=ruby_worker_schema_old", "older than v16")
    expect(@pg.psql("SELECT count(*) FROM webhook_inbox_ruby_handlers", db: old).strip).to eq("0")
  ensure
    ActiveRecord::Base.remove_connection
    @pg.psql("DROP DATABASE IF EXISTS #{old}", db: "postgres")
  end

  it "keeps the v13 single-run steps working on a v16 database (a worker of the previous release)" do
    reg = registry(steady: ["steady.x", nil])
    register(reg)
    store_and_dispatch([%w[evt_1 steady.x]])
    op, attempt, exhausted = sql("SELECT operation_id || ' ' || attempt || ' ' || exhausted FROM webhook_inbox_ruby_start(10, 60000, 3600000)").split
    expect([attempt, exhausted]).to eq(%w[1 false])
    expect(sql("BEGIN; SELECT event_type FROM webhook_inbox_ruby_lock('#{op}', 1); " \
               "SELECT webhook_inbox_ruby_finish('#{op}', 1, 'done', NULL, 1, 10, 60000, 3600000); COMMIT;").lines.map(&:strip))
      .to eq(%w[steady.x delivered])
    expect(sql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_1'")).to eq("done")
  end

  # webhook_inbox_ruby_save is the charge and the finish in one call: what it records must stay
  # what the v9 worker's save recorded.
  it "keeps the v9 one-step save working: done uncharged, retry charged with backoff, quarantined at the last attempt" do
    reg = registry(steady: ["steady.x", nil])
    register(reg)
    store_and_dispatch([%w[evt_1 steady.x], %w[evt_2 steady.x], %w[evt_3 steady.x]])
    ops = sql("SELECT string_agg(operation_id, ',' ORDER BY source_event_id) FROM webhook_inbox_outbox").split(",")
    sql("UPDATE webhook_inbox_outbox SET attempts = 2 WHERE source_event_id = 'evt_3'") # two failures before
    save = ->(op, result) { sql("SELECT webhook_inbox_ruby_save('#{op}', '#{result}', 'upstream down', 1, 3, 60000, 60000)") }
    expect([save.(ops[0], "done"), save.(ops[1], "retry"), save.(ops[2], "retry")]).to eq(%w[delivered pending quarantined])
    expect(save.(ops[0], "done")).to eq("") # no longer pending: NULL, nothing changed
    expect(sql("SELECT string_agg(concat_ws(' ', source_event_id, status, attempts, coalesce(last_error, '-'), " \
               "last_attempt_at IS NOT NULL, processed_at IS NOT NULL), ',' ORDER BY source_event_id) FROM webhook_inbox_outbox"))
      .to eq("evt_1 delivered 0 - t t,evt_2 pending 1 upstream down t f,evt_3 quarantined 3 upstream down t t")
    expect(sql("SELECT next_attempt_at >= last_attempt_at + interval '30 seconds' FROM webhook_inbox_outbox " \
               "WHERE source_event_id = 'evt_2'")).to eq("t") # equal jitter over 60 s: 30 to 60 s
    expect(sql("SELECT string_agg(event_id || ' ' || status, ',' ORDER BY event_id) FROM webhook_inbox"))
      .to eq("evt_1 done,evt_2 pending,evt_3 quarantined")
  end

  it "refuses batch arrays of different lengths, and locks a batch in its events' order, skipping a run past its attempt" do
    reg = registry(steady: ["steady.x", nil])
    register(reg)
    store_and_dispatch([%w[evt_2 steady.x], %w[evt_1 steady.x], %w[evt_3 steady.x]])
    started = sql("SELECT string_agg(operation_id, ',') FROM webhook_inbox_ruby_start_batch(10, 10, 60000, 3600000)").split(",")
    expect(started.size).to eq(3)
    sql("UPDATE webhook_inbox_outbox SET attempts = 2 WHERE source_event_id = 'evt_3'") # started again elsewhere
    ids = "ARRAY['#{started.join("','")}']"
    expect(sql("SELECT string_agg(event_id || ' ' || attempt, ',') FROM webhook_inbox_ruby_lock_batch(#{ids}, ARRAY[1, 1, 1])"))
      .to eq("evt_1 1,evt_2 1")
    expect { sql("SELECT webhook_inbox_ruby_lock_batch(#{ids}, ARRAY[1])") }.to raise_error(/one attempt per operation id/)
    expect { sql("SELECT webhook_inbox_ruby_finish_batch(#{ids}, ARRAY[1, 1, 1], ARRAY['done'], ARRAY[NULL, NULL, NULL]::text[], " \
                 "ARRAY[1, 1, 1]::float8[], 10, 0, 0)") }.to raise_error(/one attempt, result, error and duration/)
    expect(sql("SELECT count(*) FROM webhook_inbox_outbox WHERE status = 'pending'")).to eq("3") # nothing saved
  end

  it "gives a retry due among first attempts back uncharged: the first attempts before it one batch, it alone, then the rest" do
    reg = registry(steady: ["steady.x", nil])
    register(reg)
    store_and_dispatch((1..4).map { |i| ["evt_#{i}", "steady.x"] })
    # Due in event order; evt_3's run failed once before (a retry: attempt 2).
    sql("UPDATE webhook_inbox_outbox SET next_attempt_at = now() - (5 - right(source_event_id, 1)::int) * interval '1 second', " \
        "attempts = CASE WHEN source_event_id = 'evt_3' THEN 1 ELSE 0 END")
    start_worker(reg, batch_size: 10, backoff_base_ms: 60_000)
    wait_until("the runs done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == "4" }
    expect(sql("SELECT string_agg(e, ' | ' ORDER BY e) FROM (SELECT string_agg(event_id || ' ' || attempt, ',' ORDER BY event_id) e " \
               "FROM calls GROUP BY xid) t")).to eq("evt_1 1,evt_2 1 | evt_3 2 | evt_4 1") # one transaction each group
    expect(sql("SELECT string_agg(source_event_id || ' ' || attempts, ',' ORDER BY source_event_id) FROM webhook_inbox_outbox"))
      .to eq("evt_1 1,evt_2 1,evt_3 2,evt_4 1") # each charged once
  end

  it "charges a handler that kills its process before it runs: alone from its second attempt, quarantined after its last; its batch-mates are charged once and write once" do
    reg = registry(steady: ["steady.x", nil], poison: ["poison.x", ->(_e) { exit!(3) }])
    register(reg)
    store_and_dispatch([%w[evt_1 steady.x], %w[evt_2 steady.x], %w[evt_3 poison.x], %w[evt_4 steady.x]])

    deaths = 0
    6.times do # max_attempts 3: three deaths, then the fourth worker quarantines it without running it
      pid = start_worker(reg, batch_size: 10, max_attempts: 3)
      code = wait_exit(pid) { sql("SELECT status FROM webhook_inbox_outbox WHERE source_event_id = 'evt_3'") == "quarantined" }
      break unless code

      expect(code).to eq(3)
      deaths += 1
    end
    wait_until("the steady runs done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == "3" }
    expect(deaths).to eq(3)
    expect(ran.grep(/\Apoison/)).to eq(["poison evt_3 1", "poison evt_3 2", "poison evt_3 3"])
    # The first batch ran evt_1 and evt_2 (event order) before the poison killed it: nothing of
    # it committed, and they ran again (outside the database, at least once), alone, as evt_4.
    expect(ran.grep(/\Asteady/).sort).to eq(["steady evt_1 1", "steady evt_1 2", "steady evt_2 1", "steady evt_2 2", "steady evt_4 2"])
    expect(sql("SELECT string_agg(handler || ' ' || event_id || ' ' || attempt, ',' ORDER BY event_id) FROM calls"))
      .to eq("steady evt_1 2,steady evt_2 2,steady evt_4 2") # written once each; the poison's never
    # Charged once for the crash of their batch, never for the poison's later deaths (alone).
    expect(sql("SELECT string_agg(source_event_id || ' ' || attempts, ',' ORDER BY source_event_id) FROM webhook_inbox_outbox"))
      .to eq("evt_1 2,evt_2 2,evt_3 3,evt_4 2")
    expect(sql("SELECT attempts || ' ' || last_error FROM webhook_inbox_outbox WHERE source_event_id = 'evt_3'"))
      .to start_with("3 attempt 3 started and never finished")
    expect(sql("SELECT string_agg(event_id || ' ' || status, ',' ORDER BY event_id) FROM webhook_inbox"))
      .to eq("evt_1 done,evt_2 done,evt_3 quarantined,evt_4 done")
  end

  it "lets a requeue dispatched while a handler of the event runs wait for its save, without a deadlock" do
    release = File.join(@dir, "release")
    fail_a = true
    reg = registry(a: ["order.paid", ->(_e) { raise WebhookInbox::Permanent, "first time" if fail_a }],
                   b: ["order.*", lambda { |_e|
                     FileUtils.touch(File.join(@dir, "b_started"))
                     sleep 0.05 until File.exist?(release)
                   }])
    register(reg)
    # a fails for good first: the event is quarantined while b's run is still to go.
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', 'evt_r', 'order.paid', '{}')")
    sql("SELECT count(*) FROM webhook_inbox_dispatch_batch(100, 'wait', 10, 1000, 3600000, 60000)")
    sql("UPDATE webhook_inbox_outbox SET next_attempt_at = now() + interval '1 hour' WHERE payload->>'handler' = 'b'")
    fail_a_worker = start_worker(reg, batch_size: 10)
    wait_until("evt_r quarantined by a") { sql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_r'") == "quarantined" }
    stop_worker(fail_a_worker)
    fail_a = false

    sql("UPDATE webhook_inbox_outbox SET next_attempt_at = now() WHERE payload->>'handler' = 'b'")
    start_worker(reg, batch_size: 10)
    wait_until("b running") { File.exist?(File.join(@dir, "b_started")) }
    # The operator's requeue and the sidecar's dispatch of it, while b runs.
    ops = Thread.new do
      [sql("SELECT moved FROM webhook_inbox_requeue('requeue', '{\"event_id\": \"evt_r\"}', 'ops')"),
       sql("SELECT string_agg(result, ',') FROM webhook_inbox_dispatch_batch(100, 'wait', 10, 1000, 3600000, 60000)")]
    rescue StandardError => e
      e
    end
    wait_until("the requeue waiting for a lock") { sql("SELECT count(*) FROM pg_stat_activity WHERE datname = '#{@db}' AND wait_event_type = 'Lock'") == "1" }
    FileUtils.touch(release)
    expect(ops.value).to eq(%w[1 handed]) # not "deadlock detected"
    wait_until("evt_r done") { sql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_r'") == "done" }
    expect(ran).to eq(["a evt_r 1", "b evt_r 1", "a evt_r 1"]) # a requeued: attempts reset; b once
    expect(worker_log).not_to include("ruby_worker_round_failed")
    expect(sql("SELECT string_agg(handler, ',' ORDER BY id) FROM calls")).to eq("b,a")
  end

  # Events of one ordering key (cus_1), stored as the receiver stores keyed ones; an event
  # time of 2026-01-01 + seconds.
  def store_keyed(id, seconds)
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, ordering_key, ordering_at) " \
        "VALUES ('s', '#{id}', 'cus.updated', '{}', 'cus_1', '2026-01-01 00:00:00+00'::timestamptz + #{seconds} * interval '1 s')")
  end

  def dispatch = sql("SELECT count(*) FROM webhook_inbox_dispatch_batch(100, 'wait', 10, 1000, 3600000, 60000)")

  # A handler that notes whether another open transaction handles its key, then takes its time.
  def key_probe(seconds)
    lambda { |e|
      ActiveRecord::Base.connection.exec_insert("INSERT INTO calls (handler, event_id, attempt) " \
                                                "SELECT 'overlap', $1, 0 WHERE spec_key_held_elsewhere('cus_1')", "spec", [e.id])
      sleep seconds
    }
  end

  # Issue 27 item 5: both events handed to the Ruby worker (the earlier one arrived late, while
  # nothing ran), then two workers, one run each: the second waits for the first's key.
  it "never runs the Ruby handlers of two events of one ordering key at once, on two workers" do
    reg = registry(slow: ["cus.*", key_probe(0.5)])
    register(reg)
    store_keyed("evt_k2", 2)
    expect(dispatch).to eq("1")
    store_keyed("evt_k1", 1)
    expect(dispatch).to eq("1")
    expect(sql("SELECT count(*) FROM webhook_inbox_outbox WHERE destination = 'ruby' AND status = 'pending'")).to eq("2")
    2.times { start_worker(reg, batch_size: 1) }
    wait_until("both done") { sql("SELECT count(*) FROM webhook_inbox WHERE status = 'done'") == "2" }
    expect(ran.map { |l| l.split[1] }.sort).to eq(%w[evt_k1 evt_k2]) # each once
    expect(sql("SELECT count(*) FROM calls WHERE handler = 'overlap'")).to eq("0")
    expect(worker_log).not_to include("ruby_worker_round_failed")
  end

  # While a Ruby handler of a later event runs, the sidecar's claim leaves an earlier event of
  # its key pending (no SQL route run, no Ruby run recorded); it takes it once that ends.
  it "keeps the sidecar's claim off an earlier event of the key whose later event a Ruby handler runs" do
    release = File.join(@dir, "release")
    reg = registry(slow: ["cus.*", lambda { |_e|
      FileUtils.touch(File.join(@dir, "slow_started"))
      sleep 0.05 until File.exist?(release)
    }])
    register(reg)
    store_keyed("evt_k2", 2)
    expect(dispatch).to eq("1")
    start_worker(reg, batch_size: 1)
    wait_until("evt_k2's handler running") { File.exist?(File.join(@dir, "slow_started")) }
    store_keyed("evt_k1", 1)
    begin
      expect(dispatch).to eq("0")
      expect(sql("SELECT status || ' ' || attempts FROM webhook_inbox WHERE event_id = 'evt_k1'")).to eq("pending 0")
      expect(sql("SELECT count(*) FROM webhook_inbox_outbox WHERE source_event_id = 'evt_k1'")).to eq("0")
    ensure
      FileUtils.touch(release) # the worker's handler ends (and the worker stops) either way
    end
    wait_until("evt_k2 done") { sql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_k2'") == "done" }
    expect(dispatch).to eq("1")
    wait_until("evt_k1 done") { sql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_k1'") == "done" }
    expect(ran.map { |l| l.split[1] }).to eq(%w[evt_k2 evt_k1]) # the late one after, as the stale rule says
  end
end
