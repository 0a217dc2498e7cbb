# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/story"
require_relative "support/fake_receipt_api"

# The documents' failure matrix (../shared/context/seeds-digest.md), one example per row,
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
    delivery = ->(col) { @stack.sql("SELECT #{col} FROM receipt_deliveries WHERE order_id = #{@stack.quote(row.order)}").strip }
    key = delivery.call("operation_id")
    expect(key).to start_with("receipt:pi_")

    sender = [RbConfig.ruby, File.join(__dir__, "support/receipt_sender.rb"), @stack.pg.url, api.url, "--lease", "0.5",
              "--operation", key]
    system(*sender, "--die-after-call")
    expect($?.termsig).to eq(9) # killed after the API answered, before saving
    expect(api.effects[key]).to eq(1)
    expect(delivery.call("status")).to eq("pending")

    sleep 0.6 # the dead sender's lease expires
    expect(system(*sender)).to be(true)
    expect(delivery.call("status")).to eq("sent")
    expect(delivery.call("external_id")).to eq("rcpt_1")
    expect(api.effects).to eq(key => 1) # the retry reused the key: still one receipt

    # A second event for the same payment (another event id) adds no second operation.
    payload = JSON.parse(@stack.sql("SELECT payload FROM webhook_inbox WHERE outcome = 'paid' AND payload #>> '{data,object,metadata,order_id}' = #{@stack.quote(row.order)}"))
    payload["id"] = "evt_replayed_#{SecureRandom.hex(4)}"
    expect(@story.deliver_stripe(JSON.generate(payload))).to eq(200)
    @story.wait_settled(payload["id"])
    expect(@story.outcome(payload["id"])).to eq("duplicate")
    expect(@stack.sql("SELECT count(*) FROM receipt_deliveries WHERE order_id = #{@stack.quote(row.order)}").to_i).to eq(1)
  ensure
    api&.stop
  end
end
