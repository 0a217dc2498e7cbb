# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "webhook_inbox"
require_relative "support/throwaway_postgres"

# Every temp file of the run (clusters, Puma and sidecar logs, scratch files; also those of
# the processes the specs start) goes into one directory, removed at exit. The postgres
# user must be able to reach the clusters inside it, hence 0755.
require "tmpdir"
require "fileutils"
unless ENV["WI_SPEC_TMPDIR"]
  scratch = Dir.mktmpdir("wi-spec-run-")
  File.chmod(0o755, scratch)
  ENV["WI_SPEC_TMPDIR"] = ENV["TMPDIR"] = scratch
  at_exit { FileUtils.rm_rf(scratch) }
end

# One throwaway cluster per rspec run, started on first use, removed at exit.
# Specs that stop or restart the server must start their own ThrowawayPostgres.
module TestDatabase
  ROOT = File.expand_path("..", __dir__)

  def self.cluster
    @cluster ||= ThrowawayPostgres.new.tap do |pg|
      at_exit { pg.destroy }
    end
  end
end

RSpec.configure do |config|
  config.disable_monkey_patching!
  config.order = :random
  config.expect_with(:rspec) { |c| c.syntax = :expect }
end
