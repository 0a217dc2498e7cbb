# frozen_string_literal: true

require "spec_helper"
require "stringio"
require "active_record"
require "webhook_inbox"
require "webhook_inbox/rails/doctor"
require_relative "../support/receiver_helpers"

# webhook_inbox:doctor (lib/webhook_inbox/rails/doctor.rb) on a throwaway database: it lists
# Ruby handlers instead of "routes: none (every event waits)", reads regproc columns without
# the driver's "unknown OID 24" warning, fails naming the Ruby worker when handlers are
# registered and no worker's heartbeat is fresh, fails on pending types nothing handles, and
# is healthy with a worker beating.
RSpec.describe WebhookInbox::Rails::Doctor do
  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "doctor")
    ActiveRecord::Base.establish_connection(ReceiverHelpers.ar_url(@pg).sub(@pg.dbname, @db))
  end

  after(:all) { ActiveRecord::Base.remove_connection }

  before do
    sql("TRUNCATE webhook_inbox, webhook_inbox_ruby_handlers, webhook_inbox_workers, webhook_inbox_routes")
  end

  def sql(text) = @pg.psql(text, db: @db).strip

  # [lines, ok, what the driver warned on stderr]
  def doctor(held_xids: nil)
    err = StringIO.new
    old = $stderr
    $stderr = err
    config = WebhookInbox::Configuration.new
    config.cleanup_held_transactions = held_xids if held_xids
    lines, ok = described_class.new(connection: ActiveRecord::Base.connection, config: config).report
    [lines.join("\n"), ok, err.string]
  ensure
    $stderr = old
  end

  it "fails naming the Ruby worker when handlers are registered and no worker beats; healthy once one does" do
    sql(%(SELECT webhook_inbox_ruby_register('[["payment_intent.succeeded", "PaymentHandler"]]')))
    sql("CREATE FUNCTION shop_pays(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'paid' $$")
    sql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('charge.refunded', 'shop_pays')")
    out, ok, warned = doctor
    expect(ok).to be(false)
    expect(out).to include("Ruby handlers (registered by the Ruby worker):\n  payment_intent.succeeded -> PaymentHandler",
                           "SQL routes:\n  charge.refunded -> shop_pays",
                           "Ruby worker: DOWN - 1 Ruby handler registered (PaymentHandler) and no worker's heartbeat in the " \
                           "last 60s (none ever seen)")
    expect(out).not_to include("routes: none (every event waits")
    expect(warned).not_to include("unknown OID")

    sql("SELECT webhook_inbox_worker_beat('ruby:h:1:ab', 'ruby', 'h', 1, 1)")
    out, ok, = doctor
    expect([ok, out]).to match([true, match(/^Ruby workers: 1 alive:\n  h pid 1: 1 handlers, heartbeat [0-5]s ago$/)])

    sql("SELECT webhook_inbox_worker_stopped('ruby:h:1:ab')")
    out, ok, = doctor
    expect([ok, out]).to match([false, match(/last seen: h pid 1, [0-5]s ago \(stopped\)/)])
    sql("UPDATE webhook_inbox_workers SET stopped_at = NULL, heartbeat_at = now() - interval '2 minutes'") # killed, silent
    out, ok, = doctor
    expect([ok, out]).to match([false, match(/Ruby worker: DOWN .*\(last seen: h pid 1, 12\ds ago\)/)])
  end

  it "fails naming a route whose handler's name resolves to nothing (renamed after the route was written)" do
    sql("CREATE FUNCTION shop_refunds(ev webhook_inbox) RETURNS text LANGUAGE sql AS $$ SELECT 'refunded' $$")
    sql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('charge.refunded', 'shop_refunds')")
    out, ok, = doctor
    expect([ok, out]).to match([true, include("SQL routes:\n  charge.refunded -> shop_refunds")])
    expect(out).not_to include("MISSING")
    sql("ALTER FUNCTION shop_refunds(webhook_inbox) RENAME TO shop_refunds_v2")
    out, ok, = doctor
    expect(ok).to be(false)
    expect(out).to include("  charge.refunded -> shop_refunds_v2\n    MISSING: public.shop_refunds resolves to no function here")
  ensure
    sql("DROP FUNCTION IF EXISTS shop_refunds_v2(webhook_inbox)")
  end

  # Issue 33: a real long-open REPEATABLE READ snapshot in this database, named by pid,
  # application_name and state, never by its query; HELD BACK past the threshold (here 3
  # transactions, counted: no clock in the test), a warning that does not fail the check.
  it "names the session whose snapshot holds back VACUUM, never its query, and says when it is gone" do
    holder = PG.connect(ReceiverHelpers.ar_url(@pg).sub(@pg.dbname, @db))
    holder.exec("SET application_name = 'monthly_report'")
    holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.exec("SELECT 'query-text-never-shown' AS marker, count(*) FROM webhook_inbox")
    3.times { sql("SELECT txid_current()") }
    out, ok, = doctor(held_xids: 3)
    expect(out).to match(/^cleanup horizon: HELD BACK by session pid #{holder.backend_pid} \(application_name "monthly_report", idle in transaction, open \d+s, xmin \d+ transactions old\): VACUUM cannot remove/)
    expect(out).not_to include("query-text-never-shown")
    expect(ok).to be(true)
    out, = doctor
    expect(out).to match(/^cleanup horizon: oldest held by session pid #{holder.backend_pid} /)
    holder.exec("COMMIT")
    out, = doctor(held_xids: 3)
    expect(out).not_to include("HELD BACK", "pid #{holder.backend_pid}")
  ensure
    holder&.close
  end

  it "fails on pending types with neither a route nor a Ruby handler, and reports the oldest pending event's age" do
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at) " \
        "VALUES ('s', 'e1', 'invoice.paid', '{}', now() - interval '90 seconds')")
    out, ok, = doctor
    expect(ok).to be(false)
    expect(out).to match(/^backlog: 1 pending, the oldest received 9\ds ago$/)
    expect(out).to include("NOT HANDLED: invoice.paid (1 pending, with neither a SQL route nor a Ruby handler")
    expect(out).to include("Ruby handlers: none registered", "SQL routes: none")
  end

  it "fails when events have waited over 5 minutes with no sidecar connected" do
    sql(%(SELECT webhook_inbox_ruby_register('[["invoice.*", "InvoiceHandler"]]')))
    sql("SELECT webhook_inbox_worker_beat('ruby:h:2:ab', 'ruby', 'h', 2, 1)")
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at) " \
        "VALUES ('s', 'e2', 'invoice.paid', '{}', now() - interval '10 minutes')")
    out, ok, = doctor
    expect([ok, out]).to match([false, match(/STALLED: events pending for 60\ds and no sidecar connected/)])
  end
end
