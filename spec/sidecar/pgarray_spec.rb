# frozen_string_literal: true

require_relative "sidecar_helper"

# The sidecar's array literals (sidecar/src/pg/pgarray.c), through its C test run against the
# throwaway cluster: every element the deliverer's batched save sends (answer bodies with
# quotes, backslashes, braces, commas; NULLs) must come out of PostgreSQL's array parser as
# it went in.
RSpec.describe "sidecar array literals (pgarray.c)", :sidecar do
  it "round-trips quoted, escaped and NULL elements through $1::text[]" do
    build = File.join(SidecarHelper::ROOT, "sidecar", "build")
    out, st = Open3.capture2e("make", "-s", "-C", File.join(SidecarHelper::ROOT, "sidecar"), "#{build}/test_pgarray")
    expect(st).to be_success, out
    out, st = Open3.capture2e({ "WI_TEST_DATABASE_URL" => TestDatabase.cluster.url }, "#{build}/test_pgarray")
    expect(st).to be_success, out
    expect(out).to include("0 failures")
  end
end
