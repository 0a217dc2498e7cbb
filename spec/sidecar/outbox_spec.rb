# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"
require_relative "../support/fake_receipt_api"

# Issue 11: the outbox (db/006_outbox.sql) delivered by the sidecar. A handler emits an
# effect in its transaction; the sidecar POSTs it with Idempotency-Key = operation id under a
# lease and saves the answer. The "Done when" row: killed (-9) after the API answered, before
# the save, the restarted sidecar sends the same key again, the API makes one receipt, and the
# effect ends delivered. Plus every answer class: 2xx, 4xx, 5xx, 429 + Retry-After, timeouts.
RSpec.describe "webhook-inbox-sidecar outbox", :sidecar do
  include SidecarHelper::Payloads

  before(:all) do
    @api = FakeReceiptApi.new
    @db = SidecarHelper::DB.new(TestDatabase.cluster)
    # A handler that records a payment and emits its receipt in the same transaction.
    @db.psql(<<~SQL)
      CREATE FUNCTION t_emit_receipt(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM webhook_inbox_emit('receipt:' || (ev.payload #>> '{data,object,id}'), ev.payload ->> 'dest',
                                   jsonb_build_object('payment_id', ev.payload #>> '{data,object,id}'));
        RETURN 'emitted';
      END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.emit', 't_emit_receipt');
    SQL
  end

  after(:all) { @api&.stop }

  before do
    @db.psql("TRUNCATE webhook_inbox_outbox, webhook_inbox")
    @api.before_answer = nil
  end

  let(:db) { @db }
  let(:api) { @api }

  def emit(op, dest, payload = { "n" => 1 })
    db.psql("SELECT webhook_inbox_emit(#{db.q(op)}, #{db.q(dest)}, #{db.q(JSON.generate(payload))}::jsonb)")
  end

  def effect(op)
    cols = %w[status attempts last_error response_status provider_id response_excerpt source_event_id]
    row = db.value("SELECT concat_ws(E'\\x1f', #{cols.map { |c| "coalesce(#{c}::text, '')" }.join(', ')}) " \
                   "FROM webhook_inbox_outbox WHERE operation_id = #{db.q(op)}").split("\x1f", -1)
    cols.zip(row).to_h.transform_keys(&:to_sym).tap { |h| h[:attempts] = h[:attempts].to_i }
  end

  # The sidecar with destinations; extra args after.
  def destinations(**paths)
    paths.flat_map { |name, path| ["--destination", "#{name}=#{api.url}#{path}"] }
  end

  def run_args(*extra)
    ["run", "--database-url", db.url, "--concurrency", "1", "--poll-interval", "200ms", "--backoff-base", "100ms",
     "--backoff-cap", "200ms", "--destination-timeout", "1s", "--destination-lease", "2s", *extra]
  end

  def start_sidecar(*extra, env: {})
    spawn_sidecar(*run_args(*extra), env: env)
  end

  def stop(pid)
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "a handler's effect is POSTed once with its operation id as Idempotency-Key, the bearer token from the environment, and saved delivered" do
    db.insert_event("evt_1", "test.emit", succeeded("pi_1", "t1", "o1", 100, "usd").merge("dest" => "receipts"))
    pid, log = start_sidecar(*destinations(receipts: "/receipts"), env: { "WEBHOOK_INBOX_DEST_RECEIPTS_TOKEN" => "tok_secret_1" })
    wait_for(15, 0.05, "delivered") { effect("receipt:pi_1")[:status] == "delivered" }
    stop(pid)

    req = api.requests.find { |r| r.key == "receipt:pi_1" }
    expect(req.headers).to include("content-type" => "application/json", "authorization" => "Bearer tok_secret_1")
    expect(JSON.parse(req.body)).to eq("payment_id" => "pi_1")
    # the id the API gave this key (the API is shared: another example's late request may have
    # made a receipt since, so not "the last one made")
    expect(api.effects["receipt:pi_1"]).to eq(1)
    expect(effect("receipt:pi_1")).to include(attempts: 1, response_status: "200",
                                              provider_id: JSON.parse(api.answer_for("receipt:pi_1"))["id"],
                                              source_event_id: "evt_1", last_error: "")
    expect(File.read(log)).not_to include("tok_secret_1")
    expect(File.read(log)).to include("msg=effect operation_id=receipt:pi_1 destination=receipts outcome=delivered status=200")
  end

  it "killed with -9 after the API answered, before the save: the restart sends the same key, one receipt, delivered" do
    op = "receipt:pi_kill"
    emit(op, "receipts", "payment_id" => "pi_kill")
    # While the API answers, hold the effect's row lock: the sidecar's save then waits on it.
    locker = PG.connect(db.url)
    api.before_answer = lambda do |req|
      next unless req["Idempotency-Key"] == op && !@locked

      @locked = true
      locker.exec("BEGIN")
      locker.exec_params("SELECT 1 FROM webhook_inbox_outbox WHERE operation_id = $1 FOR UPDATE", [op])
    end
    pid, = start_sidecar(*destinations(receipts: "/receipts"))
    saver = wait_for(15, 0.05, "the save waiting on the row lock") do
      db.value("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%outbox_save%'").then { |v| v.empty? ? nil : v }
    end
    Process.kill("KILL", pid) # died after the API answered, before the save committed
    wait_exit(pid)
    db.psql("SELECT pg_terminate_backend(#{saver})") # its backend must not commit the save after the lock goes
    locker.exec("ROLLBACK")
    expect(api.effects[op]).to eq(1)
    expect(effect(op)).to include(status: "pending", attempts: 1)

    pid, log = start_sidecar(*destinations(receipts: "/receipts")) # the lease (2 s) expires, then the same key again
    wait_for(20, 0.05, "delivered after the restart") { effect(op)[:status] == "delivered" }
    stop(pid)
    expect(api.keys.count(op)).to eq(2) # the same Idempotency-Key, twice
    expect(api.effects[op]).to eq(1)    # one receipt
    expect(effect(op)).to include(attempts: 2)
    expect(effect(op)[:provider_id]).to match(/\Arcpt_\d+\z/)
    expect(File.read(log)).to include("outcome=delivered")
  ensure
    locker&.close
  end

  it "4xx other than 408/429: quarantined at once with the reason; requeue --effects sends it again" do
    emit("op_4xx", "refusing")
    pid, = start_sidecar(*destinations(refusing: "/status/422"))
    wait_for(15, 0.05, "quarantined") { effect("op_4xx")[:status] == "quarantined" }
    stop(pid)
    expect(effect("op_4xx")).to include(attempts: 1, response_status: "422",
                                        last_error: a_string_including("HTTP 422 (not retried"))
    expect(effect("op_4xx")[:response_excerpt]).to include("status 422")

    status, out, = sidecar("requeue", "--effects", "--operation-id", "op_4xx", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "requeued 1 effects\n"])
    expect(effect("op_4xx")).to include(status: "pending", attempts: 0)
  end

  it "requeue --effects --destination NAME: that destination's quarantined effects only; with --operation-id both filters" do
    %w[op_a1 op_a2 op_a3].each { |op| emit(op, "alpha") }
    %w[op_b1 op_b2].each { |op| emit(op, "beta") }
    db.psql("UPDATE webhook_inbox_outbox SET status = 'quarantined', attempts = 3 WHERE operation_id <> 'op_a3'")
    quarantined = -> { db.value("SELECT string_agg(operation_id, ',' ORDER BY 1) FROM webhook_inbox_outbox WHERE status = 'quarantined'") }

    status, out, = sidecar("requeue", "--effects", "--destination", "beta", "--operation-id", "op_a1", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "requeued 0 effects\n"]) # op_a1 is alpha's
    status, out, = sidecar("requeue", "--effects", "--destination=beta", "--operation-id", "op_b2", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "requeued 1 effects\n"])
    expect(quarantined.call).to eq("op_a1,op_a2,op_b1")
    status, out, = sidecar("requeue", "--effects", "--destination", "alpha", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "requeued 2 effects\n"])
    expect(quarantined.call).to eq("op_b1")
    expect(effect("op_a1")).to include(status: "pending", attempts: 0)
    expect(effect("op_a3")).to include(status: "pending") # was never quarantined

    # A bad name, two names, --all with a name, --destination without --effects or in run: exit 2, nothing moved.
    [[%w[--effects --destination Beta-1], "must match [a-z][a-z0-9_]{0,62}"],
     [%w[--effects --destination beta --destination alpha], "one destination per requeue"],
     [%w[--effects --destination beta --all], "--all means every destination"],
     [%w[--destination beta --all], "add --effects"]].each do |args, message|
      status, _, err = sidecar("requeue", *args, "--database-url", db.url)
      expect([status.exitstatus, err]).to match([2, a_string_including(message)])
    end
    status, _, err = sidecar("run", "--once", "--destination", "beta", "--database-url", db.url)
    expect([status.exitstatus, err]).to match([2, a_string_including("--destination NAME=URL")])
    expect(quarantined.call).to eq("op_b1")

    status, out, = sidecar("requeue", "--effects", "--all", "--database-url", db.url)
    expect([status.exitstatus, out]).to eq([0, "requeued 1 effects\n"])
  end

  it "5xx: retried with backoff under the same key until a 2xx; max attempts then quarantine" do
    emit("op_flaky", "flaky")
    emit("op_down", "down")
    pid, = start_sidecar(*destinations(flaky: "/flaky/2", down: "/status/503"), "--max-attempts", "3")
    wait_for(20, 0.05, "settled") { effect("op_flaky")[:status] == "delivered" && effect("op_down")[:status] == "quarantined" }
    stop(pid)
    expect(effect("op_flaky")).to include(attempts: 3, response_status: "200", last_error: "")
    expect(api.keys.count("op_flaky")).to eq(3)
    expect(effect("op_down")).to include(attempts: 3, response_status: "503", last_error: a_string_including("HTTP 503"))
    expect(api.keys.count("op_down")).to eq(3)
  end

  it "429 with Retry-After: the next attempt waits at least that long" do
    emit("op_429", "limited")
    pid, = start_sidecar(*destinations(limited: "/status/429/2"), "--max-attempts", "2")
    wait_for(20, 0.05, "quarantined after two attempts") { effect("op_429")[:status] == "quarantined" }
    stop(pid)
    times = api.requests.select { |r| r.key == "op_429" }.map(&:at)
    expect(times.size).to eq(2)
    expect(times[1] - times[0]).to be >= 1.9 # the backoff alone would be 100-200 ms
    expect(effect("op_429")).to include(response_status: "429", last_error: a_string_including("HTTP 429"))
  end

  it "a timeout is retried, then quarantined at max attempts; no row lock is held during the call" do
    emit("op_slow", "slow")
    pid, = start_sidecar(*destinations(slow: "/slow/3"), "--max-attempts", "2")
    wait_for(10, 0.05, "the first call in flight") { api.keys.include?("op_slow") }
    # The row is leased, not locked: another session can update it while the call runs.
    expect(db.value("SET lock_timeout = '200ms'; SELECT operation_id FROM webhook_inbox_outbox WHERE operation_id = 'op_slow' FOR UPDATE NOWAIT").lines.last.strip).to eq("op_slow")
    wait_for(20, 0.05, "quarantined") { effect("op_slow")[:status] == "quarantined" }
    stop(pid)
    expect(effect("op_slow")).to include(attempts: 2, response_status: "", last_error: a_string_including("timeout after 1s"))
  end

  it "answers saved together in one statement keep every byte: quotes, backslashes, braces, NULLs" do
    3.times { |i| emit("op_t#{i}", "tricky") }
    emit("op_r", "receipts")
    emit("op_q", "refusing")
    pid, = start_sidecar(*destinations(tricky: "/tricky", receipts: "/receipts", refusing: "/status/422"))
    wait_for(15, 0.05, "all saved") { db.int("SELECT count(*) FROM webhook_inbox_outbox WHERE status <> 'pending'") == 5 }
    stop(pid)
    3.times do |i|
      expect(effect("op_t#{i}")).to include(status: "delivered", response_status: "200", provider_id: %(r"1\\))
      expect(effect("op_t#{i}")[:response_excerpt].force_encoding("UTF-8")).to eq(FakeReceiptApi::TRICKY_BODY)
    end
    expect(effect("op_r")).to include(status: "delivered", provider_id: a_string_matching(/\Arcpt_\d+\z/))
    expect(effect("op_q")).to include(status: "quarantined", response_status: "422", last_error: a_string_including("HTTP 422"))
  end

  it "no more than the destination's concurrency in flight" do
    12.times { |i| emit("op_c#{i}", "busy") }
    pid, = start_sidecar("--destination", "busy=#{api.url}/slow/0.3 concurrency=3")
    wait_for(20, 0.05, "all delivered") { db.int("SELECT count(*) FROM webhook_inbox_outbox WHERE status = 'delivered'") == 12 }
    stop(pid)
    expect(api.max_in_flight("/slow/0.3")).to be_between(2, 3)
  end

  it "stats shows the outbox per destination; --print-config masks credentials; tokens are refused on the command line" do
    emit("op_s1", "alpha")
    emit("op_s2", "alpha")
    db.psql("UPDATE webhook_inbox_outbox SET status = 'quarantined' WHERE operation_id = 'op_s2'")
    status, out, = sidecar("stats", "--json", "--database-url", db.url)
    expect(status.exitstatus).to eq(0)
    expect(JSON.parse(out)["outbox"]).to include("alpha" => include("pending" => 1, "quarantined" => 1, "delivered_last_hour" => 0))
    expect(JSON.parse(out)["outbox"]["alpha"]).not_to have_key("delivered") # v7 counts the last hour only
    _, text, = sidecar("stats", "--database-url", db.url)
    expect(text).to include("destination=alpha pending=1 retrying=0 leased=0")
    expect(text).to match(/destination=alpha .* quarantined=1 delivered_last_hour=0$/)

    status, out, = sidecar("--print-config", "--destination", "alpha=https://api.example/x concurrency=2",
                           env: { "WEBHOOK_INBOX_DEST_ALPHA_TOKEN" => "tok_hidden" })
    expect(status.exitstatus).to eq(0)
    expect(out).to include("destination = alpha=https://api.example/x concurrency=2 token=*****")
    expect(out).not_to include("tok_hidden")
    status, _, err = sidecar("run", "--destination", "alpha=https://api.example/x token=tok_argv", "--database-url", db.url)
    expect(status.exitstatus).to eq(2)
    expect(err).to include("only in the config file").and(not_include("tok_argv"))
    status, _, err = sidecar("run", "--destination", "alpha=http://api.example/x", "--database-url", db.url)
    expect(status.exitstatus).to eq(2)
    expect(err).to include("plain http:// only to a loopback host")
  end

  RSpec::Matchers.define_negated_matcher :not_include, :include
end
