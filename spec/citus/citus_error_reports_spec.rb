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

  it "takes each recovery and quarantined HTTP effect once across scopes (shards), a quarantine with its route's handler" do
    migrate_citus!
    sql(clean = "TRUNCATE webhook_inbox, webhook_inbox_outbox, webhook_inbox_error_reports, webhook_inbox_recovery_reports, " \
                "webhook_inbox_effect_reports") # the cluster is shared
    sql("INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('t.routed', 'webhook_inbox_schema_version') ON CONFLICT DO NOTHING")
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, recovered_at, request_headers) VALUES " \
        "('r1', 'f1', 't.x', '{}', clock_timestamp(), NULL), ('r2', 'g1', 't.x', '{}', clock_timestamp(), '{\"x-github-delivery\": \"g\"}'), " \
        "('r3', 'old', 't.x', '{}', now() - interval '1 day', NULL)")
    sql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, processed_at) VALUES " \
        "('q1', 'qr', 't.routed', '{}', 'quarantined', clock_timestamp())")
    expect(sql("SELECT string_agg(event_id || ':' || how, ',' ORDER BY event_id) FROM webhook_inbox_recovery_reports_take(100, 3600, 10)"))
      .to eq("f1:fetched,g1:redelivered")
    expect(sql("SELECT count(*) FROM webhook_inbox_recovery_reports_take(100, 3600)")).to eq("0")
    expect(sql("SELECT string_agg(event_id || ':' || handler, ',') FROM webhook_inbox_error_reports_take(100, 3600, 10)"))
      .to eq("qr:webhook_inbox_schema_version")
    sql("UPDATE webhook_inbox_error_reporter SET recovered_since = now() + interval '1 second'")
    expect(sql("SELECT webhook_inbox_app_reports_prune(100)")).to eq("2")
    # HTTP effects the sidecar quarantined, across scopes: not the Ruby worker's own
    sql("INSERT INTO webhook_inbox_outbox (operation_id, destination, payload, status, source_scope, source_event_id, processed_at) " \
        "VALUES ('op1', 'refunds', '{}', 'quarantined', 'r1', 'f1', clock_timestamp()), " \
        "('op2', 'refunds', '{}', 'quarantined', 'r2', 'g1', clock_timestamp()), " \
        "('op3', 'active_job', '{}', 'quarantined', 'r3', 'x', clock_timestamp())")
    expect(sql("SELECT string_agg(source_scope || '/' || operation_id, ',' ORDER BY operation_id) " \
               "FROM webhook_inbox_effect_reports_take(100, 3600, 10)")).to eq("r1/op1,r2/op2")
    expect(sql("SELECT count(*) FROM webhook_inbox_effect_reports_take(100, 3600)")).to eq("0")
  ensure
    sql(clean) if clean
  end
end
