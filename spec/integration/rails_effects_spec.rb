# frozen_string_literal: true

require "spec_helper"
require "json"
require "securerandom"
require "webhook_inbox/testing/signing"
require_relative "../support/receiver_helpers"

# Issue 11 item 3: the Rails app as an outbox destination. A real sidecar signs each effect
# with Standard Webhooks (webhook-id "<destination path> <operation id>") and POSTs it to spec/rails_app under
# Puma, where receive_effect(:send_receipt) runs the block once per operation id, its writes
# committed with the dedupe row: a redelivery is answered "duplicate" without running it.
RSpec.describe "Ruby side effects: receive_effect in a Rails app" do
  include ReceiverHelpers

  EFFECTS_SECRET = "whsec_#{[SecureRandom.bytes(24)].pack('m0')}"
  EFFECTS_SIDECAR = File.join(ReceiverHelpers::ROOT, "lib/webhook_inbox/webhook-inbox-sidecar")
  EFFECTS_STRIPE_SECRET = "whsec_effects_#{SecureRandom.hex(8)}"

  before(:all) do
    @pg = TestDatabase.cluster
    @db = "effects_#{SecureRandom.hex(4)}"
    @pg.psql("CREATE DATABASE #{@db}", db: "postgres")
    out = IO.popen([EFFECTS_SIDECAR, "migrate", "--database-url", @pg.url(@db)], err: %i[child out], &:read)
    raise "migrate: #{out}" unless $?.success?

    @pg.psql(File.read(File.join(ReceiverHelpers::ROOT, "spec/rails_app/db/app_schema.sql")), db: @db)
    @pg.psql("INSERT INTO webhook_inbox_routes (event_type, handler, destination) " \
             "VALUES ('identity.*', 'webhook_inbox_deliver', 'identity')", db: @db)
    app = File.join(ReceiverHelpers::ROOT, "spec/rails_app")
    @puma = PumaProcess.new(rackup: File.join(app, "config.ru"), dir: app, threads: "4:4",
                            env: { "DATABASE_URL" => @pg.url(@db), "RAILS_ENV" => "production",
                                   "SECRET_KEY_BASE" => "s" * 64, "STRIPE_WEBHOOK_SECRET" => EFFECTS_STRIPE_SECRET,
                                   "STRIPE_SCOPE" => "stripe:acct_fx:live", "WEBHOOK_INBOX_EFFECT_SECRET" => EFFECTS_SECRET }).start
    @log = File.join(Dir.tmpdir, "wi-effects-sidecar-#{SecureRandom.hex(4)}.log")
    @sidecar = Process.spawn({ "WEBHOOK_INBOX_DEST_APP_SECRET" => EFFECTS_SECRET,
                               "WEBHOOK_INBOX_DEST_IDENTITY_SECRET" => EFFECTS_SECRET }, EFFECTS_SIDECAR, "run",
                             "--database-url", @pg.url(@db), "--concurrency", "1", "--poll-interval", "200ms",
                             "--backoff-base", "100ms", "--backoff-cap", "200ms", "--max-attempts", "3",
                             "--destination", "app=http://127.0.0.1:#{@puma.port}/effects/send_receipt sign=standard_webhooks",
                             "--destination", "identity=http://127.0.0.1:#{@puma.port}/effects/identity_event sign=standard_webhooks",
                             "--destination-timeout", "5s", "--destination-lease", "6s",
                             out: File::NULL, err: @log)
  end

  after(:all) do
    if @sidecar
      Process.kill("TERM", @sidecar)
      Process.wait(@sidecar)
    end
    @puma&.stop
  end

  def sql(text) = @pg.psql(text, db: @db).strip
  def q(text) = "'#{text.gsub("'", "''")}'"

  def emit(op, payload)
    sql("SELECT webhook_inbox_emit(#{q(op)}, 'app', #{q(JSON.generate(payload))}::jsonb)")
  end

  def status(op) = sql("SELECT status FROM webhook_inbox_outbox WHERE operation_id = #{q(op)}")
  def runs(op) = sql("SELECT count(*) FROM effect_runs WHERE operation_id = #{q(op)}").to_i
  def calls = sql("SELECT last_value FROM effect_block_calls").to_i

  def wait_until(timeout = 20)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    sleep 0.05 until yield || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    expect(yield).to be_truthy
  end

  it "runs the block once; a redelivery after a crash before the save is answered duplicate without running it" do
    op = "receipt:pi_#{SecureRandom.hex(4)}"
    emit(op, "payment_id" => "pi_1")
    wait_until { status(op) == "delivered" }
    expect(runs(op)).to eq(1)
    expect(sql("SELECT name FROM webhook_inbox_effects_received WHERE operation_id = #{q(op)}")).to eq("send_receipt")

    # The sidecar's view after dying between the app's 200 and the save: pending again.
    before = calls
    sql("UPDATE webhook_inbox_outbox SET status = 'pending', next_attempt_at = now(), processed_at = NULL " \
        "WHERE operation_id = #{q(op)}; NOTIFY webhook_inbox_outbox")
    wait_until { status(op) == "delivered" && sql("SELECT attempts FROM webhook_inbox_outbox WHERE operation_id = #{q(op)}") == "2" }
    expect(runs(op)).to eq(1)
    expect(calls).to eq(before) # the block did not run again
    expect(sql("SELECT response_excerpt FROM webhook_inbox_outbox WHERE operation_id = #{q(op)}")).to include("duplicate")
  end

  it "concurrent redeliveries of one operation: one run, the others wait and answer duplicate" do
    op = "receipt:pi_#{SecureRandom.hex(4)}"
    body = JSON.generate("payment_id" => "pi_2", "sleep" => 0.3)
    headers = WebhookInbox::Testing::Signing.standard_webhooks_headers(body, secret: EFFECTS_SECRET, id: "/effects/send_receipt #{op}")
                                            .merge("Content-Type" => "application/json")
    answers = 3.times.map { Thread.new { @puma.post("/effects/send_receipt", body, headers) } }.map(&:value)
    expect(answers.map(&:first)).to all(eq(200))
    expect(answers.map(&:last).sort).to eq([%({"status":"done"}), %({"status":"duplicate"}), %({"status":"duplicate"})])
    expect(runs(op)).to eq(1)
  end

  it "a failing block rolls its writes back and is retried, then quarantined; EffectRejected quarantines at once; a bad signature is 401" do
    failing = "receipt:pi_#{SecureRandom.hex(4)}"
    refused = "receipt:none_#{SecureRandom.hex(4)}"
    emit(failing, "payment_id" => "pi_3", "fail" => true)
    emit(refused, "other" => 1)
    wait_until { status(failing) == "quarantined" && status(refused) == "quarantined" }
    expect(runs(failing)).to eq(0)
    expect(sql("SELECT attempts || ' ' || response_status FROM webhook_inbox_outbox WHERE operation_id = #{q(failing)}")).to eq("3 500")
    expect(sql("SELECT attempts || ' ' || response_status || ' ' || response_excerpt FROM webhook_inbox_outbox " \
               "WHERE operation_id = #{q(refused)}")).to eq(%(1 422 {"status":"rejected","reason":"no payment id"}))
    expect(sql("SELECT count(*) FROM webhook_inbox_effects_received WHERE operation_id IN (#{q(failing)}, #{q(refused)})")).to eq("0")

    body = JSON.generate("payment_id" => "pi_4")
    headers = WebhookInbox::Testing::Signing.standard_webhooks_headers(body, secret: "whsec_#{['x' * 24].pack('m0')}", id: "/effects/send_receipt op_forged")
    expect(@puma.post("/effects/send_receipt", body, headers.merge("Content-Type" => "application/json")).first).to eq(401)
    expect(runs("op_forged")).to eq(0)
  end

  it "an event type routed to a destination: the Ruby block runs once per event, not again on a duplicate, replay or redelivery" do
    event_id = "evt_idv_#{SecureRandom.hex(4)}"
    body = JSON.generate(id: event_id, type: "identity.verification_session.verified", data: { object: { id: "vs_1" } })
    headers = WebhookInbox::Testing::Signing.stripe_headers(body, secret: EFFECTS_STRIPE_SECRET)
    answers = 2.times.map { @puma.post("/webhooks/stripe", body, headers) }
    expect(answers.map { |a| JSON.parse(a[2])["status"] }).to eq(%w[accepted duplicate])

    event = "source_scope = 'stripe:acct_fx:live' AND event_id = #{q(event_id)}"
    effect = "source_event_id = #{q(event_id)}"
    wait_until { sql("SELECT status FROM webhook_inbox_outbox WHERE #{effect}") == "delivered" }
    op = sql("SELECT operation_id FROM webhook_inbox_outbox WHERE #{effect}")
    expect(op).to match(/\Aevent_\h{64}\z/)
    expect(sql("SELECT status || ' ' || outcome FROM webhook_inbox WHERE #{event}")).to eq("done to identity as #{op}")
    expect(sql("SELECT payment_id FROM effect_runs WHERE operation_id = #{q(op)}")).to eq(event_id) # the payload is the event
    before = calls

    # A replay of the done event (after fixing something else) finds the same effect: nothing is sent again.
    expect(sql("SELECT moved FROM webhook_inbox_requeue('replay', jsonb_build_object('scope', 'stripe:acct_fx:live', " \
               "'event_id', #{q(event_id)}), 'spec')")).to eq("1")
    wait_until { sql("SELECT status FROM webhook_inbox WHERE #{event} AND processed_at > requeued_at") == "done" }
    expect(sql("SELECT count(*) || ' ' || min(attempts) FROM webhook_inbox_outbox WHERE #{effect}")).to eq("1 1")

    # The sidecar died between the app's 200 and its save: redelivered, answered duplicate.
    sql("UPDATE webhook_inbox_outbox SET status = 'pending', next_attempt_at = now(), processed_at = NULL " \
        "WHERE operation_id = #{q(op)}; NOTIFY webhook_inbox_outbox")
    wait_until { sql("SELECT status || ' ' || attempts FROM webhook_inbox_outbox WHERE operation_id = #{q(op)}") == "delivered 2" }
    expect(runs(op)).to eq(1)
    expect(calls).to eq(before)
  end

  # Issue 16 item 12: every endpoint shares one secret, and the signature did not say which
  # endpoint an effect was for, so one captured on its way to identity_event ran
  # send_receipt's block when replayed there (within the tolerance; say identity's block had
  # refused it, so no dedupe row stood in the way).
  it "an effect signed for one endpoint is refused at another (401 wrong_endpoint), and runs there only when signed for it" do
    op = "identity:#{SecureRandom.hex(4)}"
    body = JSON.generate("payment_id" => "pi_cross")
    sign = lambda do |id|
      WebhookInbox::Testing::Signing.standard_webhooks_headers(body, secret: EFFECTS_SECRET, id: id).merge("Content-Type" => "application/json")
    end
    status, _, text = @puma.post("/effects/send_receipt", body, sign.("/effects/identity_event #{op}"))
    expect([status, JSON.parse(text)]).to eq([401, { "status" => "rejected", "reason" => "wrong_endpoint" }])
    [op, "/effects/identity_event #{op}"].each { |id| expect(runs(id)).to eq(0) }
    expect(@puma.post("/effects/send_receipt", body, sign.(op)).first).to eq(401) # an id naming no endpoint
    expect(@puma.post("/effects/send_receipt", body, sign.("/effects/send_receipt #{op}")).first).to eq(200)
    expect(runs(op)).to eq(1)
  end
end
