# frozen_string_literal: true

require "tmpdir"

# WarmSidecar - one `webhook-inbox-sidecar run` kept across a bench's measurements, as a deployed
# sidecar runs: its sessions opened, its functions compiled and (on Citus) each worker session's
# metadata cached once, before anything is timed. `run --once` pays all of that again in every
# measurement (on Citus about 60 ms a worker session: 20-30 us an event in a run of 10,000).
# A measurement: hold (SIGSTOP) while its events are stored, read the CPU, release (SIGCONT),
# wait_done, read the CPU again. A held sidecar sends nothing, so it holds no lock between
# statements: hold it only after wait_done returned.
class WarmSidecar
  attr_reader :pid

  @running = []
  class << self
    attr_reader :running

    # Stops every sidecar still running (a bench's ensure: a held one would wait forever).
    def stop_all = running.dup.each(&:stop)
  end

  def initialize(bin, url, *args)
    @log = File.join(Dir.tmpdir, "wi-warm-sidecar-#{$$}-#{object_id}.log")
    @pid = Process.spawn(bin, "run", "--database-url", url, "--log-level", "info", "--log-events=true", *args,
                         out: @log, err: @log)
    @done = 0
    @read = 0
    @partial = +""
    self.class.running << self
  end

  def hold = Process.kill("STOP", @pid)
  def release = Process.kill("CONT", @pid)

  # Waits until n more events are logged done; aborts on a retry, a quarantine, an error line or
  # the sidecar's exit (a bench whose events fail measures nothing).
  def wait_done(n, timeout: 600)
    want = @done + n
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    until @done >= want
      read_log
      abort "bench: the sidecar exited (#{@log})" if Process.waitpid(@pid, Process::WNOHANG)
      abort "bench: #{want - @done} events not done after #{timeout} s (#{@log})" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.005
    end
  end

  def stop
    self.class.running.delete(self)
    Process.kill("CONT", @pid)
    Process.kill("TERM", @pid)
    Process.wait(@pid)
    File.delete(@log)
  rescue Errno::ESRCH, Errno::ECHILD, Errno::ENOENT
    nil
  end

  private

  def read_log
    chunk = File.open(@log) { |f| f.seek(@read) && f.read }
    return if chunk.nil? || chunk.empty?

    @read += chunk.bytesize
    lines = (@partial + chunk).split("\n", -1)
    @partial = lines.pop
    lines.each do |line|
      @done += 1 if line.include?("msg=event") && line.include?("outcome=done")
      abort "bench: #{line[/msg=\S+/]} #{line[/outcome=\S+/]} (#{@log})" if line.match?(/outcome=(retry|quarantined)|level=error/)
    end
  end
end
