# frozen_string_literal: true

require "spec_helper"
require_relative "../support/receiver_helpers"

# citus_nodes off Citus: the option is checked when the Inbox is built, and where the
# coordinator cannot say which node holds a scope (not a Citus database, or unreachable) every
# receipt goes through database_url, stored once; nothing shows the URL's password. The Citus
# path itself: spec/citus/citus_direct_spec.rb.
RSpec.describe WebhookInbox::Inbox, "citus_nodes" do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }

  it "refuses a map that does not name nodes as host:port with a URL" do
    [{}, { "node1" => pg.url }, { "10.0.0.1 :5432" => pg.url }, { "10.0.0.1:5432" => "" }, ["10.0.0.1:5432"], { "10.0.0.1:5432" => nil }].each do |bad|
      expect { described_class.new(database_url: pg.url, citus_nodes: bad) }
        .to raise_error(WebhookInbox::ConfigurationError, /citus_nodes must map/)
    end
    expect { described_class.new(database_url: pg.url, citus_nodes: { "10.0.0.1:5432" => pg.url }, citus_route_ttl: 0) }
      .to raise_error(WebhookInbox::ConfigurationError, /citus_route_ttl/)
  end

  it "stores every receipt through database_url when the coordinator names no node (not Citus)" do
    inbox = described_class.new(database_url: pg.url, group_by_scope: true,
                                citus_nodes: { "127.0.0.1:#{pg.port}" => pg.url })
    scope = unique_scope("nodes")
    statuses = Array.new(8) do |t|
      Thread.new { Array.new(10) { |i| inbox.insert(source_scope: scope, event_id: "e_#{t}_#{i % 5}", payload: "{}").status } }
    end.flat_map(&:value)
    expect(statuses.tally).to eq(accepted: 40, duplicate: 40)
    expect(inbox_count(pg, scope)).to eq(40)
    expect(inbox.citus_node(scope)).to be_nil
    expect(inbox.direct_counts).to eq(direct: 0, fallback: 0) # the check can fail: a node answered would count
    expect(inbox.insert_all([{ source_scope: scope, event_id: "all_1", payload: "{}" },
                             { source_scope: scope, event_id: "all_2", payload: "{}" }]).map(&:status))
      .to eq(%i[accepted accepted])
  ensure
    inbox&.close
  end

  it "keeps a node session's statements on a database without webhook_inbox_citus_receive (db/citus/006)" do
    conn = WebhookInbox::Inbox::Connection.new(pg.url, 5000, 5000, true, true, true) # as citus_nodes' node pools
    scope = unique_scope("receive")
    row = ->(id, raw = false) { [scope, id, "t", raw ? "raw" : "{}", raw, false, nil, nil, nil, nil] }
    expect(conn.insert_batch([row.("r_1"), row.("r_2", true), row.("r_1")])).to eq([1, 3, 0])
    expect(conn.insert_batch([row.("r_3")])).to eq([1])
    expect(conn.insert_batch([row.("r_3")])).to eq([0])
    expect(inbox_count(pg, scope)).to eq(3)
  ensure
    conn&.close
  end

  it "never shows a node URL's password" do
    url = "postgres://app:s3cr3t-pw@127.0.0.1:#{pg.port}/#{pg.dbname}"
    inbox = described_class.new(database_url: pg.url, citus_nodes: { "127.0.0.1:#{pg.port}" => url })
    expect([inbox.inspect, inbox.instance_variable_get(:@nodes).inspect, inbox.instance_variable_get(:@router).inspect].join)
      .not_to include("s3cr3t")
  ensure
    inbox&.close
  end
end
