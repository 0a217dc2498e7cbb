# frozen_string_literal: true

require "spec_helper"
require_relative "../support/generated_rails_app"
require "webhook_inbox/testing/signing"

# A freshly generated Rails 7.2 app (GeneratedRailsApp: rails new --api --database=postgresql,
# the gem built and installed as a user gets it) going through the README's steps and the
# ordinary Rails lifecycle.
RSpec.describe "a Rails app's lifecycle with webhook_inbox_pg" do
  include GeneratedRailsApp

  root = ReceiverHelpers::ROOT
  secret = LIFECYCLE_SECRET = "whsec_lifecycle"
  effect_secret = "whsec_#{['lifecycle-effects-key'].pack('m0')}"
  scope = "stripe:acct_1:test"

  before(:all) { create_generated_app }

  # The example starts Puma and the sidecar: its own ivars, which after(:all) cannot see (it
  # left both running after every run).
  after do
    if @sidecar
      (Process.kill("TERM", -@sidecar) rescue nil) # its process group: the binstub execs the sidecar
      (Process.wait(@sidecar) rescue nil)
    end
    @puma&.stop
  end

  after(:all) { remove_generated_app }

  def signed_payment(event_id, order_id, amount)
    body = JSON.generate(id: event_id, type: "payment_intent.succeeded",
                         data: { object: { id: "pi_#{order_id}", amount: amount, metadata: { order_id: order_id } } })
    [body, WebhookInbox::Testing::Signing.stripe_headers(body, secret: LIFECYCLE_SECRET)]
  end

  it "installs, migrates, survives db:schema:load and db:prepare, serves Puma and the sidecar, and tests twice" do
    # The README's steps: generator, a handler migration written the documented way.
    out = sh("bin/rails", "generate", "webhook_inbox:install")
    expect(out).to include("create_webhook_inbox.rb", "config/initializers/webhook_inbox.rb", "bin/webhook-inbox-sidecar")
    migration = File.read(Dir[File.join(@app, "db/migrate/*_create_webhook_inbox.rb")].first)
    expect(migration).to include("load_webhook_inbox_schema version: #{WebhookInbox::Schema::VERSION}")
    expect(migration.lines.size).to be < 30 # loaded from the gem, not inlined
    # The app had no Procfile.dev: the generator writes one running the server and the
    # sidecar, and a bin/dev to run it; run again, it leaves the line as it is.
    expect(File.read(File.join(@app, "Procfile.dev"))).to eq("web: bin/rails server\nsidecar: bin/webhook-inbox-sidecar run\n")
    expect(File.executable?(File.join(@app, "bin/dev"))).to be(true)
    expect(File.read(File.join(@app, "bin/dev"))).to include("foreman start -f Procfile.dev")
    again = sh("bin/rails", "generate", "webhook_inbox:install")
    expect(again).to include("already reach schema version", "Procfile.dev runs the sidecar")
    expect(File.read(File.join(@app, "Procfile.dev")).scan("webhook-inbox-sidecar run").size).to eq(1)

    write("config/initializers/webhook_inbox.rb", <<~RUBY)
      WebhookInbox.configure do |c|
        c.endpoint(:stripe, secrets: [#{secret.inspect}], scope: #{scope.inspect}, tolerance: 300)
        c.effect_secrets = [ENV.fetch("WEBHOOK_INBOX_EFFECT_SECRET", #{effect_secret.inspect})]
      end
    RUBY
    # An event type routed to a destination (below): the app runs it in Ruby, once per event.
    write("app/controllers/effects_controller.rb", <<~RUBY)
      class EffectsController < ActionController::API
        include WebhookInbox::Controller
        def identity
          receive_effect(:identity) do |effect|
            ActiveRecord::Base.connection.exec_update("UPDATE orders SET status = 'refunded' WHERE id = \#{Integer(effect.payload.dig("payload", "order_id"))}")
          end
        end
      end
    RUBY
    write("app/controllers/webhooks_controller.rb", <<~RUBY)
      class WebhooksController < ActionController::API
        include WebhookInbox::Controller
        def stripe = receive_webhook(:stripe)
      end
    RUBY
    write("config/routes.rb", <<~RUBY)
      Rails.application.routes.draw do
        match "/webhooks/stripe", to: "webhooks#stripe", via: %i[get post]
        post "/effects/identity", to: "effects#identity"
      end
    RUBY
    write("db/migrate/20260101000001_create_orders.rb", <<~RUBY)
      class CreateOrders < ActiveRecord::Migration[7.2]
        def change
          create_table :orders do |t|
            t.string :status, null: false, default: "awaiting_payment"
            t.bigint :amount, null: false
            t.integer :paid_count, null: false, default: 0
            t.timestamps
          end
        end
      end
    RUBY
    # The handler: a function, its helper, and the route - once with the helper, once the old way.
    write("db/migrate/#{(Time.now.utc + 60).strftime("%Y%m%d%H%M%S")}_add_payment_handler.rb", <<~RUBY)
      class AddPaymentHandler < ActiveRecord::Migration[7.2]
        def up
          execute <<~'SQL'
            CREATE OR REPLACE FUNCTION shop_order_id(ev webhook_inbox) RETURNS bigint
            LANGUAGE sql IMMUTABLE AS $$ SELECT (ev.payload #>> '{data,object,metadata,order_id}')::bigint $$;
            CREATE OR REPLACE FUNCTION shop_on_payment(ev webhook_inbox) RETURNS text
            LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM 1 FROM orders WHERE id = shop_order_id(ev) FOR UPDATE;
                IF NOT FOUND THEN RAISE EXCEPTION 'order not found yet'; END IF;
                UPDATE orders SET status = 'paid', paid_count = paid_count + 1, updated_at = now()
                 WHERE id = shop_order_id(ev) AND status = 'awaiting_payment'
                   AND amount = (ev.payload #>> '{data,object,amount}')::bigint;
                IF FOUND THEN RETURN 'paid'; END IF;
                IF EXISTS (SELECT 1 FROM orders WHERE id = shop_order_id(ev) AND status = 'paid') THEN RETURN 'already paid'; END IF;
                PERFORM webhook_inbox_quarantine('amount mismatch');
                RETURN NULL;
            END $$;
            CREATE OR REPLACE FUNCTION shop_on_payment_batch(evs webhook_inbox[]) RETURNS text[]
            LANGUAGE plpgsql AS $$ BEGIN PERFORM webhook_inbox_batch_defer('one by one'); RETURN NULL; END $$;
          SQL
          add_webhook_inbox_route "payment_intent.succeeded", "shop_on_payment", batch: "shop_on_payment_batch"
          execute "INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('payment_intent.legacy', 'shop_on_payment')"
          add_webhook_inbox_route "identity.*", destination: :app_identity # no SQL handler: the app's receive_effect
        end
      end
    RUBY
    # A trigger on an app table, written in SQL the way db/examples/receipts.sql writes its own,
    # and one the app keeps disabled: schema.rb must bring both back as they are.
    write("db/migrate/#{(Time.now.utc + 120).strftime("%Y%m%d%H%M%S")}_add_order_triggers.rb", <<~RUBY)
      class AddOrderTriggers < ActiveRecord::Migration[7.2]
        def up
          execute <<~'SQL'
            CREATE OR REPLACE FUNCTION shop_orders_touch() RETURNS trigger
            LANGUAGE plpgsql AS $$ BEGIN NEW.updated_at := now(); RETURN NEW; END $$;
            CREATE TRIGGER shop_orders_touch BEFORE UPDATE OF status ON orders
                FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION shop_orders_touch();
            CREATE TRIGGER shop_orders_touch_paused BEFORE UPDATE OF amount ON orders FOR EACH ROW EXECUTE FUNCTION shop_orders_touch();
            ALTER TABLE orders DISABLE TRIGGER shop_orders_touch_paused;
          SQL
        end
      end
    RUBY
    app_triggers = "SELECT string_agg(pg_get_triggerdef(oid) || ' ' || tgenabled::text, E'\\n' ORDER BY tgname) FROM pg_trigger " \
                   "WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal"

    sh("bin/rails", "db:create")
    # The boot check (development and test): an app whose inbox schema is missing says so.
    expect(sh("bin/rails", "runner", "puts :booted")).to include("webhook_inbox: the inbox schema is missing", "db:migrate", "booted")
    out = sh("bin/rails", "db:migrate")
    expect(out).not_to match(/unknown OID|WARNING|CREATE TABLE/i) # no warnings, and the gem's SQL is not echoed
    triggers = psql(app_triggers)
    expect(triggers.lines.size).to eq(2)
    schema = File.read(File.join(@app, "db/schema.rb"))
    expect(schema).to include("load_webhook_inbox_schema version: #{WebhookInbox::Schema::VERSION}",
                              "FUNCTION public.shop_on_payment", "FUNCTION public.shop_order_id",
                              %(add_webhook_inbox_route "payment_intent.succeeded", "shop_on_payment", batch: "shop_on_payment_batch"),
                              %(add_webhook_inbox_route "payment_intent.legacy", "shop_on_payment"),
                              %(add_webhook_inbox_route "identity.*", destination: "app_identity"),
                              "webhook_inbox_triggers", "CREATE TRIGGER shop_orders_touch ",
                              "ALTER TABLE orders DISABLE TRIGGER shop_orders_touch_paused;")
    expect(schema).not_to include("CREATE TRIGGER webhook_inbox_") # the gem's own come with load_webhook_inbox_schema
    expect(schema).not_to include(%(create_table "webhook_inbox"))

    # What every new developer, CI and db:prepare do: the database from db/schema.rb alone.
    out = sh("bin/rails", "db:drop", "db:create", "db:schema:load")
    expect(out).not_to match(/unknown OID|WARNING/i)
    expect(psql("SELECT webhook_inbox_route('payment_intent.succeeded')::text")).to eq("shop_on_payment")
    expect(psql("SELECT count(*) FROM pg_trigger WHERE tgname = 'webhook_inbox_notify_insert'")).to eq("1")
    expect(psql(app_triggers)).to eq(triggers) # the app's triggers, the disabled one disabled

    # The test database, as maintain_test_schema and CI build it.
    sh("bin/rails", "db:prepare", env: { "RAILS_ENV" => "test" })
    expect(psql("SELECT webhook_inbox_route('payment_intent.legacy')::text", db: "shop_test")).to eq("shop_on_payment")
    expect(psql("SELECT webhook_inbox_route_batch_handler('payment_intent.succeeded')::text", db: "shop_test"))
      .to eq("shop_on_payment_batch")
    expect(psql("SELECT webhook_inbox_route('identity.verified')::text || ' ' || webhook_inbox_route_destination('identity.verified')",
                db: "shop_test")).to eq("webhook_inbox_deliver app_identity")
    expect(psql("SELECT count(*) FROM pg_trigger WHERE tgname = 'webhook_inbox_notify_insert'", db: "shop_test")).to eq("1")
    expect(psql("SELECT count(*) FROM pg_proc WHERE proname IN ('shop_on_payment', 'shop_order_id')", db: "shop_test")).to eq("2")
    expect(psql(app_triggers, db: "shop_test")).to eq(triggers)

    # bin/rails runner without DATABASE_URL: the inbox uses config/database.yml.
    out = sh("bin/rails", "runner", <<~RUBY)
      order = ActiveRecord::Base.connection.select_value("INSERT INTO orders (amount, created_at, updated_at) VALUES (1000, now(), now()) RETURNING id")
      puts "order=\#{order} schema=\#{ActiveRecord::Base.connection.webhook_inbox_schema_version} events=\#{WebhookInbox::InboxEvent.count}"
    RUBY
    expect(out).to match(/order=1 schema=#{WebhookInbox::Schema::VERSION} events=0/)
    expect(out).not_to include("webhook_inbox: the inbox schema") # current: the boot check is quiet
    expect(sh("bin/rails", "webhook_inbox:stats", env: { "JSON" => "1" })).to include(%("pending"))

    # Puma and the sidecar, started with the operations guide's Procfile line (the app's binstub: same configuration).
    # (the Procfile of "Run the sidecar beside Puma", not the outbox section's example line)
    procfile = File.read(File.join(root, "docs/operations.md"))[/^## Run the sidecar beside Puma$.*?^sidecar: (.*?)$/m, 1]
    expect(procfile).to start_with("bin/webhook-inbox-sidecar run").and include("--metrics-listen")
    metrics_port = ReceiverHelpers.free_port # the guide's port may be taken by another run here
    procfile = procfile.sub(/--metrics-listen \S+/, "--metrics-listen 127.0.0.1:#{metrics_port}")
    @puma = PumaProcess.new(rackup: File.join(@app, "config.ru"), dir: @app, threads: "2:4",
                            env: @env.merge("RAILS_ENV" => "development")).tap do |p|
      Bundler.with_unbundled_env { p.start }
    end
    log = File.join(@work, "sidecar.log")
    @sidecar = Bundler.with_unbundled_env do
      Process.spawn(@env, *procfile.split, "--poll-interval", "200ms", chdir: @app, out: log, err: log, pgroup: true)
    end
    body, headers = signed_payment("evt_pay_1", 1, 1000)
    statuses = 3.times.map { @puma.post("/webhooks/stripe", body, headers) }
    expect(statuses.map(&:first)).to eq([200, 200, 200])
    expect(statuses.map { |s| JSON.parse(s[2])["status"] }).to eq(%w[accepted duplicate duplicate])
    expect(@puma.request("GET", "/webhooks/stripe").first).to eq(405)
    deadline = Time.now + 30
    sleep 0.2 until psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_pay_1'") == "done" || Time.now > deadline
    expect(psql("SELECT status || ' ' || outcome FROM webhook_inbox WHERE event_id = 'evt_pay_1'")).to eq("done paid"), File.read(log)
    expect(psql("SELECT status || ' ' || paid_count FROM orders WHERE id = 1")).to eq("paid 1")
    metrics = Net::HTTP.get(URI("http://127.0.0.1:#{metrics_port}/metrics"))
    expect(metrics).to match(/^webhook_inbox_handled_total\{event_type="payment_intent.succeeded",outcome="done"\} 1$/)

    # The app's own test suite, twice: receipts roll back with each test, the handler runs.
    write("test/integration/stripe_webhook_test.rb", <<~RUBY)
      require "test_helper"
      require "webhook_inbox/testing/minitest"

      class StripeWebhookTest < ActionDispatch::IntegrationTest
        test "a signed payment is accepted and handled once" do
          order = ActiveRecord::Base.connection.select_value("INSERT INTO orders (amount, created_at, updated_at) VALUES (1000, now(), now()) RETURNING id")
          body = JSON.generate(id: "evt_test_pay", type: "payment_intent.succeeded",
                               data: { object: { amount: 1000, metadata: { order_id: order } } })
          post "/webhooks/stripe", params: body, headers: webhook_headers(:stripe, body, secret: #{secret.inspect})
          assert_equal "accepted", response.parsed_body["status"]
          outcomes = drain_webhook_inbox
          assert_equal [["evt_test_pay", "done", "paid"]], outcomes.map { |o| [o.event_id, o.result, o.detail] }
          assert_equal "paid", ActiveRecord::Base.connection.select_value("SELECT status FROM orders WHERE id = \#{order}")
        end

        test "an event routed to a destination runs the app's effect block once" do
          order = ActiveRecord::Base.connection.select_value("INSERT INTO orders (amount, created_at, updated_at) VALUES (1000, now(), now()) RETURNING id")
          store_webhook_event(event_type: "identity.verified", payload: { "id" => "evt_idv", "order_id" => order })
          assert_equal [%w[evt_idv done]], drain_webhook_inbox.map { |o| [o.event_id, o.result] }
          deliveries = deliver_webhook_inbox_effects(:app_identity, to: "/effects/identity")
          assert_equal [[200, "done"]], deliveries.map { |d| [d.status, JSON.parse(d.body)["status"]] }
          assert_equal "refunded", ActiveRecord::Base.connection.select_value("SELECT status FROM orders WHERE id = \#{order}")
          assert_equal [], deliver_webhook_inbox_effects(:app_identity, to: "/effects/identity")
        end
      end
    RUBY
    2.times do
      out = sh("bin/rails", "test")
      expect(out).to match(/2 runs, \d+ assertions, 0 failures, 0 errors/)
    end
    expect(psql("SELECT count(*) FROM webhook_inbox", db: "shop_test")).to eq("0")
    # Parallel test databases (shop_test-0, -1) are built from db/schema.rb by each worker the
    # first time, and truncated by every later run once their schema is current: the routes
    # must survive that, db:truncate_all and db:seed:replant, as schema_migrations does.
    helper = File.join(@app, "test/test_helper.rb")
    File.write(helper, File.read(helper).sub(/parallelize\(workers: :number_of_processors\)/, "parallelize(workers: 2, threshold: 1)"))
    routes = "SELECT count(*) FROM webhook_inbox_routes"
    3.times do |run|
      out = sh("bin/rails", "test")
      expect(out).to match(/Running 2 tests in parallel using 2 processes/)
      expect(out).to match(/0 failures, 0 errors/), "run #{run + 1}:\n#{out}"
    end
    expect(psql("SELECT webhook_inbox_route('payment_intent.succeeded')::text", db: "shop_test-1")).to eq("shop_on_payment")
    sh("bin/rails", "db:truncate_all", env: { "RAILS_ENV" => "test" })
    sh("bin/rails", "db:truncate_all")
    expect([psql("SELECT count(*) FROM orders"), psql(routes), psql(routes, db: "shop_test")]).to eq(%w[0 3 3])
    out = sh("bin/rails", "test")
    expect(out).to match(/Running 2 tests in parallel/).and match(/0 failures, 0 errors/)
    write("db/seeds.rb", "ActiveRecord::Base.connection.execute(\"INSERT INTO orders (amount, created_at, updated_at) VALUES (5, now(), now())\")\n")
    sh("bin/rails", "db:seed:replant")
    expect([psql("SELECT count(*) FROM orders"), psql(routes)]).to eq(%w[1 3])
    # A route that goes missing all the same (a DELETE) is named at boot, not left to wait.
    psql("DELETE FROM webhook_inbox_routes WHERE event_type = 'payment_intent.legacy'")
    expect(sh("bin/rails", "runner", "puts :booted")).to include("1 of the 3 event routes in schema.rb are missing from the " \
                                                              "database (payment_intent.legacy)", "booted")
    psql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('payment_intent.legacy', 'shop_on_payment')")
    expect(sh("bin/rails", "runner", "puts :booted")).not_to include("webhook_inbox:")

    # structure.sql keeps the routes too.
    write("config/initializers/schema_format.rb", "Rails.application.config.active_record.schema_format = :sql\n")
    sh("bin/rails", "db:schema:dump")
    expect(File.read(File.join(@app, "db/structure.sql"))).to include("INSERT INTO webhook_inbox_routes", "CREATE TRIGGER shop_orders_touch ")
    sh("bin/rails", "db:drop", "db:create", "db:schema:load", env: { "RAILS_ENV" => "test" })
    # (as the development database has them now: Rails' truncation above re-enabled every trigger)
    expect(psql(app_triggers, db: "shop_test")).to eq(psql(app_triggers)).and include("shop_orders_touch_paused")
    expect(psql("SELECT webhook_inbox_route('payment_intent.succeeded')::text", db: "shop_test")).to eq("shop_on_payment")
    expect(psql("SELECT webhook_inbox_route_destination('identity.verified')", db: "shop_test")).to eq("app_identity")
    expect(psql("SELECT webhook_inbox_route_batch_handler('payment_intent.succeeded')::text", db: "shop_test"))
      .to eq("shop_on_payment_batch") # structure.sql's route lines

    # After a gem upgrade the install generator writes an upgrade migration (here from a
    # pre-versioning migration that inlined the SQL), and nothing when current.
    current = Dir[File.join(@app, "db/migrate/*_create_webhook_inbox.rb")].first
    FileUtils.mv(current, File.join(@work, "current.rb"))
    write("db/migrate/20250101000000_create_webhook_inbox.rb", "execute <<~'SQL'\nCREATE TABLE IF NOT EXISTS webhook_inbox (\nSQL\n")
    out = sh("bin/rails", "generate", "webhook_inbox:install")
    upgrade = Dir[File.join(@app, "db/migrate/*_upgrade_webhook_inbox_to_v#{WebhookInbox::Schema::VERSION}.rb")].first
    expect(upgrade).not_to be_nil, out
    expect(File.read(upgrade)).to include("load_webhook_inbox_schema version: #{WebhookInbox::Schema::VERSION}", "from version 3")
    FileUtils.rm_f([upgrade, File.join(@app, "db/migrate/20250101000000_create_webhook_inbox.rb")])
    FileUtils.mv(File.join(@work, "current.rb"), current)

    # The handler generator: a fail-closed template and a test that runs it through the dispatch.
    sh("bin/rails", "generate", "webhook_inbox:handler", "customer.*")
    migration = File.read(Dir[File.join(@app, "db/migrate/*_add_webhook_inbox_handler_customer.rb")].first)
    expect(migration).to include("CREATE OR REPLACE FUNCTION handle_customer(ev webhook_inbox)", "FOR UPDATE",
                                 %(add_webhook_inbox_route "customer.*", "handle_customer"), "remove_webhook_inbox_route")
    sh("bin/rails", "generate", "webhook_inbox:handler", "invoice.paid", "--batch")
    migration = File.read(Dir[File.join(@app, "db/migrate/*_add_webhook_inbox_handler_invoice_paid.rb")].first)
    expect(migration).to include("handle_invoice_paid_batch(evs webhook_inbox[]) RETURNS text[]", "webhook_inbox_batch_defer",
                                 %(add_webhook_inbox_route "invoice.paid", "handle_invoice_paid", batch: "handle_invoice_paid_batch"))
    sh("bin/rails", "db:migrate")
    expect(psql("SELECT webhook_inbox_route_batch_handler('invoice.paid')::text")).to eq("handle_invoice_paid_batch")
    out = sh("bin/rails", "test", "test/webhook_inbox/handle_customer_test.rb", ok: false)
    expect(out).to include("handle_customer is not written yet", "1 failures")
  end
end
