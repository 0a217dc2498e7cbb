# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "webhook_inbox"
require_relative "support/throwaway_postgres"

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
