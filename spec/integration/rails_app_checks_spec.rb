# frozen_string_literal: true

require "spec_helper"
require_relative "../support/generated_rails_app"
require "webhook_inbox/testing/signing"

# In a freshly generated Rails 7.2 app (one for the group): transactional: true with a block
# is the event's handler (paid once, the row done, with and without a route, while the
# sidecar runs), a nil secret stops boot with the endpoint named, which
# webhook_inbox:doctor lists too, and rake's admin tasks are audited.
RSpec.describe "a generated Rails app: transactional handlers and boot checks" do
  include GeneratedRailsApp

  secret = "whsec_app_checks"
  scope = "stripe:acct_1:test"
  initializer = <<~RUBY
    WebhookInbox.configure do |c|
      c.endpoint(:stripe, secrets: [#{secret.inspect}], scope: #{scope.inspect})
    end
  RUBY

  before(:all) do
    create_generated_app
    sh("bin/rails", "generate", "webhook_inbox:install")
    write("config/initializers/webhook_inbox.rb", initializer)
    # No guard in the block and a route that pays too: any second run shows in paid_count.
    write("app/controllers/webhooks_controller.rb", <<~'RUBY')
      class WebhooksController < ActionController::API
        include WebhookInbox::Controller

        def stripe = receive_webhook(:stripe)

        def stripe_paid
          receive_webhook(:stripe, transactional: true) do |_receipt, event|
            raise "the handler failed" if event.event_type == "test.fail"

            order = Integer(JSON.parse(event.body).dig("data", "object", "metadata", "order_id"))
            ActiveRecord::Base.connection.exec_update("UPDATE orders SET status = 'paid', paid_count = paid_count + 1 WHERE id = #{order}")
            "paid in the request"
          end
        end
      end
    RUBY
    write("config/routes.rb", <<~RUBY)
      Rails.application.routes.draw do
        post "/webhooks/stripe", to: "webhooks#stripe"
        post "/webhooks/stripe_paid", to: "webhooks#stripe_paid"
      end
    RUBY
    write("db/migrate/#{(Time.now.utc + 60).strftime('%Y%m%d%H%M%S')}_create_orders.rb", <<~'RUBY') # after the gem's
      class CreateOrders < ActiveRecord::Migration[7.2]
        def up
          create_table(:orders) { |t| t.string :status, null: false, default: "awaiting_payment"; t.integer :paid_count, null: false, default: 0 }
          execute <<~'SQL'
            CREATE FUNCTION shop_route_pays(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$
              UPDATE orders SET paid_count = paid_count + 1 WHERE id = (ev.payload #>> '{data,object,metadata,order_id}')::bigint;
              SELECT 'the route ran'
            $$;
          SQL
          add_webhook_inbox_route "payment_intent.succeeded", "shop_route_pays"
          add_webhook_inbox_route "control.*", "webhook_inbox_ignore"
        end
      end
    RUBY
    sh("bin/rails", "db:create", "db:migrate")
  end

  after(:all) { remove_generated_app }

  after do
    if @sidecar
      (Process.kill("TERM", -@sidecar) rescue nil)
      (Process.wait(@sidecar) rescue nil)
    end
    @puma&.stop
  end

  define_method(:delivery) do |id, type, order|
    body = JSON.generate(id: id, type: type, data: { object: { metadata: { order_id: order } } })
    [body, WebhookInbox::Testing::Signing.stripe_headers(body, secret: secret)]
  end

  it "pays once and leaves the row done, with and without a route, while the sidecar runs" do
    orders = psql("INSERT INTO orders (status) VALUES ('awaiting_payment'), ('awaiting_payment'), ('awaiting_payment') RETURNING id").split
    @puma = PumaProcess.new(rackup: File.join(@app, "config.ru"), dir: @app, threads: "2:4",
                            env: @env.merge("RAILS_ENV" => "development")).tap { |p| Bundler.with_unbundled_env { p.start } }
    log = File.join(@work, "sidecar.log")
    @sidecar = Bundler.with_unbundled_env do
      Process.spawn(@env, "bin/webhook-inbox-sidecar", "run", "--poll-interval", "200ms", "--unrouted-delay", "1s",
                    chdir: @app, out: log, err: log, pgroup: true)
    end
    routed = delivery("evt_routed", "payment_intent.succeeded", orders[0])
    unrouted = delivery("evt_unrouted", "charge.captured", orders[1])
    statuses = [routed, routed, unrouted, unrouted].map { |b, h| JSON.parse(@puma.post("/webhooks/stripe_paid", b, h)[2])["status"] }
    expect(statuses).to eq(%w[accepted duplicate accepted duplicate])
    failing = delivery("evt_fails", "test.fail", orders[2])
    expect(@puma.post("/webhooks/stripe_paid", *failing).first).to eq(500)

    # A pending event received after them, through the sidecar: once it is done, the sidecar
    # has claimed everything that was due before it.
    control = delivery("evt_control", "control.ping", orders[2])
    expect(JSON.parse(@puma.post("/webhooks/stripe", *control)[2])["status"]).to eq("accepted")
    deadline = Time.now + 30
    sleep 0.1 until psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_control'") == "done" || Time.now > deadline
    expect(psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_control'")).to eq("done"), File.read(log)

    rows = psql(<<~SQL).lines.map { |l| l.strip.split("|") }
      SELECT event_id, status, outcome, processed_at IS NOT NULL, attempts, last_error IS NULL,
             (SELECT string_agg(e->>'result', ',') FROM jsonb_array_elements(attempt_log) e)
        FROM webhook_inbox WHERE event_id IN ('evt_routed', 'evt_unrouted', 'evt_fails') ORDER BY event_id
    SQL
    expect(rows).to eq([%w[evt_routed done paid\ in\ the\ request t 0 t done], %w[evt_unrouted done paid\ in\ the\ request t 0 t done]])
    expect(psql("SELECT string_agg(status || ':' || paid_count, ' ' ORDER BY id) FROM orders")).to eq("paid:1 paid:1 awaiting_payment:0")
    sidecar_log = File.read(log)
    expect(sidecar_log).not_to include("evt_routed", "evt_unrouted", "unrouted_event")
  end

  it "records rake requeues, replays and prunes in webhook_inbox_actions with the actor" do
    psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, status, processed_at) VALUES
        ('#{scope}', 'evt_rake_q', 'control.rake', 'quarantined', now()), ('#{scope}', 'evt_rake_d', 'control.rake', 'done', now())
    SQL
    sh("bin/rails", "webhook_inbox:requeue", env: { "ID" => "#{scope}/evt_rake_q", "ACTOR" => "ops@example.com" })
    sh("bin/rails", "webhook_inbox:replay", env: { "EVENT_ID" => "evt_rake_d", "USER" => "deploy" })
    sh("bin/rails", "webhook_inbox:prune", env: { "OLDER_THAN" => "30d", "ACTOR" => "cron" })
    expect(psql("SELECT string_agg(concat_ws(' ', actor, action, count), ',' ORDER BY id) FROM webhook_inbox_actions"))
      .to eq("ops@example.com requeue 1,deploy@#{Socket.gethostname} replay 1,cron prune 0")
  end

  it "stops bin/rails runner when an endpoint's secret is nil, naming the endpoint; the doctor lists it" do
    out = sh("bin/rails", "webhook_inbox:doctor")
    expect(out).to include("schema: version #{WebhookInbox::Schema::VERSION}", "payment_intent.succeeded -> shop_route_pays",
                           "stripe: provider stripe, scope #{scope.inspect}, 1 of 1 secret present", "sidecar: no heartbeat")
    expect(out).not_to include(secret)

    write("config/initializers/webhook_inbox.rb", <<~RUBY)
      WebhookInbox.configure do |c|
        c.endpoint(:stripe, secrets: [#{secret.inspect}, Rails.application.credentials.dig(:stripe, :webhook_secret)], scope: #{scope.inspect})
      end
    RUBY
    out = sh("bin/rails", "runner", "puts :booted", ok: false)
    expect(out).to include("endpoint :stripe: secrets[1] is nil").and(include("ConfigurationError"))
    expect(out).not_to include("booted", secret)
    out = sh("bin/rails", "webhook_inbox:doctor", ok: false) # rake tasks boot, and the doctor says what is missing
    expect(out).to include("1 of 2 secrets present", "MISSING: endpoint :stripe: secrets[1] is nil")
    expect(out).not_to include(secret)
  ensure
    write("config/initializers/webhook_inbox.rb", initializer)
  end
end
