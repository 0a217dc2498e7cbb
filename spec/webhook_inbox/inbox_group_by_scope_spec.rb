# frozen_string_literal: true

require "spec_helper"
require_relative "../support/receiver_helpers"

# group_by_scope (for an inbox distributed by source_scope on Citus): a group-commit batch
# never holds rows of two scopes, so each statement and commit stays on one shard.
RSpec.describe WebhookInbox::Inbox, "group_by_scope" do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }

  # Runs 64 threads x 20 inserts over 8 scopes; returns the scopes of each batch statement
  # and every receipt.
  def run(inbox, tag)
    batches = Queue.new
    conn_class = inbox.with_connection(&:class)
    allow_any_instance_of(conn_class).to receive(:insert_batch).and_wrap_original do |m, rows|
      batches << rows.map(&:first).uniq
      m.call(rows)
    end
    scopes = Array.new(8) { |i| unique_scope("#{tag}#{i}") }
    receipts = Array.new(64) do |t|
      Thread.new { Array.new(20) { |i| inbox.insert(source_scope: scopes[(t + i) % 8], event_id: "e_#{t}_#{i}", payload: "{}") } }
    end.flat_map(&:value)
    [Array.new(batches.size) { batches.pop }, receipts, scopes]
  end

  it "batches only rows of one scope, while the default mixes them; every row is answered and stored once" do
    mixed = described_class.new(database_url: pg.url, pool_size: 4)
    by_scope = described_class.new(database_url: pg.url, pool_size: 4, group_by_scope: true)
    expect([mixed.group_by_scope?, by_scope.group_by_scope?]).to eq([false, true])

    batches, = run(mixed, "mixed")
    expect(batches.count { |s| s.size > 1 }).to be_positive # the check can fail: without the setting, batches mix

    RSpec::Mocks.space.reset_all
    batches, receipts, scopes = run(by_scope, "by_scope")
    expect(batches).not_to be_empty # concurrency did batch rows
    expect(batches.map(&:size).uniq).to eq([1])
    expect(receipts.map(&:status).uniq).to eq([:accepted])
    expect(scopes.sum { |s| inbox_count(pg, s) }).to eq(64 * 20)
  ensure
    mixed&.close
    by_scope&.close
  end
end
