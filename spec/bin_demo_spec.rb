# frozen_string_literal: true

require_relative "spec_helper"
require "net/http"
require "timeout"

# bin/demo as a newcomer runs it: the story passes, and everything it started is gone after.
RSpec.describe "bin/demo" do
  demo = File.join(TestDatabase::ROOT, "bin/demo")

  # Runs the demo with a private TMPDIR, so "removes its temporary data" is checked on the
  # demo's own files only (other test runs may use /tmp at the same time).
  around do |example|
    Dir.mktmpdir("wi-demo-spec-") do |tmp|
      File.chmod(0o755, tmp) # the postgres user must reach the cluster's directory inside
      @tmp = tmp
      example.run
    end
  end

  def temp_entries
    Dir.children(@tmp)
  end

  it "plays the story, prints the table and stats, exits 0 and removes its temporary data" do
    out = IO.popen({ "TMPDIR" => @tmp }, [demo], err: [:child, :out], &:read)
    expect($?.exitstatus).to eq(0), out
    expect(out).to include("every outcome matches the documents' failure matrix")
    expect(out.scan(/^  ok /).size).to eq(9)
    expect(out).not_to match(/^  !! /)
    expect(out).to match(/^  pending\s+0$/).and match(/^  quarantined\s+1$/)
    expect(temp_entries).to eq([])
  end

  it "--keep leaves it running with a URL and a psql line until interrupted" do
    io = IO.popen({ "TMPDIR" => @tmp }, [demo, "--keep"], err: [:child, :out])
    out = +""
    Timeout.timeout(180) do
      until out.include?("sidecar stats:")
        line = io.gets or break # the demo ended early: the expectations below show its output
        out << line
      end
    end
    url = out[%r{http://127\.0\.0\.1:\d+/webhooks/stripe}]
    psql = out[/look inside:\s+(psql .*)$/, 1]
    expect(url).not_to be_nil, out
    expect(psql).to match(/-h \S+ -p \d+ -U \S+ webhook_inbox/)
    # Still serving: an unsigned request is refused by the verifier, not by a dead socket.
    expect(Net::HTTP.post(URI(url), "{}", "Content-Type" => "application/json").code).to eq("401")
    Process.kill("INT", io.pid)
    out << io.read
    io.close
    expect($?.exitstatus).to eq(0), out
    expect { TCPSocket.new("127.0.0.1", URI(url).port).close }.to raise_error(Errno::ECONNREFUSED)
    expect(temp_entries).to eq([])
  ensure
    Process.kill("KILL", io.pid) if io && !io.closed? && (Process.kill(0, io.pid) rescue false)
  end
end
