# frozen_string_literal: true

# rakelib/test_all.rake - :test_all runs :c_tests in a forked child beside :spec, so the C
# checks' builds and bounded fuzz runs use the CPU the specs leave idle while they wait.
# The child's output goes to a file and is printed whole when it ends; the task fails if
# either fails (a failing spec run keeps rspec's exit status, a failing c_tests its own).
require "tmpdir"

# C steps that build files the specs also build (spec/sidecar/pgw_spec.rb and pgarray_spec.rb
# make sidecar/build/test_pgw and test_pgarray): run before the fork, never beside a spec.
C_TESTS_BEFORE_SPEC = ["sidecar:test"].freeze

desc "c_tests in a child process (niced, output printed whole when it ends) beside spec; fails if either fails"
task :c_tests_beside_spec do
  C_TESTS_BEFORE_SPEC.each { |t| Rake::Task[t].invoke }
  log = File.join(Dir.tmpdir, "wi-c-tests-#{Process.pid}.log")
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  pid = fork do
    # The specs wait on deadlines; the C checks have only their own generous ones.
    Process.setpriority(Process::PRIO_PROCESS, 0, 10)
    $stdout.reopen(log, "w")
    $stderr.reopen($stdout)
    $stdout.sync = true
    code = begin
      Rake::Task[:c_tests].invoke
      0
    rescue SystemExit => e # abort in a task: its message is already written
      e.status
    rescue Exception => e # rubocop:disable Lint/RescueException -- reported, then the child exits 1
      warn "rake aborted!\n#{e.class}: #{e.message}"
      1
    end
    $stdout.flush
    exit!(code)
  end
  # Printed as one write when the child ends, between rspec's progress characters.
  waiter = Thread.new do
    _, status = Process.wait2(pid)
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    verdict = status.success? ? "passed" : "FAILED (exit #{status.exitstatus || status})"
    $stdout.write("\n---- c_tests, run beside the specs: #{verdict} after #{took.round} s ----\n" \
                  "#{File.read(log)}---- end of c_tests ----\n")
    $stdout.flush
    status
  end
  begin
    Rake::Task[:spec].invoke
  ensure
    c_status = waiter.value
    rm_f log, verbose: false
  end
  next if c_status.success?

  warn "c_tests failed: its output is above"
  exit(c_status.exitstatus || 1)
end
