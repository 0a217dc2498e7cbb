# frozen_string_literal: true

# ForkedRubyWorker - the Ruby worker (Handlers::Worker) as a process, for an example group
# with @url (its database), @dir (the worker's log goes to @dir/worker.log) and a registry:
# start_worker forks one on its own connection and returns its pid (remembered in @workers,
# which the group stops with stop_worker in its around/after hook). Extra options go to
# Worker.new (poll_interval 0.1 s and backoff 0 unless given). wait_until polls a condition.
module ForkedRubyWorker
  def start_worker(reg, **opts)
    log = File.join(@dir, "worker.log")
    pid = fork do
      ActiveRecord::Base.establish_connection(@url)
      out = File.open(log, "a").tap { |f| f.sync = true }
      exit!(WebhookInbox::Handlers::Worker.new(registry: reg, out: out, poll_interval: 0.1, backoff_base_ms: 0, **opts).run)
    end
    (@workers ||= []) << pid
    pid
  end

  def stop_worker(pid)
    Process.kill("TERM", pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  # The block's value once truthy; raises with the worker log's tail after timeout seconds.
  def wait_until(what, timeout: 30)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    until (value = yield)
      raise "#{what}: not after #{timeout}s\nworker log:\n#{worker_log.lines.last(20).join}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.05
    end
    value
  end

  def worker_log = File.exist?(File.join(@dir, "worker.log")) ? File.read(File.join(@dir, "worker.log")) : ""
end
