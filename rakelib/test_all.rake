# frozen_string_literal: true

# rakelib/test_all.rake - :test_all runs :c_tests in a forked child beside the specs, and the
# specs in two rspec processes at once, each taking the next chunk (a directory of spec/) when
# it finishes one: the specs mostly wait (servers starting, deadlines, sleeps) and one process
# left the 2 cores three-quarters idle. Each child's output goes to a file and is printed whole
# when it ends; the task fails if any fails (a failing chunk's rspec exit status, or c_tests').
# With SPEC= (a narrowed run) the specs run as `rake spec` does, in one process.
require "securerandom"
require "tmpdir"

# C steps that build files the specs also build (spec/sidecar/pgw_spec.rb and pgarray_spec.rb
# make sidecar/build/test_pgw and test_pgarray): run before the fork, never beside a spec.
C_TESTS_BEFORE_SPEC = ["sidecar:test"].freeze
SPEC_PROCESSES = 2
# Longest first (a chunk started last should be short); a directory not named here goes last.
SPEC_CHUNK_ORDER = %w[citus sidecar integration . webhook_inbox dashboard monitoring].freeze

# The spec files by chunk: [[name, files], ...] in SPEC_CHUNK_ORDER.
def spec_chunks
  files = Dir["spec/**/*_spec.rb"].sort
  chunks = files.group_by { |f| f.split("/").size == 2 ? "." : f.split("/")[1] }
  chunks.sort_by { |dir, _| [SPEC_CHUNK_ORDER.index(dir) || SPEC_CHUNK_ORDER.size, dir] }
        .map { |dir, list| [dir == "." ? "spec/*_spec.rb" : "spec/#{dir}", list] }
end

# Runs cmd (or a block, forked) with its output in a file; returns a thread whose value is
# [status, seconds], the output printed as one write when it ends.
def run_buffered(title, cmd = nil, &block)
  log = File.join(Dir.tmpdir, "wi-test-all-#{Process.pid}-#{SecureRandom.hex(6)}.log") # one each: titles may map alike
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  pid = cmd ? Process.spawn(*cmd, out: log, err: [:child, :out]) : fork { $stdout.reopen(log, "w"); $stderr.reopen($stdout); block.call }
  Thread.new do
    _, status = Process.wait2(pid)
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    verdict = status.success? ? "passed" : "FAILED (exit #{status.exitstatus || status})"
    $stdout.write("\n---- #{title}: #{verdict} after #{took.round} s ----\n#{File.read(log)}---- end of #{title} ----\n")
    $stdout.flush
    File.delete(log)
    [status, took]
  end
end

desc "c_tests in a child process (niced) beside the specs, which run in #{SPEC_PROCESSES} rspec processes; fails if any fails"
task :c_tests_beside_spec do
  C_TESTS_BEFORE_SPEC.each { |t| Rake::Task[t].invoke }
  c_tests = run_buffered("c_tests") do
    # The specs wait on deadlines; the C checks have only their own generous ones.
    Process.setpriority(Process::PRIO_PROCESS, 0, 10)
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
  results = {}
  queue = Queue.new
  begin
    if ENV["SPEC"]
      Rake::Task[:spec].invoke
    else
      spec_chunks.each { |chunk| queue << chunk }
      queue.close
      puts "specs: #{SPEC_PROCESSES} rspec processes over #{queue.size} chunks (#{spec_chunks.map(&:first).join(', ')})"
      workers = Array.new(SPEC_PROCESSES) do
        Thread.new do
          while (chunk = queue.pop)
            name, files = chunk
            cmd = [RbConfig.ruby, "-S", "rspec", "--format", "progress", "--profile", "10", *files]
            results[name] = run_buffered("rspec #{name}", cmd).value
          end
        end
      end
      workers.each(&:join)
    end
  ensure
    queue.clear # interrupted: no chunk starts after this (the running ones had the signal too)
    c_status, = c_tests.value
  end
  failed = results.reject { |_, (status, _)| status.success? }
  results.each { |name, (status, took)| puts format("specs %-22s %s in %d s", name, status.success? ? "passed" : "FAILED", took) }
  failed.each_key { |name| puts "failed: bundle exec rspec #{name} (its output is above)" }
  puts "failed: c_tests (its output is above)" unless c_status.success?
  $stdout.flush
  exit(failed.values.first.first.exitstatus || 1) if failed.any?
  exit(c_status.exitstatus || 1) unless c_status.success?
end
