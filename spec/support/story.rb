# frozen_string_literal: true

require "json"
require "securerandom"
require "pg"
require "webhook_inbox/test_helpers"
require_relative "stack"

# Story - the documents' scenarios played against a running Stack with real signed requests.
# Each step returns a Row: what was sent, what was observed (HTTP status, inbox status, business
# state) and what the documents expect. bin/demo prints the rows; the failure-matrix spec
# asserts them. Ids carry a random suffix so steps can run in any order on one stack.
class Story
  Row = Struct.new(:name, :request, :observed, :expected, :order, keyword_init: true) do
    def ok?
      observed == expected
    end
  end

  Signer = WebhookInbox::TestHelpers
  STRIPE = Stack::SCOPES[:stripe]
  DIDIT = Stack::SCOPES[:didit]

  def initialize(stack)
    @stack = stack
    @run = SecureRandom.hex(3)
  end

  # The matrix: "same event sent twice concurrently" and the normal path.
  def normal_payment
    order = new_order(2000)
    event, body = payment(order, 2000)
    http = deliver_stripe(body)
    row("normal payment", "POST stripe #{event}", http, event, order,
        expected: { http: [200], inbox: "done", order: "paid", transitions: 1 })
  end

  def concurrent_duplicate
    order = new_order(2500)
    event, body = payment(order, 2500)
    statuses = 2.times.map { Thread.new { deliver_stripe(body) } }.map(&:value)
    row("same event twice, concurrently", "POST stripe #{event} x2 at once", statuses.sort, event, order,
        expected: { http: [200, 200], inbox: "done", order: "paid", transitions: 1, rows: 1 })
  end

  # "stored, then the connection drops before the 200 reaches the sender": the sidecars are
  # paused so the retry meets the row still pending; then processing continues.
  def dropped_connection_retry
    order = new_order(3000)
    event, body = payment(order, 3000)
    headers = Signer.stripe_headers(body, secret: Stack::SECRETS[:stripe])
    paused = @stack.pause_sidecars
    @stack.post_and_drop("/webhooks/stripe", body, headers) { inbox_rows(event).positive? }
    retry_status, answer = @stack.post("/webhooks/stripe", body, headers)
    pending_at_retry = inbox_status(event)
    @stack.resume_sidecars(paused)
    result = row("retry after a dropped connection", "POST stripe #{event}, drop, retry", [retry_status], event, order,
                 expected: { http: [200], answer: "duplicate", pending_at_retry: "pending", inbox: "done",
                             order: "paid", transitions: 1, rows: 1 })
    result.observed.merge!(answer: (answer["status"] rescue answer), pending_at_retry: pending_at_retry)
    result
  end

  # "bad signature, tampered body, another account's event"
  def tampered_body
    order = new_order(4000)
    event, body = payment(order, 4000)
    headers = Signer.stripe_headers(body, secret: Stack::SECRETS[:stripe])
    tampered = body.sub('"amount":4000', '"amount":1')
    status, = @stack.post("/webhooks/stripe", tampered, headers)
    row("tampered body", "POST stripe #{event} (amount edited)", [status], event, order, settle: false,
        expected: { http: [401], inbox: "(none)", order: "awaiting_payment", transitions: 0, rows: 0 })
  end

  def bad_signature
    order = new_order(3900)
    event, body = payment(order, 3900)
    headers = { "Stripe-Signature" => "t=#{Time.now.to_i},v1=#{'0' * 64}", "Content-Type" => "application/json" }
    status, = @stack.post("/webhooks/stripe", body, headers)
    row("bad signature", "POST stripe #{event} (wrong v1)", [status], event, order, settle: false,
        expected: { http: [401], inbox: "(none)", order: "awaiting_payment", transitions: 0, rows: 0 })
  end

  def other_account_event
    order = new_order(4100)
    event, body = payment(order, 4100)
    status = deliver_stripe(body, secret: "whsec_another_account")
    row("another account's event", "POST stripe #{event} (other secret)", [status], event, order, settle: false,
        expected: { http: [401], inbox: "(none)", order: "awaiting_payment", transitions: 0, rows: 0 })
  end

  # "amount/currency mismatch, or a conflicting concurrent order change"
  def amount_mismatch
    order = new_order(5000)
    event, body = payment(order, 4000)
    http = deliver_stripe(body)
    row("amount mismatch", "POST stripe #{event} (4000 for a 5000 order)", http, event, order,
        expected: { http: [200], inbox: "quarantined", order: "awaiting_payment", transitions: 0 })
  end

  def currency_mismatch
    order = new_order(5200, currency: "usd")
    event, body = payment(order, 5200, currency: "jpy")
    http = deliver_stripe(body)
    row("currency mismatch", "POST stripe #{event} (jpy for a usd order)", http, event, order,
        expected: { http: [200], inbox: "quarantined", order: "awaiting_payment", transitions: 0 })
  end

  # A transient failure: the payment arrives before the order exists. The event is retried
  # with backoff (attempts recorded) and applied once the order appears.
  def payment_before_order
    order = "ord_#{@run}_late_#{SecureRandom.hex(2)}"
    event, body = payment(order, 5300)
    http = deliver_stripe(body)
    @stack.wait_until(timeout: 30) { attempts(event).positive? }
    retried = inbox_status(event)
    @stack.sql("INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES ('shop_1', #{@stack.quote(order)}, 5300, 'jpy')")
    result = row("payment before its order", "POST stripe #{event} (order created later)", http, event, order,
                 expected: { http: [200], retried: "pending", inbox: "done", order: "paid", transitions: 1 })
    result.observed[:retried] = retried
    result
  end

  def conflicting_order_change
    order = new_order(5100)
    first, first_body = payment(order, 5100)
    deliver_stripe(first_body)
    wait_settled(first)
    second, second_body = payment(order, 5100) # another payment for the same, already paid order
    http = deliver_stripe(second_body)
    row("second payment for a paid order", "POST stripe #{second} (another payment)", http, second, order,
        expected: { http: [200], inbox: "quarantined", order: "paid", transitions: 1 })
  end

  # "an old notification arrives after a newer state"
  def stale_stripe_notification
    order = new_order(6000)
    paid, body = payment(order, 6000)
    deliver_stripe(body)
    wait_settled(paid)
    old, old_body = payment(order, 6000, type: "payment_intent.processing")
    http = deliver_stripe(old_body)
    row("old notification after paid", "POST stripe #{old} (processing, late)", http, old, order,
        expected: { http: [200], inbox: "done", order: "paid", transitions: 1, outcome: "ignored: stale" })
  end

  def stale_didit_notification
    session = SecureRandom.uuid
    approved = didit_event(session, "Approved")
    deliver_didit(approved)
    wait_settled(JSON.parse(approved)["event_id"], scope: DIDIT)
    late = didit_event(session, "In Progress")
    event = JSON.parse(late)["event_id"]
    http = deliver_didit(late)
    wait_settled(event, scope: DIDIT)
    observed = { http: http, inbox: inbox_status(event, scope: DIDIT), identity: identity_status(session),
                 outcome: outcome(event, scope: DIDIT) }
    Row.new(name: "Didit: old status after Approved", request: "POST didit #{event[0, 8]} (In Progress, late)",
            observed: observed,
            expected: { http: [200], inbox: "done", identity: "Approved", outcome: "ignored: stale" })
  end

  # "the worker dies after the business update, before done": the handler has updated the
  # order and blocks on a payments row another session is inserting; the sidecar is killed
  # there. Its transaction must roll back, and a restarted sidecar must apply it once.
  def sidecar_killed_mid_transaction
    order = new_order(7000)
    event, body = payment(order, 7000)
    payment_id = JSON.parse(body).dig("data", "object", "id")
    @stack.stop_sidecar(1)
    blocker = PG.connect(@stack.pg.url)
    blocker.exec("BEGIN")
    blocker.exec_params("INSERT INTO payments (payment_id, tenant_id, order_id, amount, currency, event_id) " \
                        "VALUES ($1, 'blocker', 'blocker', 0, 'jpy', 'blocker')", [payment_id])
    http = deliver_stripe(body)
    @stack.wait_until { handler_blocked? }
    @stack.kill_sidecar(0, "KILL")
    @stack.wait_until { !handler_blocked? }
    blocker.exec("ROLLBACK")
    rolled_back = order_state(order) == "awaiting_payment" && inbox_status(event) == "pending"
    2.times { |i| @stack.start_sidecar(i) }
    observed_row = row("sidecar killed mid-transaction", "POST stripe #{event}; kill -9 the sidecar in the handler",
                       http, event, order,
                       expected: { http: [200], inbox: "done", order: "paid", transitions: 1, rolled_back: true })
    observed_row.observed[:rolled_back] = rolled_back
    observed_row
  ensure
    blocker&.close
  end

  def steps
    %i[normal_payment concurrent_duplicate dropped_connection_retry tampered_body other_account_event
       amount_mismatch stale_stripe_notification stale_didit_notification sidecar_killed_mid_transaction]
  end

  # --- building blocks ----------------------------------------------------------------------

  def new_order(amount, currency: "jpy")
    @order_seq = (@order_seq || 0) + 1
    id = "ord_#{@run}_#{@order_seq}"
    @stack.sql("INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES ('shop_1', '#{id}', #{Integer(amount)}, '#{currency}')")
    id
  end

  # A Stripe event for order; returns [event_id, body].
  def payment(order, amount, type: "payment_intent.succeeded", currency: "jpy")
    event = "evt_#{SecureRandom.hex(8)}"
    body = { id: event, object: "event", type: type, created: Time.now.to_i,
             data: { object: { id: "pi_#{SecureRandom.hex(6)}", object: "payment_intent", amount: amount,
                               currency: currency, status: type.split(".").last,
                               metadata: { tenant_id: "shop_1", order_id: order } } } }
    [event, JSON.generate(body)]
  end

  def didit_event(session, status)
    JSON.generate(event_id: SecureRandom.uuid, session_id: session, status: status, webhook_type: "status.updated",
                  timestamp: Time.now.to_i, vendor_data: "user-42", created_at: Time.now.to_i)
  end

  def deliver_stripe(body, secret: Stack::SECRETS[:stripe])
    @stack.post("/webhooks/stripe", body, Signer.stripe_headers(body, secret: secret)).first
  end

  def deliver_didit(body)
    [@stack.post("/webhooks/didit", body, Signer.didit_headers(body, secret: Stack::SECRETS[:didit])).first]
  end

  def inbox_status(event, scope: STRIPE)
    status = @stack.inbox_status(scope, event)
    status.empty? ? "(none)" : status
  end

  def inbox_rows(event, scope: STRIPE)
    @stack.sql("SELECT count(*) FROM webhook_inbox WHERE source_scope = #{@stack.quote(scope)} AND event_id = #{@stack.quote(event)}").to_i
  end

  def outcome(event, scope: STRIPE)
    @stack.sql("SELECT coalesce(outcome, last_error, '') FROM webhook_inbox WHERE source_scope = #{@stack.quote(scope)} AND event_id = #{@stack.quote(event)}").strip
  end

  def order_state(order)
    @stack.sql("SELECT status FROM orders WHERE order_id = #{@stack.quote(order)}").strip
  end

  def transitions(order)
    @stack.sql("SELECT count(*) FROM order_transitions WHERE order_id = #{@stack.quote(order)}").to_i
  end

  def identity_status(session)
    @stack.sql("SELECT status FROM identity_checks WHERE session_id = #{@stack.quote(session)}").strip
  end

  # Waits until the event left 'pending' (processed, or quarantined).
  def wait_settled(event, scope: STRIPE)
    @stack.wait_until(timeout: 60) { !%w[pending].include?(inbox_status(event, scope: scope)) }
  end

  def attempts(event, scope: STRIPE)
    @stack.sql("SELECT attempts FROM webhook_inbox WHERE source_scope = #{@stack.quote(scope)} AND event_id = #{@stack.quote(event)}").to_i
  end

  def handler_blocked?
    @stack.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sidecar' " \
               "AND wait_event_type = 'Lock'").to_i.positive?
  end

  private

  def row(name, request, http, event, order, expected:, settle: true)
    wait_settled(event) if settle
    observed = { http: Array(http), inbox: inbox_status(event), order: order_state(order), transitions: transitions(order) }
    observed[:rows] = inbox_rows(event) if expected.key?(:rows)
    observed[:outcome] = outcome(event) if expected.key?(:outcome)
    Row.new(name: name, request: request, observed: observed, expected: expected, order: order)
  end
end
