# frozen_string_literal: true

require "spec_helper"
require "pg"
require "securerandom"
require_relative "../support/receiver_helpers"

# A receipt means "committed": an insert whose statement returned its row but whose commit
# then failed (a deferred constraint, a serialization failure, a distributed commit) is
# never answered :accepted, and in a group-commit batch a row refused at commit fails only
# its own caller. Each example runs in a database of its own, whose inbox carries a
# DEFERRABLE INITIALLY DEFERRED constraint trigger that refuses event ids starting with
# "refuse" at commit time - after the INSERT ... RETURNING has answered.
RSpec.describe WebhookInbox::Inbox, "answers only after a commit that succeeded" do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("commit") }

  REFUSE_AT_COMMIT = <<~SQL
    CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.event_id LIKE 'refuse%' THEN
        RAISE EXCEPTION 'refused at commit' USING ERRCODE = 'check_violation';
      END IF;
      RETURN NULL;
    END $$;
    CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON webhook_inbox
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit();
  SQL

  before(:all) do
    @db = "wi_commit_#{SecureRandom.hex(4)}"
    TestDatabase.cluster.psql("CREATE DATABASE #{@db}", db: "postgres")
    ReceiverHelpers.apply_schema(TestDatabase.cluster, db: @db)
    TestDatabase.cluster.psql(REFUSE_AT_COMMIT, db: @db)
  end

  def stored_ids
    pg.psql("SELECT event_id FROM webhook_inbox WHERE source_scope = '#{scope}' ORDER BY event_id", db: @db).split("\n")
  end

  def insert(inbox, id)
    inbox.insert(source_scope: scope, event_id: id, payload: %({"id":"#{id}"}))
  rescue WebhookInbox::StoreError => e
    e
  end

  [false, true].each do |group_commit|
    it "refuses a lone insert whose commit fails (group_commit: #{group_commit}), and stores nothing" do
      inbox = described_class.new(database_url: pg.url(@db), group_commit: group_commit)
      result = insert(inbox, "refuse_1")
      expect(result).to be_a(WebhookInbox::StoreError)
      expect(result.message).to include("23514").and include("refused at commit")
      expect(stored_ids).to eq([])
      # The connection is still good for the next event.
      expect(insert(inbox, "evt_after").status).to eq(:accepted)
      expect(stored_ids).to eq(["evt_after"])
    ensure
      inbox&.close
    end
  end

  it "fails only the rows refused at commit in a group-commit batch; the others are stored and accepted" do
    inbox = described_class.new(database_url: pg.url(@db), pool_size: 2, group_leaders: 1)
    # Hold the one leader slot with an insert that waits on a row lock, so the 16 callers
    # below queue up and go as one batch once it is released.
    blocker = PG.connect(pg.url(@db))
    blocker.exec("BEGIN")
    blocker.exec_params("INSERT INTO webhook_inbox (source_scope, event_id) VALUES ($1, 'lock')", [scope])
    first = Thread.new { insert(inbox, "lock") }
    sleep 0.01 until pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = '#{@db}'").to_i == 1
    ids = Array.new(16) { |i| i.even? && i < 4 ? "refuse_#{i}" : format("evt_%02d", i) }
    threads = ids.map { |id| Thread.new { insert(inbox, id) } }
    sleep 0.01 until inbox.queued_inserts == 16
    blocker.exec("ROLLBACK")
    results = ids.zip(threads.map(&:value)).to_h
    expect(first.value.status).to eq(:accepted)

    refused, kept = results.partition { |id, _| id.start_with?("refuse") }
    expect(refused.map { |_, r| r.class }.uniq).to eq([WebhookInbox::StoreError])
    expect(kept.map { |_, r| r.respond_to?(:status) && r.status }.uniq).to eq([:accepted])
    expect(stored_ids).to eq((["lock"] + kept.map(&:first)).sort)
  ensure
    blocker&.close
    inbox&.close
  end

  it "keeps every receipt true under default_transaction_isolation = serializable" do
    db = "wi_serializable_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{db}", db: "postgres")
    ReceiverHelpers.apply_schema(pg, db: db)
    pg.psql("ALTER DATABASE #{db} SET default_transaction_isolation = 'serializable'", db: "postgres")
    inbox = described_class.new(database_url: pg.url(db), pool_size: 4)
    ids = Array.new(200) { |i| "evt_#{i % 120}" } # 80 duplicates, sent concurrently
    results = ids.each_slice(25).flat_map do |slice|
      slice.map { |id| Thread.new { insert(inbox, id) } }.map(&:value)
    end
    accepted = ids.zip(results).select { |_, r| r.respond_to?(:accepted?) && r.accepted? }.map(&:first)
    stored = pg.psql("SELECT event_id FROM webhook_inbox WHERE source_scope = '#{scope}'", db: db).split("\n")
    expect(pg.psql("SHOW default_transaction_isolation", db: db).strip).to eq("serializable")
    expect(results.map(&:class).uniq - [WebhookInbox::Receipt, WebhookInbox::StoreError]).to eq([])
    expect(accepted.sort).to eq(stored.sort) # every :accepted row is stored, each once
  ensure
    inbox&.close
  end
end

RSpec.describe "WebhookInbox::ActiveRecordStore", "answers only after a commit that succeeded" do
  include ReceiverHelpers

  before(:all) do
    require "active_record"
    require "webhook_inbox/rails/active_record_store"
    pg = TestDatabase.cluster
    @db = "wi_commit_ar_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{@db}", db: "postgres")
    ReceiverHelpers.apply_schema(pg, db: @db)
    pg.psql(REFUSE_AT_COMMIT, db: @db)
    @model = Class.new(ActiveRecord::Base) do
      self.abstract_class = true
      def self.name
        "InboxCommitSpecRecord"
      end
    end
    user = pg.url[/user=(\S+)/, 1]
    @model.establish_connection(adapter: "postgresql", host: pg.socket_dir, port: pg.port, database: @db, username: user,
                              min_messages: "error")
  end
  after(:all) { @model&.remove_connection }

  let(:scope) { unique_scope("commit_ar") }

  it "raises StoreError, and stores nothing, when the commit refuses the row" do
    store = WebhookInbox::ActiveRecordStore.new(model: @model)
    expect { store.insert(source_scope: scope, event_id: "refuse_ar", payload: "{}") }
      .to raise_error(WebhookInbox::StoreError, /refused at commit/)
    expect(store.insert(source_scope: scope, event_id: "evt_ar", payload: "{}").status).to eq(:accepted)
    ids = TestDatabase.cluster.psql("SELECT event_id FROM webhook_inbox WHERE source_scope = '#{scope}'", db: @db).split("\n")
    expect(ids).to eq(["evt_ar"])
  end

  it "stores a delivery's several events (insert_all) in one transaction: all, or none when one is refused" do
    store = WebhookInbox::ActiveRecordStore.new(model: @model)
    rows = %w[evt_all_1 refuse_all evt_all_2].map { |id| { source_scope: scope, event_id: id, payload: "{}" } }
    expect { store.insert_all(rows) }.to raise_error(WebhookInbox::StoreError, /refused at commit/)
    stored = -> { TestDatabase.cluster.psql("SELECT event_id FROM webhook_inbox WHERE source_scope = '#{scope}' ORDER BY 1", db: @db).split("\n") }
    expect(stored.call).to eq([])
    receipts = store.insert_all([rows[0], rows[2], rows[0]])
    expect(receipts.map(&:status)).to eq(%i[accepted accepted duplicate])
    expect(stored.call).to eq(%w[evt_all_1 evt_all_2])
  end
end
