# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/story"
require "pg"
require_relative "support/fake_receipt_api"

# The failure matrix (README.md, "The contract (failure matrix)"), one example per row,
# end to end: signed HTTP requests to the Rails app under Puma, the real sidecars, a real
# PostgreSQL. Each Story step records what it observed and what the documents expect.
RSpec.describe "the failure matrix" do
  before(:all) do
    @stack = Stack.new(sidecars: 2).start
    @story = Story.new(@stack)
  end

  after(:all) { @stack&.stop }

  def expect_row(step)
    row = @story.public_send(step)
    expect(row.observed).to eq(row.expected), "#{row.name}: #{row.request}"
    row
  end

  def payments_for(order)
    @stack.sql("SELECT count(*) FROM payments WHERE order_id = #{@stack.quote(order)}").to_i
  end

  it "bad signature, tampered body, another account's event: reject receipt and any business update" do
    %i[bad_signature tampered_body other_account_event].each { |step| expect_row(step) }
    expect(@stack.sql("SELECT count(*) FROM payments WHERE tenant_id = 'shop_1' AND amount IN (3900, 4000, 4100, 1)").to_i).to eq(0)
  end

  it "same event sent twice concurrently: one inbox row; no duplicated side effect" do
    row = expect_row(:concurrent_duplicate)
    expect(payments_for(row.order)).to eq(1)
    expect(row.observed[:rows]).to eq(1)
  end

  it "stored, then the connection drops before the 200 reaches the sender: the retry finds the pending row and processing continues" do
    expect_row(:dropped_connection_retry)
  end

  it "the worker dies after the business update, before done: the transaction rolls back; safe retry" do
    expect_row(:sidecar_killed_mid_transaction)
  end

  it "amount/currency mismatch, or a conflicting concurrent order change: never marked paid (quarantined or retried)" do
    %i[amount_mismatch currency_mismatch conflicting_order_change payment_before_order].each { |step| expect_row(step) }
    reasons = @stack.sql("SELECT last_error FROM webhook_inbox WHERE status = 'quarantined'").lines.map(&:strip)
    expect(reasons).to include(a_string_matching(/amount\/currency mismatch/), a_string_matching(/conflicts/))
  end

  it "an old notification arrives after a newer state: no forbidden backward transition" do
    %i[stale_stripe_notification stale_didit_notification].each { |step| expect_row(step) }
    backward = @stack.sql("SELECT count(*) FROM order_transitions WHERE NOT (from_status, to_status) IN " \
                          "(('awaiting_payment', 'paid'), ('paid', 'refunded'))").to_i
    expect(backward).to eq(0)
  end

  it "the external API succeeded, then we died before saving: retry with the same business key reconciles it" do
    api = FakeReceiptApi.new
    row = expect_row(:normal_payment)
    effect = ->(col) { @stack.sql("SELECT #{col} FROM webhook_inbox_outbox WHERE payload ->> 'order_id' = #{@stack.quote(row.order)}").strip }
    key = effect.call("operation_id")
    expect(key).to start_with("receipt:pi_")
    expect(effect.call("source_event_id")).not_to be_empty # emitted by the payment's handler

    # The sidecar that delivers (the others have no destination). While the API answers, the
    # effect's row is locked, so the sidecar's save waits: it is killed right there.
    locker = PG.connect(@stack.pg.url)
    api.before_answer = lambda do |req|
      next unless req["Idempotency-Key"] == key && !@locked

      @locked = true
      locker.exec("BEGIN")
      locker.exec_params("SELECT 1 FROM webhook_inbox_outbox WHERE operation_id = $1 FOR UPDATE", [key])
    end
    deliver = ["--destination", "receipts=#{api.url}/receipts", "--destination-timeout", "1s", "--destination-lease", "2s"]
    @stack.start_sidecar(9, *deliver)
    saver = @stack.wait_until(timeout: 20) do
      pid = @stack.sql("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%outbox_save%'").strip
      pid unless pid.empty?
    end
    @stack.kill_sidecar(9) # kill -9 after the API answered, before the save
    @stack.sql("SELECT pg_terminate_backend(#{saver})")
    locker.exec("ROLLBACK")
    expect(api.effects[key]).to eq(1)
    expect(effect.call("status")).to eq("pending")

    @stack.start_sidecar(9, *deliver) # after the lease, the same key again
    @stack.wait_until(timeout: 20) { effect.call("status") == "delivered" }
    expect(api.keys.count(key)).to eq(2)
    expect(api.effects[key]).to eq(1) # the retry reused the key: still one receipt
    expect(api.effects.values).to all(eq(1)) # (so did every other payment's receipt this sidecar sent)
    expect(effect.call("provider_id")).to match(/\Arcpt_\d+\z/)

    # A second event for the same payment (another event id) adds no second operation.
    payload = JSON.parse(@stack.sql("SELECT payload FROM webhook_inbox WHERE outcome = 'paid' AND payload #>> '{data,object,metadata,order_id}' = #{@stack.quote(row.order)}"))
    payload["id"] = "evt_replayed_#{SecureRandom.hex(4)}"
    expect(@story.deliver_stripe(JSON.generate(payload))).to eq(200)
    @story.wait_settled(payload["id"])
    expect(@story.outcome(payload["id"])).to eq("duplicate")
    expect(@stack.sql("SELECT count(*) FROM webhook_inbox_outbox WHERE payload ->> 'order_id' = #{@stack.quote(row.order)}").to_i).to eq(1)
  ensure
    @stack.kill_sidecar(9)
    locker&.close
    api&.stop
  end
end
