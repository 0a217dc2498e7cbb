# frozen_string_literal: true

require "spec_helper"
require "net/http"
require_relative "../support/generated_rails_app"
require "webhook_inbox/testing/signing"

# Issue 28: the README's quick start, verbatim, in a freshly generated Rails 7.2 app. Its code
# blocks are read from README.md (a change to the README changes what runs here): the Gemfile
# line, the install commands, the initializer, the controller and its route, the handler
# generator and the handler, the Procfile lines (each run as its own process, as foreman would)
# and the integration test. What the README takes as the shop's own (the orders table, Order,
# ReceiptMailer, where mails go, the Stripe secret in the credentials) is written here.
# Then a real signed Stripe delivery, sent three times, marks the order paid and mails its
# receipt exactly once. The time from `gem build` to that mail is printed (never asserted).
RSpec.describe "README quick start, verbatim in a generated Rails app" do
  include GeneratedRailsApp

  readme = File.read(File.join(TestDatabase::ROOT, "README.md"))
  quick_start = readme[/^## Quick start\n(.*?)^## /m, 1] or raise "README.md has no Quick start section"
  blocks = quick_start.scan(/^```(\w*)\n(.*?)^```/m)
  ruby_files = blocks.select { |lang, _| lang == "ruby" }.flat_map do |_, code| # "# path" lines open each file
    code.split(/^(?=# [\w.\/]+\.rb\b)/).filter_map { |part| [part[/\A# ([\w.\/]+\.rb)/, 1], part] if part.match?(/\A# [\w.\/]+\.rb\b/) }
  end.to_h
  commands = blocks.select { |lang, _| lang == "sh" }.flat_map { |_, code| code.lines.map { |l| l.sub(/\s+#.*/, "").strip } }.reject(&:empty?)
  procfile = blocks.find { |lang, code| lang.empty? && code.include?("web: ") }&.last.to_s.lines.map(&:strip).reject(&:empty?)
  gemfile_line = blocks.find { |lang, code| lang == "ruby" && code.start_with?("# Gemfile") }&.last.to_s[/^gem .*$/]
  handler_generator = quick_start[/`(bin\/rails generate webhook_inbox:handler [^`]+)`/, 1]

  secret = "whsec_quick_start_dev"

  before(:all) do
    @started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    create_generated_app
    @spawned = []
  end

  after(:all) do
    stop_app_processes
    remove_generated_app
  end

  it "finds every part of the quick start in the README" do
    expect(gemfile_line).to eq('gem "webhook_inbox_pg"')
    expect(commands).to eq(["bundle install", "bin/rails generate webhook_inbox:install", "bin/rails db:migrate"])
    expect(ruby_files.keys).to eq(%w[config/initializers/webhook_inbox.rb app/controllers/webhooks_controller.rb config/routes.rb
                                     app/webhooks/payment_intent_succeeded_handler.rb test/integration/stripe_webhook_test.rb])
    expect(handler_generator).to eq("bin/rails generate webhook_inbox:handler payment_intent.succeeded --ruby")
    expect(procfile).to eq(["web: bin/rails server", "sidecar: bin/webhook-inbox-sidecar run", "handlers: bin/webhook-inbox-sidecar ruby"])
  end

  it "marks a payment paid and mails its receipt exactly once, and its test passes" do
    shop_of_its_own
    # 1. Install: the Gemfile names the gem as the README does; the commands, verbatim.
    expect(File.read(File.join(@app, "Gemfile")).lines.map(&:strip)).to include(gemfile_line)
    commands.each { |command| sh(*command.split) }
    # 2. Receive: the initializer's block goes into the generated initializer; the controller
    # as shown; the route line into the app's routes.
    File.write(File.join(@app, "config/initializers/webhook_inbox.rb"), "\n#{ruby_files['config/initializers/webhook_inbox.rb']}", mode: "a")
    write("app/controllers/webhooks_controller.rb", ruby_files["app/controllers/webhooks_controller.rb"])
    route = ruby_files["config/routes.rb"].lines.reject { |l| l.start_with?("#") }.join.strip
    routes = File.read(File.join(@app, "config/routes.rb"))
    write("config/routes.rb", routes.sub(/^Rails\.application\.routes\.draw do\n/) { "#{$&}  #{route}\n" })
    # 3. Handle: the generator, then the handler as the README writes it.
    sh(*handler_generator.split)
    write("app/webhooks/payment_intent_succeeded_handler.rb", ruby_files["app/webhooks/payment_intent_succeeded_handler.rb"])

    # 4. Run: the generators wrote the README's Procfile.dev; each line runs as its own process.
    expect(File.read(File.join(@app, "Procfile.dev")).lines.map(&:strip)).to include(*procfile)
    port = ReceiverHelpers.free_port
    @server_log = File.join(@work, "server.log")
    procfile.each do |line|
      name, command = line.split(": ", 2)
      command += " -p #{port}" if name == "web" # foreman passes PORT; bin/rails server reads -p
      log = name == "handlers" ? (@worker_log = File.join(@work, "worker.log")) : File.join(@work, "#{name}.log")
      @sidecar_log = log if name == "sidecar"
      start_app_command(*command.split, log: log)
    end
    wait_for("the server listening") { Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/up")) }
    wait_for("the worker registered its handler") { File.read(@worker_log).include?("event=ruby_worker_starting") }

    order = psql("INSERT INTO orders (payment_intent, amount) VALUES ('pi_qs_1', 2000) RETURNING id")
    body = JSON.generate(id: "evt_qs_1", type: "payment_intent.succeeded", data: { object: { id: "pi_qs_1", amount: 2000 } })
    answers = Array.new(2) { Thread.new { post(port, body) } }.map(&:value) + [post(port, body)] # twice at once, once after
    expect(answers.map(&:first)).to eq(%w[200 200 200])
    expect(answers.map { |a| JSON.parse(a.last)["status"] }.sort).to eq(%w[accepted duplicate duplicate])

    wait_for("the order paid") { psql("SELECT status FROM orders WHERE id = #{order}") == "paid" }
    wait_for("the receipt mailed") { mails.size == 1 }
    wait_for("the mail's job delivered") do
      psql("SELECT string_agg(status, ',') FROM webhook_inbox_outbox WHERE destination = 'active_job' " \
           "AND source_event_id = 'evt_qs_1'") == "delivered"
    end
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - @started
    sleep 2 # a second send would come within a poll
    expect(mails).to eq(["to=buyer@example.com Receipt for order #{order}"])
    expect(psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_qs_1'")).to eq("done")
    # The gem is built once per run (GeneratedRailsApp.installed_gems): its time counts here
    # also when an earlier app made it.
    elapsed += @gem_install_seconds if @gem_install_reused
    puts "\n  README quick start: #{elapsed.round} s from gem build to the first receipt mailed " \
         "(gem build + install #{@gem_install_seconds.round} s, rails new, the README's commands, the first paid order)"

    # 5. Test: the README's integration test, verbatim, on the app's test database.
    write("test/integration/stripe_webhook_test.rb", ruby_files["test/integration/stripe_webhook_test.rb"])
    out = sh("bin/rails", "test", "test/integration/stripe_webhook_test.rb", env: { "RAILS_ENV" => "test" })
    expect(out).to match(/1 runs, \d+ assertions, 0 failures, 0 errors/)
  end

  # The shop before webhook_inbox: ActiveJob and ActionMailer (a stock app has them; `rails new
  # --minimal` leaves them out), orders, a receipt mailer whose mails go to tmp/mails.log in
  # development (one line each, as an SMTP server would count them), the Stripe secret in the
  # app's credentials.
  define_method(:shop_of_its_own) do
    enable_jobs_and_mailers
    write("db/migrate/#{(Time.now.utc - 3600).strftime('%Y%m%d%H%M%S')}_create_orders.rb", <<~'RUBY')
      class CreateOrders < ActiveRecord::Migration[7.2]
        def change
          create_table :orders do |t|
            t.string :payment_intent, null: false, index: { unique: true }
            t.integer :amount, null: false
            t.string :status, null: false, default: "awaiting_payment"
          end
        end
      end
    RUBY
    write("app/models/order.rb", <<~'RUBY')
      class Order < ApplicationRecord
        def paid? = status == "paid"
      end
    RUBY
    write("app/mailers/receipt_mailer.rb", <<~'RUBY')
      class ReceiptMailer < ActionMailer::Base
        default from: "shop@example.com"

        def receipt
          mail(to: "buyer@example.com", subject: "Receipt for order #{params[:order].id}", body: "Paid. Thank you.")
        end
      end
    RUBY
    write("config/initializers/mail_log.rb", <<~'RUBY')
      class MailLog
        def initialize(_settings); end

        def deliver!(mail)
          File.open(Rails.root.join("tmp", "mails.log"), "a") { |f| f.puts("to=#{mail.to.join(',')} #{mail.subject}") }
        end
      end
      ActiveSupport.on_load(:action_mailer) do
        add_delivery_method :mail_log, MailLog
        self.delivery_method = Rails.env.test? ? :test : :mail_log
      end
    RUBY
    sh("bin/rails", "db:create")
    sh("bin/rails", "runner", "Rails.application.credentials.write({ 'stripe' => { 'webhook_secret' => #{secret.inspect} } }.to_yaml)")
  end

  define_method(:post) do |port, body|
    headers = WebhookInbox::Testing::Signing.stripe_headers(body, secret: secret).merge("Content-Type" => "application/json")
    response = Net::HTTP.new("127.0.0.1", port).tap { |h| h.read_timeout = 30 }.post("/webhooks/stripe", body, headers)
    [response.code, response.body]
  end

  define_method(:mails) do
    log = File.join(@app, "tmp", "mails.log")
    File.exist?(log) ? File.readlines(log, chomp: true) : []
  end
end
