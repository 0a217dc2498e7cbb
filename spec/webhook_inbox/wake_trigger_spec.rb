# frozen_string_literal: true

require "spec_helper"
require "pg"
require_relative "../support/receiver_helpers"

# The wake-ups (db/functions/triggers.sql, v32): one NOTIFY per inserting statement, sent by
# the statement trigger's WHEN condition, so no PL/pgSQL function runs per receipt statement.
# A LISTENing session sees one notification per committed transaction that inserted (NOTIFY
# folds duplicates), none for a rolled-back one; the trigger's function is never called.
RSpec.describe "the wake-up triggers" do
  include ReceiverHelpers

  def db_name = "wake_trigger"
  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("wake") }

  before(:all) do
    pg = TestDatabase.cluster
    pg.psql("CREATE DATABASE #{db_name}", db: "postgres")
    ReceiverHelpers.apply_schema(pg, db: db_name)
  end
  after(:all) { TestDatabase.cluster.psql("DROP DATABASE IF EXISTS #{db_name} WITH (FORCE)", db: "postgres") }

  around do |example|
    @writer = PG.connect(pg.url(db_name))
    @listener = PG.connect(pg.url(db_name))
    example.run
  ensure
    @writer&.close
    @listener&.close
  end

  def notifications(channel, wait: 0.3)
    got = []
    while (c = @listener.wait_for_notify(wait))
      got << c
      wait = 0.1
    end
    got.select { |c| c == channel }
  end

  def insert_sql(id)
    "INSERT INTO webhook_inbox (source_scope, event_id, payload) VALUES ('#{scope}', '#{id}', '{}') " \
      "ON CONFLICT DO NOTHING"
  end

  it "wakes a listener once per committed inserting transaction, never for a rolled-back one" do
    @listener.exec("LISTEN webhook_inbox")
    @writer.exec(insert_sql("evt_1"))
    expect(notifications("webhook_inbox")).to eq(["webhook_inbox"])

    @writer.transaction { |c| 3.times { |i| c.exec(insert_sql("evt_batch_#{i}")) } }
    expect(notifications("webhook_inbox")).to eq(["webhook_inbox"])

    @writer.exec("BEGIN")
    @writer.exec(insert_sql("evt_rolled_back"))
    @writer.exec("ROLLBACK")
    expect(notifications("webhook_inbox")).to be_empty
    expect(@writer.exec("SELECT count(*) FROM webhook_inbox WHERE event_id = 'evt_rolled_back'").getvalue(0, 0)).to eq("0")

    # A statement whose every row was a duplicate still wakes (as the trigger always did).
    @writer.exec(insert_sql("evt_1"))
    expect(notifications("webhook_inbox")).to eq(["webhook_inbox"])
  end

  it "wakes a listener for a receipt stored by the gem" do
    inbox = WebhookInbox::Inbox.new(database_url: pg.url(db_name))
    @listener.exec("LISTEN webhook_inbox")
    expect(inbox.insert(source_scope: scope, event_id: "evt_gem", payload: "{}").status).to eq(:accepted)
    expect(notifications("webhook_inbox")).to eq(["webhook_inbox"])
  ensure
    inbox&.close
  end

  it "wakes the deliverers for an outbox insert" do
    @listener.exec("LISTEN webhook_inbox_outbox")
    @writer.exec("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, source_scope, source_event_id) " \
                 "VALUES ('op_wake', 'refunds', '{}', '#{scope}', 'evt_1')")
    expect(notifications("webhook_inbox_outbox")).to eq(["webhook_inbox_outbox"])
  end

  it "calls no trigger function per inserting statement" do
    calls = @writer.transaction do |c|
      c.exec("SET LOCAL track_functions = 'all'")
      2.times { |i| c.exec(insert_sql("evt_counted_#{i}")) }
      c.exec("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, source_scope, source_event_id) " \
             "VALUES ('op_counted', 'refunds', '{}', '#{scope}', 'evt_1')")
      c.exec("SELECT funcname, calls FROM pg_stat_xact_user_functions " \
             "WHERE funcname IN ('webhook_inbox_notify', 'webhook_inbox_outbox_notify')").values
    end
    expect(calls).to eq([])
  end

  it "replaces the trigger's form before v32 when the schema is applied again" do
    @writer.exec("DROP TRIGGER webhook_inbox_notify_insert ON webhook_inbox")
    @writer.exec("CREATE TRIGGER webhook_inbox_notify_insert AFTER INSERT ON webhook_inbox " \
                 "FOR EACH STATEMENT EXECUTE FUNCTION webhook_inbox_notify()")
    ReceiverHelpers.apply_schema(pg, db: db_name)
    defs = @writer.exec("SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'webhook_inbox_notify_insert'").column_values(0)
    expect(defs.size).to eq(1)
    expect(defs.first).to include("WHEN ((pg_notify('webhook_inbox'::text, ''::text) IS NULL))")
  end
end
