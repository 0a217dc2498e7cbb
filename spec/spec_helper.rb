# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "webhook_inbox"
require_relative "support/throwaway_postgres"

# Every temp file of the run (clusters, Puma and sidecar logs, scratch files; also those of
# the processes the specs start) goes into one directory, removed at exit. The postgres
# user must be able to reach the clusters inside it, hence 0755.
# The cleanups run only in the process that set them up: a forked child that exits through
# an exception runs the inherited at_exit hooks too, and once removed the shared cluster
# and every spec after it (CI saw 29 failures from one failing child).
require "tmpdir"
require "fileutils"
unless ENV["WI_SPEC_TMPDIR"]
  scratch = Dir.mktmpdir("wi-spec-run-")
  owner = Process.pid
  File.chmod(0o755, scratch)
  ENV["WI_SPEC_TMPDIR"] = ENV["TMPDIR"] = scratch
  at_exit { FileUtils.rm_rf(scratch) if Process.pid == owner }
end

# One throwaway cluster per rspec run, started on first use, removed at exit.
# Specs that stop or restart the server must start their own ThrowawayPostgres.
module TestDatabase
  ROOT = File.expand_path("..", __dir__)

  def self.cluster
    @cluster ||= ThrowawayPostgres.new.tap do |pg|
      owner = Process.pid
      at_exit { pg.destroy if Process.pid == owner }
    end
  end
end

RSpec.configure do |config|
  config.disable_monkey_patching!
  config.order = :random
  config.expect_with(:rspec) { |c| c.syntax = :expect }
end
