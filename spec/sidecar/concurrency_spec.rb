# frozen_string_literal: true

require_relative "sidecar_helper"

# Four sidecars (two connections each, batches of 100, two with --batch-linger) on 10,000 inbox rows inserted in
# shuffled chunks while they run: duplicates under new event ids, refunds that overtake
# their payment, stale notifications, amount mismatches. Every row ends done or
# quarantined and no order makes any transition twice (order_transitions audit trigger).
RSpec.describe "webhook-inbox-sidecar with 4 processes on 10,000 events", :sidecar do
  include SidecarHelper::Payloads

  before(:all) { @db = SidecarHelper::DB.new(TestDatabase.cluster) }
  let(:db) { @db }

  it "processes every event exactly once in effect" do
    db.reset!
    rng = Random.new(20_261_130)
    orders = 3000
    bad = 200 # orders 0...bad get a payment of the wrong amount
    cur = %w[usd eur jpy]
    order = ->(i) { ["t#{i % 3}", "o#{i}", 100 + (i * 37 % 9000), cur[i % 3]] }
    db.psql("INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES " +
            (0...orders).map { |i| t, o, a, c = order.(i); "('#{t}','#{o}',#{a},'#{c}')" }.join(","))

    events = []
    (0...orders).each do |i|
      t, o, a, c = order.(i)
      events << ["evt_pay_#{i}", "payment_intent.succeeded", succeeded("pi_#{i}", t, o, i < bad ? a + 1 : a, c)]
    end
    good = (bad...orders).to_a
    4500.times do |k|
      i = good.sample(random: rng)
      t, o, a, c = order.(i)
      events << ["evt_dup_#{k}", "payment_intent.succeeded", succeeded("pi_#{i}", t, o, a, c)]
    end
    refunded = good.sample(1000, random: rng)
    refunded.each do |i|
      t, o, a, c = order.(i)
      events << ["evt_ref_#{i}", "charge.refunded", refunded("ch_#{i}", "pi_#{i}", t, o, a, c)]
    end
    1500.times do |k|
      i = good.sample(random: rng)
      t, o, a, c = order.(i)
      events << ["evt_proc_#{k}", "payment_intent.processing", payment("payment_intent.processing", "pi_#{i}", t, o, a, c)]
    end
    expect(events.size).to eq(10_000)
    events.shuffle!(random: rng)

    args = ["run", "--database-url", db.url, "--concurrency", "2", "--batch-size", "100", "--backoff-base", "50ms",
            "--backoff-cap", "200ms", "--max-attempts", "1000", "--poll-interval", "1s", "--lock-timeout", "100ms",
            "--log-events=false"]
    # Two of them linger after partial batches (--batch-linger): the same guarantees hold.
    pids = Array.new(4) { |i| spawn_sidecar(*args, *(i.even? ? %w[--batch-linger 2ms] : [])).first }

    sql_file = File.join(Dir.tmpdir, "wi-10k-#{SecureRandom.hex(3)}.sql")
    events.each_slice(1000) do |chunk|
      values = chunk.map do |id, type, payload|
        "('#{SidecarHelper::SCOPE}', '#{id}', '#{type}', '#{JSON.generate(payload)}'::jsonb, now() - random() * interval '1 second')"
      end
      File.write(sql_file, "INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at) VALUES " +
                           values.join(",\n") + ";\n")
      db.pg.psql_file(sql_file, db: db.name)
    end
    File.delete(sql_file)

    wait_for(120, 0.2, "the inbox to drain") { db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'pending'").zero? }
    pids.each { |pid| Process.kill("TERM", pid) }
    pids.each { |pid| expect(wait_exit(pid)&.exitstatus).to eq(0) }

    expect(db.int("SELECT count(*) FROM webhook_inbox")).to eq(10_000)
    expect(db.value("SELECT string_agg(status || '=' || n, ',' ORDER BY status) FROM " \
                    "(SELECT status, count(*) n FROM webhook_inbox GROUP BY status) s")).to eq("done=9800,quarantined=200")
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE status = 'quarantined' AND event_id NOT LIKE 'evt_pay_%'")).to eq(0)
    # No order transitioned twice, and exactly the expected transitions happened.
    expect(db.int("SELECT count(*) FROM (SELECT 1 FROM order_transitions GROUP BY order_id, to_status HAVING count(*) > 1) d")).to eq(0)
    expect(db.int("SELECT count(*) FROM order_transitions WHERE to_status = 'paid'")).to eq(orders - bad)
    expect(db.int("SELECT count(*) FROM order_transitions WHERE to_status = 'refunded'")).to eq(1000)
    expect(db.int("SELECT count(*) FROM orders WHERE status = 'awaiting_payment'")).to eq(bad)
    expect(db.int("SELECT count(*) FROM orders WHERE status = 'refunded'")).to eq(1000)
    expect(db.int("SELECT count(*) FROM payments")).to eq(orders - bad)
    expect(db.int("SELECT count(*) FROM refunds")).to eq(1000)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE outcome = 'paid'")).to eq(orders - bad)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE outcome = 'refunded'")).to eq(1000)
    expect(db.int("SELECT count(*) FROM webhook_inbox WHERE outcome = 'duplicate'")).to eq(4500)
    expect(db.int("SELECT count(*) FROM webhook_inbox w JOIN orders o ON o.order_id = w.payload #>> '{data,object,metadata,order_id}' " \
                  "WHERE w.outcome = 'paid' AND o.payment_id <> w.payload #>> '{data,object,id}'")).to eq(0)
  end
end
