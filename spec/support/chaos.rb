# frozen_string_literal: true

require "json"
require "securerandom"
require "webhook_inbox/test_helpers"
require_relative "stack"

# Chaos - a bounded chaos run against a started Stack. Senders deliver signed Stripe events
# for many orders (payments, exact duplicates, replays under new event ids, stale
# notifications, refunds, amount mismatches) in random order, retrying like a provider until
# they get a 200, while a monkey kills sidecars (kill -9), terminates their connections and
# restarts PostgreSQL. Then it waits for the inbox to drain and checks the invariants.
class Chaos
  # Quick retries, and enough attempts that a refund overtaking its payment outlives the chaos.
  SIDECAR_ARGS = %w[--backoff-base 100ms --backoff-cap 1s --poll-interval 500ms --max-attempts 1000].freeze

  Report = Struct.new(:deliveries, :acknowledged, :http_attempts, :faults, :violations, :seconds, keyword_init: true)

  def initialize(stack, orders: 40, senders: 8, seed: Random.new_seed, db_restarts: 1, fault_interval: 0.25)
    @stack = stack
    @orders = orders
    @senders = senders
    @rng = Random.new(seed)
    @seed = seed
    @db_restarts = db_restarts
    @fault_interval = fault_interval
    @faults = Hash.new(0)
    @acked = Queue.new
    @attempts = Queue.new
  end

  attr_reader :seed

  def run(drain_timeout: 120)
    started = clock
    plan = build_plan.shuffle(random: @rng)
    # The deliveries go out in db_restarts + 1 chunks; each next chunk is queued while
    # PostgreSQL is down, so every restart meets live load (senders retrying 503s).
    chunks = plan.each_slice((plan.size / (@db_restarts + 1.0)).ceil).to_a
    queue = Queue.new
    enqueue(queue, chunks)
    senders = Array.new(@senders) { Thread.new { send_all(queue) } }
    monkey = Thread.new { make_chaos(senders, queue, chunks) }
    senders.each(&:join)
    monkey.join
    @stack.resume_sidecars(@stack.sidecar_indexes_missing)
    @stack.wait_until(timeout: drain_timeout, interval: 0.2) { pending.zero? }
    acked = drain(@acked)
    Report.new(deliveries: plan.size, acknowledged: acked.uniq.size, http_attempts: drain(@attempts).sum,
               faults: @faults.dup, violations: violations(acked), seconds: (clock - started).round(1))
  end

  private

  # Per order: the payment (sometimes delivered twice at once), sometimes a replay of the same
  # payment under a new event id, a stale 'processing' notification, a refund; a few orders
  # only ever get a payment with the wrong amount.
  def build_plan
    @expect = {}
    values = []
    plan = []
    @orders.times do |i|
      order = "chaos_#{SecureRandom.hex(3)}_#{i}"
      amount = 1000 + i
      values << "('shop_chaos', '#{order}', #{amount}, 'jpy')"
      pi = "pi_#{SecureRandom.hex(6)}"
      if (i % 10) == 9 # only a wrong-amount payment: quarantined, the order never moves
        plan << event(order, amount + 1, "payment_intent.succeeded", pi)
        @expect[order] = "awaiting_payment"
        next
      end
      pay = event(order, amount, "payment_intent.succeeded", pi)
      plan << pay
      plan << pay if @rng.rand < 0.3                                                     # exact duplicate
      plan << event(order, amount, "payment_intent.succeeded", pi) if @rng.rand < 0.3   # replay, new event id
      plan << event(order, amount, "payment_intent.processing", pi) if @rng.rand < 0.5  # stale or early
      refund = @rng.rand < 0.3
      plan << refund_event(order, amount, pi) if refund
      @expect[order] = refund ? "refunded" : "paid"
    end
    @stack.sql("INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES #{values.join(', ')}")
    plan
  end

  def event(order, amount, type, pi)
    id = "evt_#{SecureRandom.hex(8)}"
    [id, JSON.generate(id: id, type: type, data: { object: { id: pi, object: "payment_intent", amount: amount, currency: "jpy",
                                                              metadata: { tenant_id: "shop_chaos", order_id: order } } })]
  end

  def refund_event(order, amount, pi)
    id = "evt_#{SecureRandom.hex(8)}"
    [id, JSON.generate(id: id, type: "charge.refunded",
                       data: { object: { id: "ch_#{SecureRandom.hex(6)}", object: "charge", payment_intent: pi, amount: amount,
                                         amount_refunded: amount, currency: "jpy", refunded: true,
                                         metadata: { tenant_id: "shop_chaos", order_id: order } } })]
  end

  # A provider: retries each delivery (fresh signature each time) until it gets a 200.
  def send_all(queue)
    while (delivery = queue.pop)
      id, body = delivery
      tries = 0
      loop do
        tries += 1
        status = begin
          @stack.post("/webhooks/stripe", body, WebhookInbox::TestHelpers.stripe_headers(body, secret: Stack::SECRETS[:stripe])).first
        rescue SystemCallError, IOError, Net::ReadTimeout, Net::OpenTimeout
          0
        end
        break @acked << id if status == 200
        raise "delivery #{id} refused with #{status}" if status.between?(400, 499)
        raise "delivery #{id} not accepted after #{tries} tries" if tries > 400

        sleep 0.05
      end
      @attempts << tries
    end
  end

  # Queues the next chunk; after the last one, one stop marker per sender.
  def enqueue(queue, chunks)
    chunks.shift&.each { |delivery| queue << delivery }
    @senders.times { queue << nil } if chunks.empty?
  end

  # Restarts PostgreSQL whenever the queued chunk is used up (queuing the next one while the
  # server is down), and in between kills sidecars or their connections at random.
  def make_chaos(senders, queue, chunks)
    next_fault = clock + @fault_interval * @rng.rand
    while senders.any?(&:alive?)
      if chunks.any? && queue.empty?
        restart_database { enqueue(queue, chunks) }
      elsif clock >= next_fault
        @rng.rand < 0.6 ? kill_a_sidecar : terminate_sidecar_connections
        next_fault = clock + @fault_interval * (0.5 + @rng.rand)
      else
        sleep 0.01
      end
    end
  end

  def kill_a_sidecar
    index = @stack.sidecar_indexes.sample(random: @rng) or return
    @stack.kill_sidecar(index, "KILL")
    @faults[:sidecar_kill9] += 1
    sleep 0.1
    @stack.start_sidecar(index)
  end

  def terminate_sidecar_connections
    @stack.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sidecar'")
    @faults[:connection_kill] += 1
  rescue RuntimeError
    nil # the database is restarting
  end

  # Stops PostgreSQL (a crash or a fast shutdown), yields while it is down, starts it again.
  def restart_database
    @stack.pg.stop(mode: @rng.rand < 0.5 ? "immediate" : "fast")
    yield if block_given?
    sleep 0.5
    @stack.pg.start
    @faults[:database_restart] += 1
  end

  def pending
    @stack.sql("SELECT count(*) FROM webhook_inbox WHERE status = 'pending'").to_i
  end

  # Invariants: every acknowledged event is stored and settled (done or quarantined); no order
  # moved twice or backwards; each order ends where its events say; one payment per paid order.
  def violations(acked)
    found = []
    rows = @stack.sql("SELECT event_id || '|' || status FROM webhook_inbox WHERE source_scope = #{@stack.quote(Stack::SCOPES[:stripe])}")
                 .lines.to_h { |l| l.strip.split("|", 2) }
    acked.uniq.each do |id|
      status = rows[id]
      found << "acknowledged #{id} has no inbox row (lost)" unless status
      found << "acknowledged #{id} is still #{status}" if status && !%w[done quarantined].include?(status)
    end
    transitions = @stack.sql("SELECT order_id || '|' || from_status || '|' || to_status FROM order_transitions " \
                             "WHERE tenant_id = 'shop_chaos' ORDER BY id").lines.map { |l| l.strip.split("|") }
    transitions.group_by(&:first).each do |order, moves|
      steps = moves.map { |_, from, to| "#{from}->#{to}" }
      allowed = [%w[awaiting_payment->paid], %w[awaiting_payment->paid paid->refunded]]
      found << "order #{order} moved #{steps.join(', ')}" unless allowed.include?(steps)
    end
    states = @stack.sql("SELECT order_id || '|' || status FROM orders WHERE tenant_id = 'shop_chaos'").lines.to_h { |l| l.strip.split("|", 2) }
    @expect.each { |order, want| found << "order #{order} is #{states[order]}, expected #{want}" unless states[order] == want }
    payments = @stack.sql("SELECT count(*) FROM payments WHERE tenant_id = 'shop_chaos'").to_i
    paid = @expect.count { |_, want| want != "awaiting_payment" }
    found << "#{payments} payments recorded for #{paid} paid orders" unless payments == paid
    found
  end

  def drain(queue)
    Array.new(queue.size) { queue.pop }
  end

  def clock
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
