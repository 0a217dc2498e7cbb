# frozen_string_literal: true

require "spec_helper"
require_relative "../support/generated_rails_app"
require "webhook_inbox/testing/signing"

# Issue 28: a receipt mail from a Ruby handler in a freshly generated Rails 7.2 app with the
# stock job adapter (:async), Puma, the real sidecar and the Ruby worker. The handler marks the
# order paid and calls ReceiptMailer...deliver_later; mails are counted in tmp/mails.log by a
# delivery method that can stop before its first send (a flag file). The worker is killed
# with kill -9 after the handler's commit and before the mail is sent: after a restart the
# mail is sent exactly once (before: event done, order paid, no mail, nothing retried it).
# doctor exits 1 naming the Ruby worker while it is down and 0 while it runs (and says, as the
# development boot does, that :async does not commit with the database); the first test
# run on a fresh test database prints no "the inbox schema is missing".
RSpec.describe "a generated Rails app: effects from Ruby handlers" do
  include GeneratedRailsApp

  secret = "whsec_handler_effects"
  scope = "stripe:acct_fx:test"

  before(:all) do
    create_generated_app
    enable_jobs_and_mailers
    sh("bin/rails", "generate", "webhook_inbox:install")
    sh("bin/rails", "generate", "webhook_inbox:handler", "payment_intent.succeeded", "--ruby")
    expect(File.read(File.join(@app, "app/webhooks/payment_intent_succeeded_handler.rb"))).to include("deliver_later")
    write("config/initializers/webhook_inbox.rb", <<~RUBY)
      WebhookInbox.configure do |c|
        c.endpoint(:stripe, secrets: [#{secret.inspect}], scope: #{scope.inspect})
      end
    RUBY
    write("app/webhooks/payment_intent_succeeded_handler.rb", <<~'RUBY')
      class PaymentIntentSucceededHandler < WebhookInbox::Handler
        subscribe "payment_intent.succeeded"

        def call(event)
          order = Order.lock.find(Integer(event.dig("data", "object", "metadata", "order_id")))
          order.update!(status: "paid")
          ReceiptMailer.with(order_id: order.id).receipt.deliver_later
        end
      end
    RUBY
    write("app/mailers/receipt_mailer.rb", <<~'RUBY')
      class ReceiptMailer < ActionMailer::Base
        default from: "shop@example.com"

        def receipt
          headers["X-Order"] = params[:order_id].to_s
          mail(to: "buyer@example.com", subject: "Receipt for order #{params[:order_id]}", body: "Paid. Thank you.")
        end
      end
    RUBY
    # Every mail sent appends a line to tmp/mails.log (what an SMTP server would count); with
    # tmp/pause_mail_<order> present, the first send for that order stops before it sends.
    write("config/initializers/mail_log.rb", <<~'RUBY')
      class MailLog
        def initialize(_settings); end

        def deliver!(mail)
          order = mail["X-Order"].to_s
          pause = Rails.root.join("tmp", "pause_mail_#{order}")
          if pause.exist?
            pause.delete
            FileUtils.touch(Rails.root.join("tmp", "paused_mail_#{order}"))
            sleep 30
          end
          File.open(Rails.root.join("tmp", "mails.log"), "a") { |f| f.puts("order=#{order} #{mail.subject}") }
        end
      end
      ActiveSupport.on_load(:action_mailer) do
        add_delivery_method :mail_log, MailLog
        self.delivery_method = Rails.env.test? ? :test : :mail_log
      end
    RUBY
    write("config/routes.rb", <<~RUBY)
      Rails.application.routes.draw do
        post "/webhooks/stripe", to: WebhookInbox.endpoint(:stripe)
      end
    RUBY
    write("db/migrate/#{(Time.now.utc + 60).strftime('%Y%m%d%H%M%S')}_create_orders.rb", <<~'RUBY')
      class CreateOrders < ActiveRecord::Migration[7.2]
        def change
          create_table(:orders) { |t| t.string :status, null: false, default: "awaiting_payment" }
        end
      end
    RUBY
    write("app/models/order.rb", "class Order < ApplicationRecord; end\n")
    sh("bin/rails", "db:create", "db:migrate")

    @puma = PumaProcess.new(rackup: File.join(@app, "config.ru"), dir: @app, threads: "2:4",
                            env: @env.merge("RAILS_ENV" => "development")).tap { |p| Bundler.with_unbundled_env { p.start } }
    @spawned = []
    @sidecar_log = File.join(@work, "sidecar.log")
    start_app_process("run", "--poll-interval", "200ms", log: @sidecar_log)
    @worker_log = File.join(@work, "worker.log")
    @worker = { pid: start_ruby_worker } # shared: an example's own @worker would be a copy (before(:all) ivars)
    wait_for("the worker registered its handlers") { File.read(@worker_log).include?("event=ruby_worker_starting") }
  end

  after(:all) do
    stop_app_processes # every one, also a worker an example restarted
    @puma&.stop
    remove_generated_app
  end

  define_method(:start_ruby_worker) do
    start_app_process("ruby", "--poll-interval", "200ms", "--job-lease", "1s", log: @worker_log)
  end

  define_method(:pay) do |id, order|
    body = JSON.generate(id: id, type: "payment_intent.succeeded", data: { object: { id: "pi_#{id}", metadata: { order_id: order } } })
    JSON.parse(@puma.post("/webhooks/stripe", body, WebhookInbox::Testing::Signing.stripe_headers(body, secret: secret))[2])["status"]
  end

  define_method(:order!) { psql("INSERT INTO orders DEFAULT VALUES RETURNING id") }
  define_method(:mails) do |order|
    log = File.join(@app, "tmp", "mails.log")
    File.exist?(log) ? File.readlines(log, chomp: true).grep(/\Aorder=#{order} /) : []
  end


  it "sends the receipt exactly once across a kill -9 of the worker after the handler's commit, before the mail" do
    order = order!
    FileUtils.touch(File.join(@app, "tmp", "pause_mail_#{order}"))
    expect(pay("evt_mail_killed", order)).to eq("accepted")
    wait_for("the mail's delivery began") { File.exist?(File.join(@app, "tmp", "paused_mail_#{order}")) }
    Process.kill("KILL", -@worker[:pid])
    Process.wait(@worker[:pid])
    # The handler's transaction committed: event done, order paid; the mail is not sent and
    # is still to do, in the outbox (the stock :async adapter had it only in memory).
    expect(psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_mail_killed'")).to eq("done")
    expect(psql("SELECT status FROM orders WHERE id = #{order}")).to eq("paid")
    expect(mails(order)).to eq([])
    expect(psql("SELECT status || ' ' || attempts FROM webhook_inbox_outbox WHERE destination = 'active_job' " \
                "AND source_event_id = 'evt_mail_killed'")).to eq("pending 1")

    @worker[:pid] = start_ruby_worker
    wait_for("the mail sent") { mails(order).size == 1 }
    wait_for("its job delivered") do
      psql("SELECT status FROM webhook_inbox_outbox WHERE destination = 'active_job' AND source_event_id = 'evt_mail_killed'") == "delivered"
    end
    sleep 2 # a second send would come within the lease (1s) and a poll
    expect(mails(order)).to eq(["order=#{order} Receipt for order #{order}"])

    # A duplicate delivery of the event sends nothing more.
    expect(pay("evt_mail_killed", order)).to eq("duplicate")
    sleep 1
    expect(mails(order).size).to eq(1)
  end

  it "doctor: healthy with the Ruby worker up, exit 1 naming it when it is down; no raw driver warning" do
    wait_for("a heartbeat") { psql("SELECT count(*) FROM webhook_inbox_workers WHERE pid = #{@worker[:pid]}") == "1" }
    # A worker killed by another example beat less than a minute ago: doctor counts it alive
    # for a minute after its last heartbeat. Its minute is made to have passed.
    psql("UPDATE webhook_inbox_workers SET heartbeat_at = now() - interval '2 minutes' WHERE pid <> #{@worker[:pid]}")
    out = sh("bin/rails", "webhook_inbox:doctor")
    expect(out).to include("Ruby handlers (registered by the Ruby worker):", "payment_intent.succeeded -> PaymentIntentSucceededHandler",
                           "Ruby workers: 1 alive", "jobs from Ruby handlers:", ":async does not commit with the database")
    expect(out).not_to include("unknown OID", "routes: none (every event waits", "DOWN")
    # and development says it at boot
    expect(sh("bin/rails", "runner", "puts :booted")).to include("ActiveJob's adapter :async does not commit with the database", "booted")

    Process.kill("TERM", -@worker[:pid]) # a clean stop: its row says stopped
    Process.wait(@worker[:pid])
    out = sh("bin/rails", "webhook_inbox:doctor", ok: false)
    expect(out).to include("Ruby worker: DOWN - 1 Ruby handler registered (PaymentIntentSucceededHandler)",
                           "start bin/webhook-inbox-sidecar ruby")
    expect(out).not_to include("unknown OID")
  ensure
    @worker[:pid] = start_ruby_worker
  end

  it "runs the generated handler test on a fresh test database without a false 'schema is missing', the mail delivered by the drain" do
    write("test/webhooks/payment_intent_succeeded_handler_test.rb", <<~'RUBY')
      require "test_helper"
      require "webhook_inbox/testing/minitest"

      class PaymentIntentSucceededHandlerTest < ActiveSupport::TestCase
        test "pays the order and mails the receipt once" do
          order = Order.create!
          store_webhook_event(event_type: "payment_intent.succeeded",
                              payload: { "id" => "evt_t1", "type" => "payment_intent.succeeded",
                                         "data" => { "object" => { "metadata" => { "order_id" => order.id } } } })
          assert_equal ["done"], drain_webhook_inbox.map(&:result)
          assert_equal "paid", order.reload.status
          assert_equal ["Receipt for order #{order.id}"], ActionMailer::Base.deliveries.map(&:subject)
        end
      end
    RUBY
    out = sh("bin/rails", "test", "test/webhooks/payment_intent_succeeded_handler_test.rb", env: { "RAILS_ENV" => "test" })
    expect(out).to include("1 runs, 3 assertions, 0 failures, 0 errors")
    expect(out).not_to include("schema is missing")
  end
end
