# frozen_string_literal: true

require "json"
require "net/http"
require "socket"
require "tmpdir"
require "yaml"

# PrometheusServer - a throwaway Prometheus (Debian's prometheus binary, installed with
# promtool by bin/setup) scraping the given targets every second and evaluating the given
# rule files, with its data in a temporary directory removed by #stop. For specs that run the
# shipped alert rules and dashboard queries over real scrapes. Raises when it does not start.
class PrometheusServer
  attr_reader :url

  # jobs: { job_name => ["host:port", metrics_path] }; rule_files: absolute paths.
  def initialize(jobs:, rule_files: [])
    @dir = Dir.mktmpdir("wi-prometheus-")
    config = { "global" => { "scrape_interval" => "1s", "evaluation_interval" => "1s" },
               "rule_files" => rule_files,
               "scrape_configs" => jobs.map do |job, (address, path)|
                 { "job_name" => job, "metrics_path" => path, "static_configs" => [{ "targets" => [address] }] }
               end }
    File.write(File.join(@dir, "prometheus.yml"), YAML.dump(config))
  end

  # Starts it and waits until it is ready. Returns self.
  def start
    port = free_port
    @url = "http://127.0.0.1:#{port}"
    @log = File.join(@dir, "prometheus.log")
    @pid = Process.spawn("prometheus", "--config.file=#{File.join(@dir, 'prometheus.yml')}",
                         "--storage.tsdb.path=#{File.join(@dir, 'data')}", "--web.listen-address=127.0.0.1:#{port}",
                         out: @log, err: @log)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    until ready?
      raise "prometheus did not start:\n#{File.read(@log)}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline ||
                                                               Process.waitpid(@pid, Process::WNOHANG)

      sleep 0.1
    end
    self
  end

  # The result vector or matrix of an instant query (an Array; empty when no series). Raises
  # with Prometheus's error when the query fails.
  def query(expr)
    api("/api/v1/query", query: expr).fetch("result")
  end

  # The loaded rules: [{ "name" =>, "health" =>, "lastError" =>, ... }, ...].
  def rules
    api("/api/v1/rules").fetch("groups").flat_map { |g| g.fetch("rules") }
  end

  def stop
    if @pid
      Process.kill("TERM", @pid)
      Process.waitpid(@pid)
    end
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  ensure
    @pid = nil
    FileUtils.rm_rf(@dir)
  end

  private

  def api(path, params = {})
    uri = URI("#{@url}#{path}")
    uri.query = URI.encode_www_form(params) unless params.empty?
    body = JSON.parse(Net::HTTP.get_response(uri).body)
    raise "prometheus #{path} #{params.inspect}: #{body['error']}" unless body["status"] == "success"

    body.fetch("data")
  end

  def ready?
    Net::HTTP.get_response(URI("#{@url}/-/ready")).code == "200"
  rescue SystemCallError, IOError
    false
  end

  def free_port
    s = TCPServer.new("127.0.0.1", 0)
    s.addr[1]
  ensure
    s&.close
  end
end
