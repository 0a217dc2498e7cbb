# frozen_string_literal: true

require_relative "spec_helper"
require_relative "support/chaos"

# A small, time-bounded chaos run over the whole product (bin/chaos runs it larger):
# random duplicates and reordering over HTTP, sidecar kill -9, connection kills and two
# PostgreSQL restarts (each a crash or a fast shutdown) while the load runs.
# See spec/support/chaos.rb for the invariants.
RSpec.describe "chaos run" do
  it "keeps every invariant under duplicates, reordering, kill -9, connection kills and database restarts" do
    stack = Stack.new(sidecars: 3, sidecar_args: Chaos::SIDECAR_ARGS).start
    chaos = Chaos.new(stack, orders: Integer(ENV.fetch("CHAOS_ORDERS", 200)), db_restarts: 2)
    report = chaos.run(drain_timeout: 120)
    expect(report.violations).to eq([]), "seed #{chaos.seed}: #{report.violations.first(10).join('; ')}"
    expect(report.acknowledged).to be > 0
    expect(report.faults[:database_restart]).to eq(2)
    expect(report.faults[:sidecar_kill9] + report.faults[:connection_kill]).to be > 0
  ensure
    stack&.stop
  end
end
