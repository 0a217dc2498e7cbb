# frozen_string_literal: true

require "spec_helper"
require "pg"
require "timeout"
require_relative "../support/receiver_helpers"

# The native batch insert: many rows in one statement and one commit.
RSpec.describe WebhookInbox::Inbox, "group commit" do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("group") }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }

  def wait_until(what, bound: 30)
    give_up = Process.clock_gettime(Process::CLOCK_MONOTONIC) + bound
    sleep 0.01 until yield || Process.clock_gettime(Process::CLOCK_MONOTONIC) > give_up
    raise "never happened: #{what}" unless yield
  end

  # Server sessions waiting on a row lock in an inbox insert (single or batch statement).
  def lock_waiters
    pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'" \
            " AND query LIKE 'INSERT INTO webhook_inbox%'").to_i
  end

  # A session holding keys of scope in an open transaction: an insert of one of them waits.
  def hold(*ids)
    conn = PG.connect(pg.url)
    conn.exec("BEGIN")
    ids.each { |id| conn.exec_params("INSERT INTO webhook_inbox (source_scope, event_id) VALUES ($1, $2)", [scope, id]) }
    conn
  end

  def insert_in_thread(inbox, id, payload = "{}")
    Thread.new do
      inbox.insert(source_scope: scope, event_id: id, payload: payload)
    rescue Exception => e # rubocop:disable Lint/RescueException
      e
    end
  end

  it "stores a batch with rows jsonb refuses exactly as single inserts would, the others untouched" do
    # A payload the client-side check passes but the server refuses (class 22) - here by a
    # trigger, as a jsonb limit the check does not know would - sends the batch row by row.
    pg.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION wi_spec_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.source_scope = '#{scope}' AND NEW.payload ? 'refuse' THEN
          RAISE EXCEPTION 'refused' USING ERRCODE = '22P02';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER wi_spec_refuse BEFORE INSERT ON webhook_inbox FOR EACH ROW EXECUTE FUNCTION wi_spec_refuse();
    SQL
    inbox = described_class.new(database_url: pg.url, pool_size: 1)
    rows = [
      ["ok_1", %({"a": 1}), false, false, nil],
      ["bad_json", "{not json", false, false, nil],
      ["nul", %({"a": "\\u0000"}), false, false, nil],
      ["form", "a=1&b=2", true, false, nil],
      ["quarantined", "{}", false, true, "unknown account"],
      ["ok_1", %({"a": 2}), false, false, nil], # the same key again in the batch
      ["ok_2", %({"b": 2}), false, false, nil]
    ]
    batch = ->(list) { list.map { |id, payload, raw, q, err| [scope, id, "t", payload, raw, q, err] } }
    codes = inbox.with_connection { |c| c.insert_batch(batch.(rows)) }
    # bit 0 inserted, bit 1 stored raw, bit 2 quarantined
    expect(codes).to eq([1, 7, 7, 3, 5, 0, 1])
    refused = rows + [["refused", %({"refuse": true}), false, false, nil], ["ok_3", "{}", false, false, nil]]
    codes = inbox.with_connection { |c| c.insert_batch(batch.(refused)) }
    expect(codes).to eq([0, 6, 6, 2, 4, 0, 0, 7, 1])
    stored = inbox_rows(pg, scope).to_h { |r| [r[:event_id], r.values_at(:status, :payload, :raw_body, :last_error)] }
    expect(stored).to eq(
      "ok_1" => ["pending", %({"a": 1}), "", ""], "ok_2" => ["pending", %({"b": 2}), "", ""],
      "ok_3" => ["pending", "{}", "", ""],
      "bad_json" => ["quarantined", "", "{not json", "payload is not valid JSON"],
      "nul" => ["quarantined", "", %({"a": "\\\\u0000"}), "payload is not valid JSON"],
      "form" => ["pending", "", "a=1&b=2", ""], "quarantined" => ["quarantined", "{}", "", "unknown account"],
      "refused" => ["quarantined", "", %({"refuse": true}), "payload is not valid JSON"]
    )
  ensure
    pg.psql("DROP TRIGGER IF EXISTS wi_spec_refuse ON webhook_inbox; DROP FUNCTION IF EXISTS wi_spec_refuse()")
    inbox&.close
  end
end
