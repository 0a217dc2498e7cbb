# frozen_string_literal: true

require "tmpdir"

# Forked.call { ... } - runs the block in a forked child and returns its value (through
# Marshal) to the parent. An exception in the child is raised again in the parent with the
# child's message and backtrace. The child always leaves with exit!, so it never runs the
# at_exit hooks it inherited (the shared cluster's cleanup) nor RSpec's reporting.
#
# The answer travels through a file the child creates by name after the fork, never through
# a descriptor opened before it: fork hooks and finalizers of inherited objects may point a
# stale descriptor number at /dev/null (ActiveRecord's after-fork discard reopens a cached
# PostgreSQL socket; our own store drops inherited sockets that way), and a pipe that reused
# such a number lost the answer in CI ("died before answering", exit 0), once in ~1000 runs.
module Forked
  def self.call(&block)
    Dir.mktmpdir("wi-forked-") do |dir|
      answer = File.join(dir, "answer")
      pid = fork { answer_from_child(answer, &block) }
      Process.wait(pid)
      raise "the forked child died before answering (#{$?.inspect})" unless File.exist?(answer)

      kind, value, backtrace = Marshal.load(File.binread(answer)) # rubocop:disable Security/MarshalLoad - our own child
      raise RuntimeError, "in the forked child: #{value}", backtrace if kind == :error

      value
    end
  end

  # In the child: runs the block and writes its outcome to path (whole or not at all: the
  # rename), then leaves with exit! (status 3 when even the answer could not be written).
  def self.answer_from_child(path)
    outcome = begin
      [:ok, yield]
    rescue Exception => e # rubocop:disable Lint/RescueException - everything goes to the parent
      [:error, "#{e.class}: #{e.message}", e.backtrace]
    end
    data = begin
      Marshal.dump(outcome)
    rescue Exception => e # rubocop:disable Lint/RescueException - an answer that cannot cross
      Marshal.dump([:error, "the child's answer cannot be marshaled: #{e.class}: #{e.message}", e.backtrace])
    end
    File.binwrite("#{path}.part", data)
    File.rename("#{path}.part", path)
    exit!(0)
  rescue Exception => e # rubocop:disable Lint/RescueException
    warn "forked child could not answer: #{e.class}: #{e.message}"
    exit!(3)
  ensure
    exit!(4)
  end
end
