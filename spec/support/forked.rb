# frozen_string_literal: true

# Forked.call { ... } - runs the block in a forked child and returns its value (through
# Marshal) to the parent. An exception in the child is raised again in the parent with the
# child's message and backtrace. The child always leaves with exit!, so it never runs the
# at_exit hooks it inherited (the shared cluster's cleanup) nor RSpec's reporting.
module Forked
  def self.call
    rd, wr = IO.pipe
    pid = fork do
      rd.close
      outcome = begin
        [:ok, yield]
      rescue Exception => e # rubocop:disable Lint/RescueException - everything goes to the parent
        [:error, "#{e.class}: #{e.message}", e.backtrace]
      end
      wr.write(Marshal.dump(outcome))
    ensure
      exit!(0)
    end
    wr.close
    answer = rd.read
    Process.wait(pid)
    raise "the forked child died before answering (#{$?.inspect})" if answer.empty?

    kind, value, backtrace = Marshal.load(answer) # rubocop:disable Security/MarshalLoad - our own child
    raise RuntimeError, "in the forked child: #{value}", backtrace if kind == :error

    value
  ensure
    rd&.close
  end
end
