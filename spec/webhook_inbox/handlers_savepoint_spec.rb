# frozen_string_literal: true

require "spec_helper"
require "active_record"
require "webhook_inbox/handlers"
require "webhook_inbox/testing/drain"
require_relative "../support/receiver_helpers"

# Issue 35 item 1: a Ruby handler's own transaction blocks roll back exactly as they would
# outside the worker (lib/webhook_inbox/handlers/savepoint.rb). Each pattern runs twice: once
# as plain app code outside any transaction, then as a handler through the Runner in committed
# transactions (the worker's case); what stays must be the same, and its discarded rows none.
# Also: its after_commit callbacks still run after the batch's commit, and writes through
# another connection are at least once (they commit on their own).
module HandlersSavepointSpec
  class Row < ActiveRecord::Base
    self.table_name = "rows"
    class_attribute :commits, default: []
    after_commit { commits << [label, self.class.connection.transaction_open?] }
  end

  RSpec.describe "a Ruby handler's own transaction blocks (Handlers::Savepoint)" do
    before(:all) do
      @pg = TestDatabase.cluster
      @db = ReceiverHelpers.schema_database(@pg, "handlers_savepoint")
      @pg.psql("CREATE TABLE rows (id bigserial PRIMARY KEY, label text NOT NULL, attempt int NOT NULL DEFAULT 0)", db: @db)
      ActiveRecord::Base.establish_connection(ReceiverHelpers.ar_url(@pg).sub(@pg.dbname, @db))
    end

    after(:all) { ActiveRecord::Base.remove_connection }

    before do
      sql("TRUNCATE webhook_inbox, webhook_inbox_outbox, webhook_inbox_ruby_handlers, rows")
      HandlersSavepointSpec::Row.commits = []
    end

    def sql(text) = @pg.psql(text, db: @db).strip
    def rows = sql("SELECT coalesce(string_agg(label, ',' ORDER BY id), '') FROM rows")

    # Runs body as the handler of one event through the Runner (the worker's transactions).
    def run_as_handler(body, **runner_options)
      reg = WebhookInbox::Handlers::Registry.new.tap { |r| r.add(["order.paid"], body, name: "h") }
      sql("SELECT webhook_inbox_ruby_register('#{JSON.generate(reg.pairs)}')")
      sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', 'evt_1', 'order.paid', '{}')")
      sql("SELECT count(*) FROM webhook_inbox_dispatch_batch(100, 'wait', 10, 1000, 3600000, 60000)")
      runner = WebhookInbox::Handlers::Runner.new(reg, backoff_base_ms: 60_000, **runner_options)
      runner.run_batch(ActiveRecord::Base.connection, 10)
    end

    # What body leaves outside the worker, then what it leaves as a handler (rows cleared between).
    def outside_and_inside(body)
      body.call(nil)
      outside = rows
      sql("TRUNCATE rows")
      results = run_as_handler(body)
      [outside, rows, results.map(&:status)]
    end

    # A block that raises ActiveRecord::Rollback, then a write after it.
    def rollback_then_write = lambda do |_e|
      Row.transaction do
        Row.create!(label: "discarded")
        raise ActiveRecord::Rollback
      end
      Row.create!(label: "kept")
    end

    it "rolls back a handler's own transaction block that raised ActiveRecord::Rollback, keeping what follows" do
      expect(outside_and_inside(rollback_then_write)).to eq(["kept", "kept", ["delivered"]])
      expect(sql("SELECT count(*) FROM rows WHERE label = 'discarded'")).to eq("0")
    end

    it "rolls back a transaction block left by an exception the handler rescues (its fallback kept)" do
      body = lambda do |_e|
        begin
          Row.transaction do
            Row.create!(label: "discarded")
            raise "card network timeout"
          end
        rescue RuntimeError
          Row.create!(label: "fallback")
        end
      end
      expect(outside_and_inside(body)).to eq(["fallback", "fallback", ["delivered"]])
      expect(sql("SELECT count(*) FROM rows WHERE label = 'discarded'")).to eq("0")
    end

    it "keeps Rails' rules inside a block: a nested block joins it, requires_new opens a savepoint" do
      body = lambda do |_e|
        Row.transaction do
          Row.create!(label: "outer")
          Row.transaction { Row.create!(label: "joined") } # joins: kept with the outer block
          Row.transaction(requires_new: true) do
            Row.create!(label: "discarded")
            raise ActiveRecord::Rollback
          end
        end
        Row.transaction do
          Row.create!(label: "swallowed")
          Row.transaction { raise ActiveRecord::Rollback } # joined: Rails' documented no-op, outside too
        end
      end
      expect(outside_and_inside(body)).to eq(["outer,joined,swallowed", "outer,joined,swallowed", ["delivered"]])
    end

    it "rolls back a failing save the handler rescues as a block of its own: the transaction stays usable for what follows" do
      body = lambda do |_e|
        Row.create!(label: "kept")
        Row.new(label: nil).save # NOT NULL: the insert fails and raises; rescued below
      rescue ActiveRecord::NotNullViolation
        Row.create!(label: "after")
      end
      expect(outside_and_inside(body)).to eq(["kept,after", "kept,after", ["delivered"]])
    end

    it "runs after_commit callbacks once the batch committed, not at the end of a block inside the handler" do
      body = lambda do |_e|
        Row.transaction { Row.create!(label: "in_block") }
        Row.create!(label: "direct")
      end
      expect(run_as_handler(body).map(&:status)).to eq(["delivered"])
      expect(Row.commits).to eq([["in_block", false], ["direct", false]]) # no transaction open: after the commit
    end

    it "makes a handler's writes through another connection at least once: they stay when it fails, and happen again on its retry" do
      other = ->(label) { sql("INSERT INTO rows (label) VALUES ('#{label}')") } # psql: its own connection and commit
      body = lambda do |e|
        Row.create!(label: "same_connection", attempt: e.attempt)
        other.call("other_connection")
        raise "failed after the other connection committed" if e.attempt == 1
      end
      expect(run_as_handler(body, backoff_base_ms: 0).map(&:status)).to eq(["pending"])
      expect(rows).to eq("other_connection") # the handler's own write rolled back, the other connection's stays
      reg = WebhookInbox::Handlers::Registry.new.tap { |r| r.add(["order.paid"], body, name: "h") }
      retried = WebhookInbox::Handlers::Runner.new(reg, backoff_base_ms: 0).run_batch(ActiveRecord::Base.connection, 10)
      expect(retried.map { |r| [r.attempt, r.status] }).to eq([[2, "delivered"]])
      expect(sql("SELECT string_agg(label, ',' ORDER BY label) FROM rows"))
        .to eq("other_connection,other_connection,same_connection") # twice through the other connection, once in the batch
    end

    it "isolates the handler's blocks in drain_webhook_inbox too, inside the test's own transaction" do
      WebhookInbox::Handlers.registry.clear
      WebhookInbox.subscribe("order.paid", rollback_then_write, as: :h)
      ActiveRecord::Base.transaction(joinable: false) do # as Rails' transactional tests open theirs
        c = ActiveRecord::Base.connection
        c.execute("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', 'evt_t', 'order.paid', '{}')")
        outcomes = WebhookInbox::Testing::Drain.run(c)
        expect(outcomes.map(&:result)).to eq(["done"])
        expect(c.select_values("SELECT label FROM rows ORDER BY id")).to eq(["kept"])
        raise ActiveRecord::Rollback
      end
    ensure
      WebhookInbox::Handlers.registry.clear
    end
  end
end
