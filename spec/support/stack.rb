# frozen_string_literal: true

require "net/http"
require "json"
require "fileutils"
require "timeout"
require_relative "throwaway_postgres"
require_relative "receiver_helpers" # PumaProcess

# Stack - the whole product, really started: a throwaway PostgreSQL with the schema and the
# orders example, the Rails app from spec/rails_app under Puma (the gem's controller), and
# N real sidecar processes. Used by bin/demo, the failure-matrix spec and the chaos run.
class Stack
  ROOT = File.expand_path("../..", __dir__)
  SIDECAR = File.join(ROOT, "lib/webhook_inbox/webhook-inbox-sidecar")
  SECRETS = { stripe: "whsec_demo_stripe_secret", didit: "wh_demo_didit_secret" }.freeze
  SCOPES = { stripe: "stripe:acct_demo:live", didit: "didit:app_demo:live" }.freeze

  attr_reader :pg, :port, :log_dir

  # Sidecars retry quickly here (200 ms backoff base, 500 ms polling) so stories stay short.
  def initialize(sidecars: 2, sidecar_args: %w[--backoff-base 200ms --backoff-cap 2s --poll-interval 500ms],
                 log_dir: nil, pg_settings: {})
    # A killed client's backend notices within 250 ms even while it waits on a lock.
    pg_settings = { "client_connection_check_interval" => "250ms" }.merge(pg_settings)
    @sidecar_count = sidecars
    @sidecar_args = sidecar_args
    @pg_settings = pg_settings
    @log_dir = log_dir || Dir.mktmpdir("wi-stack-")
    @sidecars = {}
  end

  def start
    @pg = ThrowawayPostgres.new(settings: @pg_settings)
    run_sidecar_command("migrate")
    %w[orders receipts].each { |example| @pg.psql_file(File.join(ROOT, "db/examples/#{example}.sql")) }
    start_puma
    @sidecar_count.times { |i| start_sidecar(i) }
    self
  end

  def stop
    @sidecars.keys.each { |i| stop_sidecar(i) }
    stop_puma
    @pg&.destroy
    FileUtils.rm_rf(log_dir) unless @keep_logs
  end

  # Keeps the log directory after #stop (for a failing run's post-mortem).
  def keep_logs!
    @keep_logs = true
  end

  def url(path = "/")
    "http://127.0.0.1:#{port}#{path}"
  end

  # --- HTTP --------------------------------------------------------------------------

  # POSTs body with headers; returns [status Integer, parsed JSON body or raw String].
  def post(path, body, headers)
    uri = URI(url(path))
    Net::HTTP.start(uri.host, uri.port, open_timeout: 5, read_timeout: 30) do |http|
      req = Net::HTTP::Post.new(uri.path, headers)
      req.body = body
      res = http.request(req)
      [res.code.to_i, (JSON.parse(res.body) rescue res.body)]
    end
  end

  # Sends the request, waits until the block says the server acted on it (e.g. the row is
  # committed), then closes the socket without reading the answer: the sender's view of "the
  # connection dropped before the 200 arrived". (Puma skips requests whose client already
  # hung up, so closing before the server acted would test nothing.)
  def post_and_drop(path, body, headers, &acted)
    sock = TCPSocket.new("127.0.0.1", port)
    head = headers.merge("Content-Length" => body.bytesize.to_s, "Host" => "127.0.0.1", "Connection" => "close")
    sock.write("POST #{path} HTTP/1.1\r\n#{head.map { |k, v| "#{k}: #{v}\r\n" }.join}\r\n#{body}")
    wait_until(&acted)
  ensure
    sock&.close
  end

  # --- sidecars ------------------------------------------------------------------------

  def start_sidecar(index, *extra)
    log = File.join(log_dir, "sidecar-#{index}.log")
    pid = Process.spawn(SIDECAR, "run", "--database-url", pg.url, *@sidecar_args, *extra,
                        out: [log, "a"], err: [log, "a"], pgroup: true)
    @sidecars[index] = pid
  end

  def kill_sidecar(index, signal = "KILL")
    pid = @sidecars.delete(index) or return
    Process.kill(signal, pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  def stop_sidecar(index)
    kill_sidecar(index, "TERM")
  end

  # Stops every running sidecar (TERM); returns their indexes for #resume_sidecars.
  def pause_sidecars
    @sidecars.keys.each { |i| stop_sidecar(i) }
  end

  def resume_sidecars(indexes)
    indexes.each { |i| start_sidecar(i) }
  end

  def sidecar_indexes
    @sidecars.keys
  end

  # Indexes below the configured count whose sidecar is not running.
  def sidecar_indexes_missing
    (0...@sidecar_count).to_a - @sidecars.keys
  end

  def sidecar_pids
    @sidecars.values
  end

  # Runs `webhook-inbox-sidecar <args>` to completion; returns its output, raises on failure.
  def run_sidecar_command(*args)
    out = IO.popen([SIDECAR, *args, "--database-url", pg.url], err: [:child, :out], &:read)
    raise "webhook-inbox-sidecar #{args.first} failed: #{out}" unless $?.success?

    out
  end

  # --- database ------------------------------------------------------------------------

  def sql(query)
    pg.psql(query)
  end

  def inbox_status(scope, event_id)
    sql("SELECT status FROM webhook_inbox WHERE source_scope = #{quote(scope)} AND event_id = #{quote(event_id)}").strip
  end

  # Waits until the block returns truthy (polling), or raises after timeout seconds.
  def wait_until(timeout: 30, interval: 0.05)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      result = yield
      return result if result
      raise Timeout::Error, "condition not met in #{timeout}s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep interval
    end
  end

  def quote(text)
    "'#{text.to_s.gsub("'", "''")}'"
  end

  private

  def start_puma
    env = {
      "DATABASE_URL" => pg.url, "RAILS_ENV" => "production", "SECRET_KEY_BASE" => "x" * 64,
      "STRIPE_WEBHOOK_SECRET" => SECRETS[:stripe], "DIDIT_WEBHOOK_SECRET" => SECRETS[:didit],
      "STRIPE_SCOPE" => SCOPES[:stripe], "DIDIT_SCOPE" => SCOPES[:didit]
    }
    @puma = PumaProcess.new(rackup: File.join(ROOT, "spec/rails_app/config.ru"), env: env, threads: "4:16",
                            log: File.join(log_dir, "puma.log")).start
    @port = @puma.port
  end

  def stop_puma
    @puma&.stop
  end
end
