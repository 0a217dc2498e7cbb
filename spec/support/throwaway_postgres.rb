# frozen_string_literal: true

require "fileutils"
require "socket"
require "tmpdir"
require "etc"

# ThrowawayPostgres - a private PostgreSQL cluster in a temp directory for tests, benchmarks
# and bin/demo. Listens on a Unix socket in its own directory and a free loopback port, so
# parallel runs never collide. As root the server runs as the `postgres` user (PostgreSQL
# refuses root). #stop/#start keep the data, for restart and outage tests; #destroy removes it.
# base_backup_of: a running cluster to copy with pg_basebackup -R instead of initdb: a hot
# standby streaming from it (see ReplicatedPostgres), made a primary by #promote.
class ThrowawayPostgres
  BIN_CANDIDATES = [ENV["PG_BIN"], "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin"].compact

  attr_reader :dir, :port, :socket_dir, :dbname

  def self.bin_dir
    BIN_CANDIDATES.find { |d| File.executable?(File.join(d, "initdb")) } or
      raise "PostgreSQL server binaries not found (run bin/setup, or set PG_BIN)"
  end

  def initialize(dbname: "webhook_inbox", settings: {}, base_backup_of: nil)
    @dbname = base_backup_of ? base_backup_of.dbname : dbname
    @settings = settings
    @dir = Dir.mktmpdir("wi-pg-")
    @data = File.join(@dir, "data")
    @socket_dir = short_socket_dir(File.join(@dir, "sock"))
    @log = File.join(@dir, "postgres.log")
    @port = free_port
    @bin = self.class.bin_dir
    FileUtils.mkdir_p(@socket_dir)
    FileUtils.chmod(0o755, [@dir, @socket_dir])
    chown_to_postgres(@dir, @socket_dir) if root?
    if base_backup_of
      base_backup(base_backup_of)
      start
    else
      initdb
      start
      run_psql("postgres", "CREATE DATABASE #{dbname}")
    end
  end

  # libpq connection string for the cluster (Unix socket).
  def url(db = dbname)
    "host=#{socket_dir} port=#{port} dbname=#{db} user=#{superuser}"
  end

  # The same cluster over TCP, for tools that want host:port.
  def tcp_url(db = dbname)
    "host=127.0.0.1 port=#{port} dbname=#{db} user=#{superuser}"
  end

  def psql_command(db = dbname)
    "psql -h #{socket_dir} -p #{port} -U #{superuser} #{db}"
  end

  def start
    as_owner(File.join(@bin, "pg_ctl"), "-D", @data, "-l", @log, "-w", "-t", "60", "-o", server_options, "start")
    @running = true
  end

  # mode: "fast" (default) or "immediate" (a crash: no shutdown checkpoint).
  def stop(mode: "fast")
    return unless @running

    as_owner(File.join(@bin, "pg_ctl"), "-D", @data, "-m", mode, "-w", "-t", "60", "stop")
    @running = false
  end

  # A standby becomes a primary (pg_ctl promote, waits until it accepts writes).
  def promote
    as_owner(File.join(@bin, "pg_ctl"), "-D", @data, "-w", "-t", "60", "promote")
  end

  # ALTER SYSTEM SET name = value (SQL literal; nil resets it), then reloads the configuration
  # and waits until a new session sees the value.
  def alter_system(name, value)
    run_psql("postgres", value.nil? ? "ALTER SYSTEM RESET #{name}" : "ALTER SYSTEM SET #{name} = #{value}")
    run_psql("postgres", "SELECT pg_reload_conf()")
    want = run_psql("postgres", value.nil? ? "SELECT boot_val FROM pg_settings WHERE name = '#{name}'" : "SELECT #{value}::text").strip
    deadline = Time.now + 10
    until run_psql("postgres", "SHOW #{name}").strip == want
      raise "#{name} did not become #{want}" if Time.now > deadline

      sleep 0.02
    end
  end

  def running?
    @running
  end

  def restart
    stop
    start
  end

  def destroy
    stop if @running
  ensure
    FileUtils.rm_rf(@dir)
    FileUtils.rm_rf(@socket_dir)
  end

  # Runs SQL with psql and returns its unaligned, tuples-only output.
  def psql(sql, db: dbname)
    run_psql(db, sql)
  end

  # Runs a SQL file with psql (ON_ERROR_STOP), e.g. a migration or db/examples/orders.sql.
  def psql_file(path, db: dbname)
    run_psql(db, nil, file: path)
  end

  # Process id of the postmaster (from postmaster.pid), for tests that stop it (SIGSTOP).
  def postmaster_pid
    File.readlines(File.join(@data, "postmaster.pid")).first.to_i
  end

  def log_tail(lines = 40)
    File.exist?(@log) ? File.readlines(@log).last(lines).join : ""
  end

  private

  def superuser
    root? ? "postgres" : Etc.getpwuid(Process.uid).name
  end

  def server_options
    opts = {
      "listen_addresses" => "127.0.0.1", "port" => port.to_s,
      "unix_socket_directories" => socket_dir, "max_connections" => "200",
      "fsync" => "on", "shared_buffers" => "128MB"
    }.merge(@settings.transform_values(&:to_s))
    opts.map { |k, v| "-c #{k}=#{v}" }.join(" ")
  end

  def initdb
    as_owner(File.join(@bin, "initdb"), "-D", @data, "-A", "trust", "-U", superuser,
             "-E", "UTF8", "--locale=C", "--no-sync")
  end

  # pg_basebackup -R: the WAL it needs streamed along, standby.signal and primary_conninfo
  # written, the source's postgresql.auto.conf (ALTER SYSTEM settings) copied with the data.
  def base_backup(source)
    as_owner(File.join(@bin, "pg_basebackup"), "-D", @data, "-R", "-X", "stream", "-c", "fast",
             "-h", source.socket_dir, "-p", source.port.to_s, "-U", superuser)
  end

  def run_psql(db, sql, file: nil)
    psql = File.join(@bin, "psql")
    psql = "psql" unless File.executable?(psql)
    input = file ? ["-f", file] : ["-c", sql]
    out = IO.popen([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-h", socket_dir, "-p", port.to_s,
                    "-U", superuser, "-d", db, *input], err: [:child, :out], &:read)
    raise "psql failed: #{out}" unless $?.success?

    out
  end

  def as_owner(*cmd)
    cmd = ["runuser", "-u", "postgres", "--", *cmd] if root?
    out = IO.popen(cmd, err: [:child, :out], &:read)
    raise "#{File.basename(cmd.find { |c| c.start_with?('/') } || cmd.first)} failed: #{out}\n#{log_tail}" unless $?.success?

    out
  end

  def root?
    Process.uid.zero?
  end

  def chown_to_postgres(*paths)
    pw = Etc.getpwnam("postgres")
    FileUtils.chown(pw.uid, pw.gid, paths)
  end

  # A Unix socket path may hold 107 bytes: under a deep TMPDIR the socket goes to a short
  # directory of its own in /tmp instead.
  def short_socket_dir(preferred)
    return preferred if "#{preferred}/.s.PGSQL.65535".bytesize <= 100

    Dir.mktmpdir("wi-s-", "/tmp")
  end

  def free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end
end
