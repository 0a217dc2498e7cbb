# frozen_string_literal: true

require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../sidecar/sidecar_helper"

# The sidecar's quarantines taken for Rails.error (db/025, functions/error_reports.sql) on a
# real Citus cluster, where the inbox is distributed and the reports table is local: each
# taken once, a Ruby handler's left out, and the report of a quarantine that is over pruned.
# Skipped with the reason when Citus is not installed.
RSpec.describe "Quarantine reports on Citus" do
  include CitusClusterSpec

  it "takes each quarantine once across scopes (shards), not a Ruby handler's, and prunes the over ones" do
    migrate_citus!
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, processed_at) VALUES " \
        "('s1', 'e1', 't.x', '{}', 'quarantined', clock_timestamp()), ('s2', 'e2', 't.x', '{}', 'quarantined', clock_timestamp()), " \
        "('s3', 'e3', 't.x', '{}', 'quarantined', clock_timestamp())")
    sql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, source_scope, source_event_id) " \
        "VALUES ('op_ruby', 'ruby', '{}', 'quarantined', 's3', 'e3')")
    expect(sql("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox_error_reports_take(100, 3600)")).to eq("e1,e2")
    expect(sql("SELECT count(*) FROM webhook_inbox_error_reports_take(100, 3600)")).to eq("0")
    expect(sql("SELECT webhook_inbox_error_reports_prune(100)")).to eq("0")
    sql("UPDATE webhook_inbox SET status = 'done' WHERE event_id = 'e1'")
    expect(sql("SELECT webhook_inbox_error_reports_prune(100)")).to eq("1")
    expect(sql("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM webhook_inbox_error_reports")).to eq("e2,e3") # e3: recorded, never returned
  end
end
