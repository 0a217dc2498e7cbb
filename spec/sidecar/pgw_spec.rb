# frozen_string_literal: true

require_relative "sidecar_helper"

# The sidecar's libpq wrapper, through its C test (sidecar/test/test_pgw.c) run against the
# throwaway cluster: a pipelined transaction whose send fails must neither hang nor leave
# the connection in pipeline mode.
RSpec.describe "sidecar libpq wrapper (pgw.c)", :sidecar do
  it "ends a pipeline whose send failed: no hang, connection usable" do
    build = File.join(SidecarHelper::ROOT, "sidecar", "build")
    out, st = Open3.capture2e("make", "-s", "-C", File.join(SidecarHelper::ROOT, "sidecar"), "#{build}/test_pgw")
    expect(st).to be_success, out
    out, st = Open3.capture2e({ "WI_TEST_DATABASE_URL" => TestDatabase.cluster.url }, "#{build}/test_pgw")
    expect(st).to be_success, out
    expect(out).to include("0 failures")
  end
end
