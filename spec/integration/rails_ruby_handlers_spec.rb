# frozen_string_literal: true

require "spec_helper"
require_relative "../support/generated_rails_app"
require "webhook_inbox/testing/signing"
require_relative "../support/dashboard_client"

# Issue 18: Ruby handlers in a freshly generated Rails 7.2 app (one app for the group), with
# Puma, the real sidecar and the Ruby worker (bin/webhook-inbox-sidecar ruby). The handler,
# written into the class `rails g webhook_inbox:handler --ruby` generated, has no guard: it
# marks the order paid (paid_count + 1) and records the receipt mail (a receipts row) every
# time it runs, so any second run shows. Once per payment across duplicates, a replay, a
# kill -9 of the worker mid-handler and a PostgreSQL restart mid-handler; a raise is retried
# and then succeeds; WebhookInbox::Permanent quarantines, the run shows on the dashboard's
# effects page (the engine mounted, as the README says) and its requeue there runs it again.
# Issue 32: a tracker subscribed to Rails.error (as Sentry's is) gets one report per failed
# attempt and one unhandled per quarantine, a Ruby handler's and a SQL handler's (the real
# sidecar's, reported once with a second, --report-only worker running).
RSpec.describe "a generated Rails app: Ruby handlers" do
  include GeneratedRailsApp

  secret = "whsec_ruby_handlers"
  scope = "stripe:acct_rb:test"

  before(:all) do
    create_generated_app
    sh("bin/rails", "generate", "webhook_inbox:install")
    out = sh("bin/rails", "generate", "webhook_inbox:handler", "payment_intent.succeeded", "--ruby")
    expect(out).to include("app/webhooks/payment_intent_succeeded_handler.rb", "test/webhooks/payment_intent_succeeded_handler_test.rb")
    expect(File.read(File.join(@app, "Procfile.dev"))).to include("handlers: bin/webhook-inbox-sidecar ruby")
    expect(File.read(File.join(@app, "app/webhooks/payment_intent_succeeded_handler.rb"))).to include("raise NotImplementedError")
    write("config/initializers/webhook_inbox.rb", <<~RUBY)
      WebhookInbox.configure do |c|
        c.endpoint(:stripe, secrets: [#{secret.inspect}], scope: #{scope.inspect})
      end
    RUBY
    # A tracker as Sentry's: subscribed to Rails.error, one JSON line per report of the gem.
    write("config/initializers/error_tracker.rb", <<~'RUBY')
      class SpecErrorTracker
        def report(error, handled:, severity:, context:, source: nil)
          return unless source == "webhook_inbox"

          line = JSON.generate(error: error.class.name, message: error.message, handled: handled, severity: severity,
                               context: context.to_h { |k, v| [k, v.is_a?(Integer) || v.nil? ? v : v.to_s] }, pid: Process.pid)
          File.open(Rails.root.join("tmp", "error_reports.jsonl"), "a") { |f| f.write("#{line}\n") }
        end
      end
      Rails.error.subscribe(SpecErrorTracker.new)
    RUBY
    # The generated class, written: behaviour comes from the payment's metadata.
    write("app/webhooks/payment_intent_succeeded_handler.rb", <<~'RUBY')
      class PaymentIntentSucceededHandler < WebhookInbox::Handler
        subscribe "payment_intent.succeeded"

        def call(event)
          meta = event.dig("data", "object", "metadata")
          order = Order.lock.find(Integer(meta["order_id"]))
          order.update!(status: "paid", paid_count: order.paid_count + 1)
          Receipt.create!(order_id: order.id, operation_id: event.operation_id, attempt: event.attempt)
          case meta["behaviour"]
          when "fail_once" then raise "card network timeout" if event.attempt == 1
          when "permanent" # until the fix ships (a flag file)
            raise WebhookInbox::Permanent, "amount mismatch" unless Rails.root.join("tmp", "fixed_#{order.id}").exist?
          when "pause"
            flag = Rails.root.join("tmp", "paused_#{order.id}")
            unless flag.exist? # the first run stops here, its writes made and not committed
              FileUtils.touch(flag)
              sleep 8
            end
          end
        end
      end
    RUBY
    write("app/webhooks/charge_refunded_handler.rb", self.class.refund_handler("v1")) # edited by an example, in development
    write("config/routes.rb", <<~RUBY)
      Rails.application.routes.draw do
        post "/webhooks/stripe", to: WebhookInbox.endpoint(:stripe)
        mount WebhookInbox::Engine => "/webhook_inbox"
      end
    RUBY
    write("db/migrate/#{(Time.now.utc + 60).strftime('%Y%m%d%H%M%S')}_create_orders.rb", <<~'RUBY') # after the gem's
      class CreateOrders < ActiveRecord::Migration[7.2]
        def change
          create_table(:orders) { |t| t.string :status, null: false, default: "awaiting_payment"; t.integer :paid_count, null: false, default: 0 }
          create_table(:receipts) { |t| t.bigint :order_id, null: false; t.string :operation_id, null: false; t.integer :attempt, null: false }
        end
      end
    RUBY
    write("app/models/order.rb", "class Order < ApplicationRecord; end\n")
    write("app/models/receipt.rb", "class Receipt < ApplicationRecord; end\n")
    sh("bin/rails", "db:create", "db:migrate")

    @puma = PumaProcess.new(rackup: File.join(@app, "config.ru"), dir: @app, threads: "2:4",
                            env: @env.merge("RAILS_ENV" => "development")).tap { |p| Bundler.with_unbundled_env { p.start } }
    @spawned = [] # every process started, also by examples (their @worker is their own copy)
    @sidecar_log = File.join(@work, "sidecar.log")
    @sidecar = start_app_process("run", "--poll-interval", "200ms", log: @sidecar_log)
    @worker_log = File.join(@work, "worker.log")
    @worker = start_ruby_worker
    # Its handlers registered before the first event arrives (else that event waits for a route).
    # (300 s: the app booted in over 60 s on 2 shared cores at a load of 29)
    wait_for("the worker registered its handlers", timeout: 300) { File.read(@worker_log).include?("event=ruby_worker_starting") }
  end

  after(:all) do
    stop_app_processes # every one, also a worker an example restarted
    @puma&.stop
    remove_generated_app
  end

  define_method(:start_ruby_worker) do
    start_app_process("ruby", "--poll-interval", "200ms", "--backoff-base", "200ms", "--backoff-cap", "400ms", log: @worker_log)
  end

  define_method(:deliver) do |id, type, object|
    body = JSON.generate(id: id, type: type, data: { object: object })
    JSON.parse(@puma.post("/webhooks/stripe", body, WebhookInbox::Testing::Signing.stripe_headers(body, secret: secret))[2])["status"]
  end

  define_method(:pay) do |id, order, behaviour = nil|
    deliver(id, "payment_intent.succeeded", { id: "pi_#{id}", metadata: { order_id: order, behaviour: behaviour }.compact })
  end

  # A handler class that writes which version of its code ran each event into tmp/.
  def self.probe_handler(klass, type, version)
    <<~RUBY
      class #{klass} < WebhookInbox::Handler
        subscribe #{type.inspect}

        def call(event) = File.write(Rails.root.join("tmp", "ran_\#{event.id}"), #{version.inspect})
      end
    RUBY
  end

  def self.refund_handler(version) = probe_handler("ChargeRefundedHandler", "charge.refunded", version)

  # Writes a file as an editor would, its modification time clearly after the last one seen.
  define_method(:edit) do |path, text|
    write(path, text)
    later = Time.now + 2
    File.utime(later, later, File.join(@app, path))
  end

  define_method(:ran) { |id| File.exist?(File.join(@app, "tmp", "ran_#{id}")) && File.read(File.join(@app, "tmp", "ran_#{id}")) }

  define_method(:order!) { psql("INSERT INTO orders DEFAULT VALUES RETURNING id") }
  define_method(:event_status) { |id| psql("SELECT status FROM webhook_inbox WHERE event_id = '#{id}'") }
  define_method(:paid) { |order| psql("SELECT status || ' ' || paid_count || ' ' || (SELECT count(*) FROM receipts WHERE order_id = #{order}) FROM orders WHERE id = #{order}") }


  it "marks the order paid and sends the receipt once across duplicates and a replay" do
    order = order!
    expect([pay("evt_dup", order), pay("evt_dup", order)]).to eq(%w[accepted duplicate])
    wait_for("evt_dup done") { event_status("evt_dup") == "done" }
    expect(paid(order)).to eq("paid 1 1")
    expect(psql("SELECT outcome FROM webhook_inbox WHERE event_id = 'evt_dup'")).to eq("Ruby handlers done")
    op = psql("SELECT operation_id FROM receipts WHERE order_id = #{order}")
    expect(op).to eq("handler_#{Digest::SHA256.hexdigest("#{scope}\nevt_dup\nPaymentIntentSucceededHandler")}")

    expect(psql("SELECT moved FROM webhook_inbox_requeue('replay', '{\"event_id\": \"evt_dup\"}', 'ops')")).to eq("1") # the dashboard's replay
    wait_for("replayed evt_dup done") { psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_dup' AND processed_at > requeued_at") == "done" }
    expect(pay("evt_dup", order)).to eq("duplicate")
    expect(paid(order)).to eq("paid 1 1")
  end

  it "keeps running after SIGHUP to its process group, saying it ignored it" do
    seen = File.size(@worker_log)
    worker = start_ruby_worker # a second one of its own (an example before may have replaced @worker)
    wait_for("the second worker started") { File.read(@worker_log)[seen..].include?("event=ruby_worker_starting") }
    sleep 0.5 # its signal handlers are set right after that line
    Process.kill("HUP", -worker)
    wait_for("the worker logged the ignored SIGHUP") { File.read(@worker_log)[seen..].include?("event=ruby_worker_sighup_ignored") }
    expect(Process.waitpid(worker, Process::WNOHANG)).to be_nil # still running
    order = order!
    expect(pay("evt_after_hup", order)).to eq("accepted")
    wait_for("evt_after_hup done") { event_status("evt_after_hup") == "done" }
    expect(paid(order)).to eq("paid 1 1")
    expect(File.read(@worker_log)[seen..]).not_to include("ruby_worker_stopped")
  ensure
    if worker
      (Process.kill("TERM", -worker) rescue nil) # rubocop:disable Style/RescueModifier
      (Process.wait(worker) rescue nil) # rubocop:disable Style/RescueModifier
    end
  end

  it "retries a raising handler with its writes rolled back, then succeeds once" do
    order = order!
    expect(pay("evt_flaky", order, "fail_once")).to eq("accepted")
    wait_for("evt_flaky done") { event_status("evt_flaky") == "done" }
    expect(paid(order)).to eq("paid 1 1")
    expect(psql("SELECT attempt FROM receipts WHERE order_id = #{order}")).to eq("2")
    expect(psql("SELECT string_agg(e->>'result', ',') FROM webhook_inbox, jsonb_array_elements(attempt_log) e WHERE event_id = 'evt_flaky'"))
      .to eq("handed,retry,done")
    expect(File.read(@worker_log)).to include("event_id=evt_flaky type=payment_intent.succeeded outcome=retry attempt=1")
  end

  it "quarantines the event on WebhookInbox::Permanent, with nothing of the handler's applied" do
    order = order!
    expect(pay("evt_refused", order, "permanent")).to eq("accepted")
    wait_for("evt_refused quarantined") { event_status("evt_refused") == "quarantined" }
    expect(psql("SELECT last_error FROM webhook_inbox WHERE event_id = 'evt_refused'"))
      .to eq("Ruby handler PaymentIntentSucceededHandler: WebhookInbox::Permanent: amount mismatch")
    expect(paid(order)).to eq("awaiting_payment 0 0")
    expect(psql("SELECT status FROM webhook_inbox_outbox WHERE destination = 'ruby' AND source_event_id = 'evt_refused'")).to eq("quarantined")
  end

  it "shows the quarantined run on the dashboard's effects page; requeued there (confirmed), it runs again and pays once" do
    order = order!
    expect(pay("evt_fixed", order, "permanent")).to eq("accepted")
    wait_for("evt_fixed quarantined") { event_status("evt_fixed") == "quarantined" }
    op = psql("SELECT operation_id FROM webhook_inbox_outbox WHERE destination = 'ruby' AND source_event_id = 'evt_fixed'")
    ops = DashboardClient.new(@puma.port)
    status, _, body = ops.get("/webhook_inbox/effects?status=quarantined&handler=PaymentIntentSucceededHandler")
    expect(status).to eq(200)
    expect(body).to include(op, "WebhookInbox::Permanent: amount mismatch")

    FileUtils.touch(File.join(@app, "tmp", "fixed_#{order}")) # the fix is deployed
    status, _, body = ops.get("/webhook_inbox/effects/requeue?operation_id=#{op}")
    expect([status, body[%r{<strong>(\d+)</strong> quarantined effect}, 1]]).to eq([200, "1"])
    status, headers, = ops.post("/webhook_inbox/effects/requeue", { "operation_id" => op, "expected" => "1" })
    expect([status, headers["location"].to_s.end_with?("/webhook_inbox/effect?id=#{op}")]).to eq([302, true])
    wait_for("evt_fixed done") { event_status("evt_fixed") == "done" }
    expect(paid(order)).to eq("paid 1 1")
    expect(psql("SELECT action || ' ' || count FROM webhook_inbox_actions ORDER BY id DESC LIMIT 1")).to eq("requeue 1")
  end

  it "runs an edited handler on the next event in development, and a new one once its file exists, with no restart (issue 28.2)" do
    expect(deliver("evt_refund_1", "charge.refunded", { id: "ch_1" })).to eq("accepted")
    wait_for("evt_refund_1 done") { event_status("evt_refund_1") == "done" }
    expect(ran("evt_refund_1")).to eq("v1")

    edit("app/webhooks/charge_refunded_handler.rb", self.class.refund_handler("v2"))
    edit("app/webhooks/customer_created_handler.rb", self.class.probe_handler("CustomerCreatedHandler", "customer.created", "new"))
    wait_for("the worker reloaded and registered the new handler") { File.read(@worker_log).match?(/event=ruby_worker_reloaded handlers=3 /) }
    expect(deliver("evt_refund_2", "charge.refunded", { id: "ch_2" })).to eq("accepted")
    expect(deliver("evt_customer_1", "customer.created", { id: "cus_1" })).to eq("accepted")
    wait_for("both done") { event_status("evt_refund_2") == "done" && event_status("evt_customer_1") == "done" }
    expect([ran("evt_refund_2"), ran("evt_customer_1")]).to eq(%w[v2 new])
  ensure
    write("app/webhooks/charge_refunded_handler.rb", self.class.refund_handler("v1"))
  end

  define_method(:error_reports) do |*ids|
    path = File.join(@app, "tmp", "error_reports.jsonl")
    (File.exist?(path) ? File.readlines(path) : []).map { |l| JSON.parse(l) }.select { |r| ids.include?(r["context"]["event_id"]) }
  end

  it "reports to Rails.error each failed attempt, each Ruby quarantine, and a SQL handler's quarantine once across two workers" do
    psql(<<~SQL)
      CREATE OR REPLACE FUNCTION spec_refuses(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN PERFORM webhook_inbox_quarantine('refused by the SQL handler'); RETURN 'unreachable'; END $$;
      INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('order.flagged', 'spec_refuses') ON CONFLICT DO NOTHING;
    SQL
    reporter_log = File.join(@work, "reporter.log")
    reporter = start_app_process("ruby", "--report-only", "--poll-interval", "200ms", log: reporter_log)
    wait_for("the report-only worker started", timeout: 300) { File.read(reporter_log).include?("event=ruby_worker_starting report_only=true") }
    flaky = order!
    refused = order!
    expect(pay("evt_rep_flaky", flaky, "fail_once")).to eq("accepted")
    expect(pay("evt_rep_refused", refused, "permanent")).to eq("accepted")
    expect(deliver("evt_rep_sql", "order.flagged", { id: "ord_1", card: "card_4242_secret" })).to eq("accepted")
    wait_for("evt_rep_flaky done") { event_status("evt_rep_flaky") == "done" }
    wait_for("all three reported") { error_reports("evt_rep_flaky", "evt_rep_refused", "evt_rep_sql").size >= 3 }
    sleep 1 # a second report of one, if any, would land meanwhile
    reports = error_reports("evt_rep_flaky", "evt_rep_refused", "evt_rep_sql").sort_by { |r| r["context"]["event_id"] }
    expect(reports.map { |r| [r["context"]["event_id"], r["error"], r["handled"], r["severity"], r["context"]["attempt"]] }).to eq(
      [["evt_rep_flaky", "RuntimeError", true, "warning", 1],
       ["evt_rep_refused", "WebhookInbox::Permanent", false, "error", 1],
       ["evt_rep_sql", "WebhookInbox::Handlers::QuarantineReports::Quarantined", false, "error", 0]]
    )
    expect(reports.last["message"]).to eq("refused by the SQL handler")
    expect(reports.last["context"]).to include("handler" => "spec_refuses", "event_type" => "order.flagged") # its route's
    expect(reports.first["context"]).to include("provider" => "stripe", "scope" => scope, "event_type" => "payment_intent.succeeded",
                                                "handler" => "PaymentIntentSucceededHandler")
    expect(reports.to_s).not_to include("card_4242")
    expect(File.read(@worker_log).lines.grep(/event=quarantine_reported event_id=evt_rep_sql/).size +
           File.read(reporter_log).lines.grep(/event=quarantine_reported event_id=evt_rep_sql/).size).to eq(1)
  ensure
    if reporter
      (Process.kill("TERM", -reporter) rescue nil) # rubocop:disable Style/RescueModifier
      (Process.wait(reporter) rescue nil) # rubocop:disable Style/RescueModifier
      @spawned.delete(reporter)
    end
  end

  it "applies the payment once across a kill -9 of the worker mid-handler" do
    order = order!
    expect(pay("evt_killed", order, "pause")).to eq("accepted")
    wait_for("the handler paused") { File.exist?(File.join(@app, "tmp", "paused_#{order}")) }
    Process.kill("KILL", -@worker)
    Process.wait(@worker)
    expect(event_status("evt_killed")).to eq("pending")
    expect(paid(order)).to eq("awaiting_payment 0 0") # the killed run's writes never committed
    @worker = start_ruby_worker
    wait_for("evt_killed done") { event_status("evt_killed") == "done" }
    expect(paid(order)).to eq("paid 1 1")
  end

  it "applies the payment once across a PostgreSQL restart mid-handler, and keeps working after it" do
    order = order!
    expect(pay("evt_restart", order, "pause")).to eq("accepted")
    wait_for("the handler paused") { File.exist?(File.join(@app, "tmp", "paused_#{order}")) }
    @pg.restart # its transaction is lost with the server; the worker reconnects
    wait_for("evt_restart done") { event_status("evt_restart") == "done" }
    expect(paid(order)).to eq("paid 1 1")

    later = order!
    wait_for("receipts stored again") { %w[accepted duplicate].include?(pay("evt_after_restart", later)) } # 503 while it starts
    wait_for("evt_after_restart done") { event_status("evt_after_restart") == "done" }
    expect(paid(later)).to eq("paid 1 1")
    expect(File.read(@worker_log)).to include("ruby_worker_round_failed")
  end
end
