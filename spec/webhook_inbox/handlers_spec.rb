# frozen_string_literal: true

require "spec_helper"
require "json"
require "digest"
require "active_record"
require "webhook_inbox/testing/rspec"
require "webhook_inbox/handlers/worker"
require_relative "../support/receiver_helpers"

# Ruby handlers (db/009_ruby_handlers.sql, WebhookInbox::Handlers) through drain_webhook_inbox,
# which runs them as the Ruby worker does, inside the example's transaction: once per
# (event, handler) across duplicates and replays, a raise retried with its writes rolled
# back, WebhookInbox::Permanent quarantined, unrouted types still waiting.
RSpec.describe WebhookInbox::Handlers do
  before(:all) do
    pg = TestDatabase.cluster
    @db = "handlers_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{@db}", db: "postgres")
    ReceiverHelpers.schema_files.each { |f| pg.psql(File.read(f), db: @db) }
    pg.psql(<<~SQL, db: @db)
      CREATE TABLE calls (id bigserial PRIMARY KEY, handler text NOT NULL, event_id text NOT NULL, attempt int NOT NULL);
      CREATE FUNCTION orders_route(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$
        INSERT INTO calls (handler, event_id, attempt) VALUES ('sql', ev.event_id, 0); SELECT 'routed' $$;
      INSERT INTO webhook_inbox_routes VALUES ('payment_intent.succeeded', 'orders_route');
    SQL
    ActiveRecord::Base.establish_connection(ReceiverHelpers.ar_url(pg).sub(pg.dbname, @db))
  end

  after(:all) { ActiveRecord::Base.remove_connection }

  around do |example|
    WebhookInbox::Handlers.registry.clear
    ActiveRecord::Base.transaction do
      example.run
      raise ActiveRecord::Rollback
    end
  ensure
    WebhookInbox::Handlers.registry.clear
  end

  def record(handler, event) = ActiveRecord::Base.connection.exec_insert(
    "INSERT INTO calls (handler, event_id, attempt) VALUES ($1, $2, $3)", "spec", [handler, event.id, event.attempt]
  )

  def calls = ActiveRecord::Base.connection.select_rows("SELECT handler, event_id, attempt::text FROM calls ORDER BY id")
  def sql(text) = ActiveRecord::Base.connection.select_value(text)

  def dispatch = ActiveRecord::Base.connection.select_rows("SELECT result FROM webhook_inbox_dispatch_batch(10, 'wait', 10, 1000, 3600000, 60000)")
  def status(id) = sql("SELECT status FROM webhook_inbox WHERE event_id = '#{id}'")
  def savepoint(&) = ActiveRecord::Base.transaction(requires_new: true, &) # an expected error leaves the example's transaction usable
  def requeue(id) = sql("SELECT moved FROM webhook_inbox_requeue('requeue', '{\"event_id\": \"#{id}\"}', 'spec')")

  it "registers by adding only: an older worker's set or an empty one never takes a newer handler's events away" do
    WebhookInbox.subscribe("payment_intent.succeeded", as: :mark_paid) { |e| record("mark_paid", e) }
    c = ActiveRecord::Base.connection
    WebhookInbox::Handlers.register(c)
    older = WebhookInbox::Handlers::Registry.new.tap { |r| r.add(["invoice.paid"], ->(_e) {}, name: "old_invoices") }
    expect(WebhookInbox::Handlers.register(c, older)).to eq(2) # an older release's worker restarts: both stay
    expect { WebhookInbox::Handlers.register(c, WebhookInbox::Handlers::Registry.new) }
      .to raise_error(WebhookInbox::Error, /no Ruby handlers to register/)
    expect { savepoint { sql("SELECT webhook_inbox_ruby_register('[]')") } }.to raise_error(ActiveRecord::StatementInvalid, /no handlers given/)

    store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_r" })
    expect(dispatch).to eq([["handed"]]) # not done by the SQL route alone
    expect(status("evt_r")).to eq("pending")
  end

  it "exits 1 with an error when the worker loaded no handler (fail closed), registering nothing" do
    out = StringIO.new
    expect(WebhookInbox::Handlers::Worker.new(registry: WebhookInbox::Handlers::Registry.new, out: out).run).to eq(1)
    expect(out.string).to match(/level=error event=ruby_worker_no_handlers/)
  end

  it "retires a handler only as an audited action: its registrations go, its pending runs are quarantined as retired" do
    WebhookInbox.subscribe("invoice.paid", as: :a) { |e| record("a", e) }
    WebhookInbox.subscribe("invoice.paid", "invoice.voided", as: :gone) { |e| record("gone", e) }
    WebhookInbox::Handlers.register(ActiveRecord::Base.connection)
    store_webhook_event(event_type: "invoice.paid", payload: { "id" => "evt_t" })
    expect(dispatch).to eq([["handed"]])

    c = ActiveRecord::Base.connection
    r = WebhookInbox::Handlers.retire(c, "gone", event_type: "invoice.voided", actor: "ops@host")
    expect(r.slice(:removed, :runs_retired)).to eq(removed: 1, runs_retired: 0) # still registered for invoice.paid
    r = WebhookInbox::Handlers.retire(c, "gone", actor: "ops@host")
    expect(r.slice(:removed, :runs_retired)).to eq(removed: 1, runs_retired: 1)
    expect(c.select_rows("SELECT actor, action, filter->>'handler', count::text FROM webhook_inbox_actions WHERE id = #{r[:action_id]}"))
      .to eq([%w[ops@host retire_handler gone 1]])
    expect { savepoint { WebhookInbox::Handlers.retire(c, "gone", actor: "ops@host") } }.to raise_error(ActiveRecord::StatementInvalid, /no Ruby handler gone is registered/)

    WebhookInbox::Handlers.registry.clear
    WebhookInbox.subscribe("invoice.paid", as: :a) { |e| record("a", e) } # the next release, without gone
    expect(drain_webhook_inbox.map(&:result)).to eq(["done"])
    expect(calls).to eq([%w[a evt_t 1]])
    expect(c.select_rows("SELECT payload->>'handler', status, last_error FROM webhook_inbox_outbox ORDER BY 1"))
      .to eq([["a", "delivered", nil], ["gone", "quarantined", "handler retired"]]) # shown, not waited for
  end

  it "rake webhook_inbox:retire_handler NAME= ACTOR= retires through the app's connection; no NAME, or an unknown one, aborts" do
    require "rake"
    rake = Rake::Application.new
    Rake.application = rake
    Rake::Task.define_task(:environment)
    load File.expand_path("../../lib/webhook_inbox/rails/tasks.rake", __dir__)
    WebhookInbox.subscribe("invoice.paid", as: :gone) { |e| record("gone", e) }
    WebhookInbox::Handlers.register(ActiveRecord::Base.connection)
    task = lambda do |env|
      env.each { |k, v| ENV[k] = v }
      rake["webhook_inbox:retire_handler"].tap(&:reenable).invoke
    ensure
      env.each_key { |k| ENV.delete(k) }
    end
    expect { task.call("NAME" => "gone", "ACTOR" => "ops@host") }
      .to output(/retired gone: 1 registration\(s\) removed, 0 pending run\(s\) quarantined \(action #\d+\)/).to_stdout
    expect(sql("SELECT actor || ' ' || action FROM webhook_inbox_actions ORDER BY id DESC LIMIT 1")).to eq("ops@host retire_handler")
    expect { task.call({}) }.to raise_error(SystemExit).and output(/needs NAME=/).to_stderr
    expect { savepoint { task.call("NAME" => "gone") } }.to raise_error(SystemExit).and output(/no Ruby handler gone is registered/).to_stderr
  end

  it "settles a requeued event against the handlers registered now: a renamed handler's old quarantined run is not waited for" do
    WebhookInbox.subscribe("charge.refunded", as: :refund) { |_e| raise WebhookInbox::Permanent, "bug" }
    store_webhook_event(event_type: "charge.refunded", payload: { "id" => "evt_n" })
    expect(drain_webhook_inbox.map(&:result)).to eq(["quarantined"])
    WebhookInbox::Handlers.registry.clear
    WebhookInbox.subscribe("charge.refunded", as: :refund_v2) { |e| record("refund_v2", e) } # the fix, renamed
    WebhookInbox::Handlers.retire(ActiveRecord::Base.connection, "refund", actor: "spec")
    requeue("evt_n")
    expect(drain_webhook_inbox.map(&:result)).to eq(["done"])
    expect([status("evt_n"), calls]).to eq(["done", [%w[refund_v2 evt_n 1]]])
    expect(ActiveRecord::Base.connection.select_rows("SELECT payload->>'handler', status FROM webhook_inbox_outbox ORDER BY 1"))
      .to eq([%w[refund quarantined], %w[refund_v2 delivered]])
  end

  it "runs the SQL route once per event also after the type's last Ruby handler was retired: a requeue does not run it again" do
    WebhookInbox.subscribe("payment_intent.succeeded", as: :x) { |_e| raise WebhookInbox::Permanent, "no" }
    store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_s1" })
    expect(drain_webhook_inbox.map(&:result)).to eq(["quarantined"])
    WebhookInbox::Handlers.retire(ActiveRecord::Base.connection, "x", actor: "spec")
    WebhookInbox::Handlers.registry.clear
    requeue("evt_s1")
    expect(drain_webhook_inbox.map { |o| [o.result, o.detail] }).to eq([["done", "SQL route orders_route already ran for this event"]])
    expect(calls).to eq([%w[sql evt_s1 0]])
  end

  it "retries a handler that raised ActiveRecord::Rollback (the savepoint swallows it: nothing was applied), never marks it delivered" do
    rollback = true
    WebhookInbox.subscribe("customer.created", as: :c) { |e| record("c", e); raise ActiveRecord::Rollback if rollback }
    store_webhook_event(event_type: "customer.created", payload: { "id" => "evt_rb" })
    out = drain_webhook_inbox
    expect(out.map(&:result)).to eq(["retry"])
    expect(out.first.detail).to include("c: ActiveRecord::Rollback")
    expect([status("evt_rb"), calls]).to eq(["pending", []])
    rollback = false
    sql("UPDATE webhook_inbox_outbox SET next_attempt_at = now() WHERE destination = 'ruby'") # its backoff, elapsed
    drain_webhook_inbox
    expect([status("evt_rb"), calls]).to eq(["done", [%w[c evt_rb 2]]])
  end

  it "fails the run when it is no longer pending at save (webhook_inbox_ruby_finish NULL), rolling it back" do
    WebhookInbox.subscribe("customer.created", as: :meddler) do |e|
      record("meddler", e)
      ActiveRecord::Base.connection.exec_update("UPDATE webhook_inbox_outbox SET status = 'delivered' WHERE operation_id = $1", "spec", [e.operation_id])
    end
    store_webhook_event(event_type: "customer.created", payload: { "id" => "evt_gone" })
    expect { savepoint { drain_webhook_inbox } }.to raise_error(WebhookInbox::Error, /no longer pending when saved/)
    expect([status("evt_gone"), calls]).to eq(["pending", []])
  end

  it "runs every matching handler once per event: exact, prefix, catch-all, beside the SQL route; not again on a duplicate or replay" do
    seen = []
    WebhookInbox.subscribe("payment_intent.succeeded", as: :mark_paid) { |e| seen << e; record("mark_paid", e) }
    WebhookInbox.subscribe("payment_intent.*", as: :audit) { |e| record("audit", e) }
    WebhookInbox.subscribe("*", as: :everything) { |e| record("everything", e) }
    store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_1", "amount" => 100 }, scope: "stripe:a")
    store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_1", "amount" => 100 }, scope: "stripe:a")
    store_webhook_event(event_type: "customer.created", payload: { "id" => "evt_2" }, scope: "stripe:a")

    outcomes = drain_webhook_inbox.sort_by(&:event_id)
    expect(outcomes.map { |o| [o.event_id, o.result] }).to eq([%w[evt_1 done], %w[evt_2 done]])
    expect(calls.sort).to eq([%w[audit evt_1 1], %w[everything evt_1 1], %w[everything evt_2 1], %w[mark_paid evt_1 1], %w[sql evt_1 0]])
    e = seen.first
    expect([e.scope, e.id, e.type, e.payload["amount"], e.attempt, e.received_at.class]).to eq(["stripe:a", "evt_1", "payment_intent.succeeded", 100, 1, Time])
    expect(e.operation_id).to eq("handler_#{Digest::SHA256.hexdigest("stripe:a\nevt_1\nmark_paid")}")
    expect(e.inspect).not_to include("100")

    sql("SELECT moved FROM webhook_inbox_requeue('replay', '{\"event_id\": \"evt_1\"}', 'spec')")
    expect(drain_webhook_inbox.map { |o| [o.event_id, o.result] }).to eq([%w[evt_1 done]])
    expect(calls.size).to eq(5) # neither the Ruby handlers nor the SQL route ran again
  end

  it "retries a raising handler with its writes rolled back, then succeeds; other handlers of the event run once" do
    failures = 1
    WebhookInbox.subscribe("invoice.paid", as: :flaky) do |e|
      record("flaky", e)
      raise "upstream not ready" if (failures -= 1) >= 0
    end
    WebhookInbox.subscribe("invoice.paid", as: :steady) { |e| record("steady", e) }
    store_webhook_event(event_type: "invoice.paid", payload: { "id" => "evt_f" })

    first = drain_webhook_inbox
    expect(first.map(&:result)).to eq(["retry"])
    expect(first.first.detail).to include("flaky: RuntimeError: upstream not ready")
    expect(calls).to eq([%w[steady evt_f 1]]) # flaky's insert rolled back with it
    expect(sql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_f'")).to eq("pending")

    sql("UPDATE webhook_inbox_outbox SET next_attempt_at = now() WHERE destination = 'ruby'") # its backoff, elapsed
    expect(drain_webhook_inbox).to eq([]) # no event was due: the run was
    expect(calls).to eq([%w[steady evt_f 1], %w[flaky evt_f 2]])
    expect(sql("SELECT status || ' ' || outcome FROM webhook_inbox WHERE event_id = 'evt_f'")).to eq("done Ruby handlers done")
  end

  it "quarantines the run and the event on WebhookInbox::Permanent, rolling the handler's writes back; requeuing the event runs it again" do
    refuse = true
    WebhookInbox.subscribe("charge.refunded", as: :refund) do |e|
      record("refund", e)
      raise WebhookInbox::Permanent, "amount mismatch" if refuse
    end
    store_webhook_event(event_type: "charge.refunded", payload: { "id" => "evt_p" })
    expect(drain_webhook_inbox.map { |o| [o.result, o.detail] }).to eq([["quarantined", "Ruby handler refund: WebhookInbox::Permanent: amount mismatch"]])
    expect(calls).to eq([])

    refuse = false
    sql("SELECT moved FROM webhook_inbox_requeue('requeue', '{\"event_id\": \"evt_p\"}', 'spec')")
    expect(drain_webhook_inbox.map(&:result)).to eq(["done"])
    expect(calls).to eq([%w[refund evt_p 1]])
  end

  it "leaves types without a route or Ruby handler waiting (fail closed)" do
    WebhookInbox.subscribe("invoice.*", as: :invoices) { |e| record("invoices", e) }
    store_webhook_event(event_type: "payout.paid", payload: { "id" => "evt_u" })
    expect(drain_webhook_inbox.map(&:result)).to eq(["waiting"])
    expect(calls).to eq([])
  end

  it "makes events that waited for a route due at once when a worker registers handlers for their types (v18)" do
    store_webhook_event(event_type: "invoice.paid", payload: { "id" => "evt_w1" })
    store_webhook_event(event_type: "invoice.created", payload: { "id" => "evt_w2" })
    store_webhook_event(event_type: "payout.paid", payload: { "id" => "evt_w3" })
    expect(dispatch).to eq([["waiting"]] * 3) # the sidecar ran before the Ruby worker registered
    expect(dispatch).to eq([]) # put off by the unrouted delay

    WebhookInbox.subscribe("invoice.*", as: :invoices) { |e| record("invoices", e) }
    WebhookInbox::Handlers.register(ActiveRecord::Base.connection)
    expect(dispatch).to eq([["handed"]] * 2) # not a minute later
    expect(sql("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox WHERE next_attempt_at <= now()"))
      .to be_nil # payout.paid still waits for its route; the handed ones wait for the worker
    expect(sql("SELECT attempts FROM webhook_inbox WHERE event_id = 'evt_w3'")).to eq(0)
  end

  it "names handlers stably: a second unnamed block on the same types is refused, classes go by their name" do
    WebhookInbox.subscribe("a.b") { nil }
    expect { WebhookInbox.subscribe("a.b") { nil } }.to raise_error(ArgumentError, /already subscribed.*as: :send_receipt/)
    expect { WebhookInbox.subscribe("a*b") { nil } }.to raise_error(ArgumentError, /not an event type/)
    expect { Class.new(WebhookInbox::Handler) { subscribe "a.b" } }.to raise_error(ArgumentError, /anonymous class/)
    klass = stub_const("ReceiptHandler", Class.new(WebhookInbox::Handler))
    klass.subscribe "a.b"
    klass.subscribe "c.*"
    expect(WebhookInbox::Handlers.registry["ReceiptHandler"].patterns).to eq(["a.b", "c.*"])
    expect(WebhookInbox::Handlers.registry.names_for("c.d")).to eq(["ReceiptHandler"])
  end
end
