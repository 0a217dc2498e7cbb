# frozen_string_literal: true

require "securerandom"
require "socket"
require "net/http"
require "tmpdir"

# ReceiverHelpers - schema setup and row inspection for the receiver's specs (Inbox,
# Endpoint, Rails, Puma). Rows are read back with psql, never through the code under test.
module ReceiverHelpers
  ROOT = File.expand_path("../..", __dir__)

  # The gem's schema files, in order, as its own loader finds them (WebhookInbox::Schema):
  # the numbered migrations, then the function files; the same from a git checkout, a gem or a
  # tarball. Each is applied as one psql -c string (one transaction).
  def self.schema_files
    require "webhook_inbox/schema"
    WebhookInbox::Schema::FILES + WebhookInbox::Schema::FUNCTION_FILES
  end

  # Applies the gem's schema to db (the cluster's own database by default).
  def self.apply_schema(pg, db: pg.dbname)
    schema_files.each { |f| pg.psql(File.read(f), db: db) }
  end

  # A database of its own on pg ("<prefix>_<random>") with the gem's schema applied; its name.
  # For specs whose event ids would meet other specs' in the cluster's default database.
  def self.schema_database(pg, prefix)
    require "securerandom"
    db = "#{prefix}_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{db}", db: "postgres")
    apply_schema(pg, db: db)
    db
  end

  # A database URL ActiveRecord understands (TCP) for a ThrowawayPostgres.
  def self.ar_url(pg)
    user = pg.url[/user=(\S+)/, 1]
    "postgresql://#{user}@127.0.0.1:#{pg.port}/#{pg.dbname}"
  end

  def self.free_port
    s = TCPServer.new("127.0.0.1", 0)
    s.addr[1]
  ensure
    s&.close
  end

  # A started Puma serving the Stripe Endpoint of spec/fixtures/receiver/config.ru.
  def self.endpoint_puma(pg, scope:, secret:, threads:, pool:, env: {})
    PumaProcess.new(rackup: File.join(ROOT, "spec/fixtures/receiver/config.ru"), threads: threads,
                    env: { "WI_DATABASE_URL" => pg.url, "WI_SCOPE" => scope, "WI_STRIPE_SECRET" => secret,
                           "WI_POOL" => pool.to_s }.merge(env)).start
  end

  # A Rack env for a request to path carrying body and headers (names as HTTP spells them).
  def rack_request(path, body, headers, method: "POST", input: nil)
    require "rack/mock"
    env = Rack::MockRequest.env_for(path, method: method, input: input || body)
    headers.each do |k, v|
      key = k.upcase.tr("-", "_")
      env[%w[CONTENT_TYPE CONTENT_LENGTH].include?(key) ? key : "HTTP_#{key}"] = v
    end
    env
  end

  def unique_scope(prefix = "test")
    "#{prefix}:#{SecureRandom.hex(6)}:live"
  end

  # Rows of webhook_inbox for scope as hashes (psql, unaligned, '|' separated).
  def inbox_rows(pg, scope)
    out = pg.psql(<<~SQL)
      SELECT event_id, event_type, status, coalesce(payload::text, ''), coalesce(encode(raw_body, 'escape'), ''),
             coalesce(last_error, ''), processed_at IS NOT NULL
      FROM webhook_inbox WHERE source_scope = '#{scope.gsub("'", "''")}' ORDER BY event_id
    SQL
    out.split("\n").map do |line|
      id, type, status, payload, raw, err, processed = line.split("|", 7)
      { event_id: id, event_type: type, status: status, payload: payload, raw_body: raw,
        last_error: err, processed: processed == "t" }
    end
  end

  # A trigger that refuses, with SQLSTATE errcode, each insert of scope's rows for which
  # condition (SQL over NEW) holds; drop_refusing_trigger removes it.
  def refusing_trigger(pg, scope, condition, errcode)
    pg.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION wi_spec_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.source_scope = '#{scope.gsub("'", "''")}' AND (#{condition}) THEN
          RAISE EXCEPTION 'refused' USING ERRCODE = '#{errcode}';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER wi_spec_refuse BEFORE INSERT ON webhook_inbox FOR EACH ROW EXECUTE FUNCTION wi_spec_refuse();
    SQL
  end

  def drop_refusing_trigger(pg)
    pg.psql("DROP TRIGGER IF EXISTS wi_spec_refuse ON webhook_inbox; DROP FUNCTION IF EXISTS wi_spec_refuse()")
  end

  def inbox_count(pg, scope)
    pg.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{scope.gsub("'", "''")}'").to_i
  end
end

# PumaProcess - a real `puma` subprocess on a free port, for HTTP-level specs and benches.
class PumaProcess
  attr_reader :port, :log

  # workers: 0 is Puma's single mode; N > 0 runs N forked workers (cluster mode).
  # log: where Puma writes (default: a new file in the temp dir).
  def initialize(rackup:, env: {}, threads: "8:16", dir: nil, workers: 0, log: nil)
    @rackup = rackup
    @env = env
    @threads = threads
    @workers = workers
    @dir = dir || File.dirname(rackup)
    @log = log || File.join(Dir.tmpdir, "wi-puma-#{Process.pid}-#{SecureRandom.hex(3)}.log")
  end

  def start
    @port = ReceiverHelpers.free_port
    env = { "RUBYLIB" => File.join(ReceiverHelpers::ROOT, "lib") }.merge(@env)
    @pid = Process.spawn(env, "puma", "-b", "tcp://127.0.0.1:#{@port}", "-t", @threads, "-w", @workers.to_s,
                         "--dir", @dir, @rackup, out: [@log, "a"], err: [@log, "a"], pgroup: true)
    deadline = Time.now + 60
    begin
      TCPSocket.new("127.0.0.1", @port).close
    rescue Errno::ECONNREFUSED
      raise "puma exited: #{File.read(@log)}" if Process.wait(@pid, Process::WNOHANG)
      raise "puma did not start: #{File.read(@log)}" if Time.now > deadline

      sleep 0.1
      retry
    end
    self
  end

  def stop
    return unless @pid

    Process.kill("TERM", @pid)
    Process.wait(@pid)
    @pid = nil
  rescue Errno::ESRCH, Errno::ECHILD
    @pid = nil
  end

  def pid
    @pid
  end

  # CPU seconds (user + system) used so far by Puma and its live workers.
  def cpu_seconds
    ProcessTree.cpu_seconds(@pid)
  end

  def log_text
    File.exist?(@log) ? File.read(@log) : ""
  end

  # POST; returns [status Integer, headers Hash (lower-case keys), body String].
  def post(path, body, headers = {})
    Net::HTTP.start("127.0.0.1", @port, read_timeout: 30) do |http|
      res = http.post(path, body, headers)
      [res.code.to_i, res.each_header.to_h, res.body]
    end
  end

  def request(verb, path, body = nil, headers = {})
    Net::HTTP.start("127.0.0.1", @port, read_timeout: 30) do |http|
      res = http.send_request(verb, path, body, headers)
      [res.code.to_i, res.each_header.to_h, res.body]
    end
  end

  # Sends the whole request, then closes the socket without reading the answer.
  def post_and_drop(path, body, headers)
    sock = TCPSocket.new("127.0.0.1", @port)
    head = headers.merge("Host" => "127.0.0.1", "Content-Length" => body.bytesize.to_s, "Connection" => "close")
    sock.write("POST #{path} HTTP/1.1\r\n#{head.map { |k, v| "#{k}: #{v}\r\n" }.join}\r\n#{body}")
    sock.close
  end
end

# ProcessTree - CPU time of a process and its descendants, from /proc (Linux).
module ProcessTree
  TICK = 100.0 # USER_HZ

  # [ppid, utime + stime, cutime + cstime] in ticks, or nil when the process is gone.
  def self.stat(pid)
    fields = File.read("/proc/#{pid}/stat").sub(/\A.*\) /m, "").split # comm may hold spaces
    [fields[1].to_i, fields[11].to_i + fields[12].to_i, fields[13].to_i + fields[14].to_i]
  rescue Errno::ENOENT, Errno::ESRCH
    nil
  end

  # CPU seconds of pid, of its live descendants and of the children it has reaped (so
  # exited PostgreSQL backends still count). A sum of monotonic counters: diff two calls.
  def self.cpu_seconds(root)
    stats = Dir.children("/proc").grep(/\A\d+\z/).to_h { |d| [d.to_i, stat(d)] }.compact
    total = 0
    todo = [root]
    until todo.empty?
      pid = todo.pop
      next unless (st = stats[pid])

      total += st[1]
      total += st[2] if pid == root
      stats.each { |child, cst| todo << child if cst[0] == pid }
    end
    total / TICK
  end

  # As cpu_seconds, with each live task's CPU read from /proc/PID/task/*/schedstat (nanoseconds)
  # instead of clock ticks (10 ms each: summed over the dozens of processes of a cluster, the
  # ticks' rounding is a few microseconds an event in a run of 10,000). Reaped children are still
  # counted in ticks. Linux with schedstat only (bench/citus).
  def self.cpu_seconds_precise(root)
    stats = Dir.children("/proc").grep(/\A\d+\z/).to_h { |d| [d.to_i, stat(d)] }.compact
    total = stats[root] ? stats[root][2] / TICK : 0.0
    todo = [root]
    until todo.empty?
      pid = todo.pop
      next unless stats[pid]

      ns = task_ns(pid)
      total += ns ? ns / 1e9 : stats[pid][1] / TICK # gone since the listing: its ticks as listed
      stats.each { |child, cst| todo << child if cst[0] == pid }
    end
    total
  end

  # Nanoseconds every thread of pid has run (a zombie's too), or nil when it is gone.
  def self.task_ns(pid)
    files = Dir.glob("/proc/#{pid}/task/*/schedstat")
    files.empty? ? nil : files.sum { |f| File.read(f).split.first.to_i }
  rescue Errno::ENOENT, Errno::ESRCH
    nil
  end
end
