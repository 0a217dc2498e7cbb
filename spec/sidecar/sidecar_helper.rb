# frozen_string_literal: true

require "open3"
require "timeout"
require "securerandom"
require "json"
require_relative "../spec_helper"

# SidecarHelper - black-box helpers for the real webhook-inbox-sidecar binary: a database
# prepared with `migrate` + db/examples/orders.sql, event inserts shaped like the receiver's,
# and running / spawning / signalling the binary.
module SidecarHelper
  ROOT = File.expand_path("../..", __dir__)
  EXAMPLES = File.join(ROOT, "db/examples/orders.sql")
  SCOPE = "stripe:acct_1:test"

  def self.binary
    [ENV["WEBHOOK_INBOX_SIDECAR"], File.join(ROOT, "lib/webhook_inbox/webhook-inbox-sidecar"),
     File.join(ROOT, "sidecar/build/webhook-inbox-sidecar")].compact.find { |p| File.executable?(p) } or
      raise "webhook-inbox-sidecar not built: run `rake compile`"
  end

  # A database of its own on a cluster, migrated by the binary, with the example handlers.
  class DB
    attr_reader :pg, :name

    def initialize(pg, name = "sidecar_#{SecureRandom.hex(4)}")
      @pg = pg
      @name = name
      pg.psql("CREATE DATABASE #{name}", db: "postgres")
      out, st = Open3.capture2e(SidecarHelper.binary, "migrate", "--database-url", url)
      raise "migrate failed: #{out}" unless st.success?

      pg.psql_file(EXAMPLES, db: name)
    end

    def url
      pg.url(name)
    end

    def psql(sql)
      pg.psql(sql, db: name)
    end

    def value(sql)
      psql(sql).strip
    end

    def int(sql)
      value(sql).to_i
    end

    # Empties the inbox and the example tables; restores the example routes.
    def reset!
      psql(<<~SQL)
        TRUNCATE webhook_inbox, webhook_inbox_actions, orders, payments, refunds, order_transitions, identity_checks;
        DELETE FROM webhook_inbox_routes;
      SQL
      pg.psql_file(EXAMPLES, db: name)
    end

    def insert_event(event_id, type, payload, scope: SCOPE)
      psql(<<~SQL)
        INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload)
        VALUES (#{q(scope)}, #{q(event_id)}, #{q(type)}, #{q(JSON.generate(payload))}::jsonb)
        ON CONFLICT DO NOTHING
      SQL
    end

    def add_order(tenant, order, amount, currency)
      psql("INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES (#{q(tenant)}, #{q(order)}, #{amount}, #{q(currency)})")
    end

    # status|attempts|outcome|last_error of one event.
    def event(event_id, scope: SCOPE)
      status, attempts, outcome, err = value("SELECT status, attempts, coalesce(outcome, ''), coalesce(last_error, '') " \
                                             "FROM webhook_inbox WHERE source_scope = #{q(scope)} AND event_id = #{q(event_id)}").split("|", 4)
      { status: status, attempts: attempts.to_i, outcome: outcome, last_error: err }
    end

    def q(str)
      "'#{str.to_s.gsub("'", "''")}'"
    end
  end

  module Payloads
    module_function

    def payment(type, pi, tenant, order, amount, currency)
      { "type" => type, "data" => { "object" => { "id" => pi, "object" => "payment_intent", "amount" => amount,
                                                  "currency" => currency,
                                                  "metadata" => { "tenant_id" => tenant, "order_id" => order } } } }
    end

    def succeeded(pi, tenant, order, amount, currency)
      payment("payment_intent.succeeded", pi, tenant, order, amount, currency)
    end

    def refunded(charge, pi, tenant, order, amount, currency)
      { "type" => "charge.refunded",
        "data" => { "object" => { "id" => charge, "object" => "charge", "payment_intent" => pi, "amount" => amount,
                                  "amount_refunded" => amount, "currency" => currency, "refunded" => true,
                                  "metadata" => { "tenant_id" => tenant, "order_id" => order } } } }
    end

    def didit(session, status)
      { "session_id" => session, "status" => status, "webhook_type" => "status.updated", "vendor_data" => "user-1" }
    end
  end

  # `run --once` against the example's db (its `db`) with args; expects exit 0 (the log in the
  # message otherwise) and returns the log (stderr).
  def run_once_against_db(*args)
    status, _out, err = sidecar("run", "--once", "--database-url", db.url, *args)
    expect(status.exitstatus).to eq(0), err
    err
  end

  # Runs the binary to completion; returns [Process::Status, stdout, stderr].
  def sidecar(*args, timeout: 60, env: {})
    out = err = nil
    status = nil
    Open3.popen3(env, SidecarHelper.binary, *args) do |stdin, o, e, thr|
      stdin.close
      reader_o = Thread.new { o.read }
      reader_e = Thread.new { e.read }
      unless thr.join(timeout)
        Process.kill("KILL", thr.pid)
        thr.join
        raise "sidecar #{args.first} did not finish in #{timeout}s: #{reader_e.value}"
      end
      out = reader_o.value
      err = reader_e.value
      status = thr.value
    end
    [status, out, err]
  end

  # Starts the binary in the background; stderr goes to a log file. Returns [pid, log_path].
  def spawn_sidecar(*args, env: {})
    log = File.join(Dir.tmpdir, "wi-sidecar-#{SecureRandom.hex(4)}.log")
    pid = Process.spawn(env, SidecarHelper.binary, *args, out: File::NULL, err: log)
    (@spawned ||= []) << pid
    [pid, log]
  end

  # [host, port] of a sidecar spawned with --metrics-listen (log: its log file).
  def metrics_address(log)
    addr = wait_for(20, 0.05, "metrics_listening") { File.read(log)[/msg=metrics_listening address=(\S+)/, 1] }
    host, port = addr.split(":")
    [host, port.to_i]
  end

  # The metric families (PrometheusText) that sidecar's GET /metrics answers with.
  def scrape_sidecar(log)
    require "net/http"
    require_relative "../support/prometheus_text"
    host, port = metrics_address(log)
    res = Net::HTTP.start(host, port, open_timeout: 5, read_timeout: 10) { |h| h.get("/metrics") }
    raise "GET /metrics answered #{res.code}" unless res.code == "200"

    PrometheusText.parse(res.body)
  end

  def wait_for(timeout = 20, step = 0.05, message = "condition")
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      result = yield
      return result if result
      raise "timed out after #{timeout}s waiting for #{message}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep step
    end
  end

  # Waits for pid to exit; returns its Process::Status (nil on timeout).
  def wait_exit(pid, timeout = 20)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      _, st = Process.waitpid2(pid, Process::WNOHANG)
      return st if st
      return nil if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.05
    end
  end

  # A session holding a long-open snapshot (an idle REPEATABLE READ transaction that has read
  # table), as a report or a forgotten console does: VACUUM keeps every row version it may see.
  # The caller closes it.
  def open_snapshot(url, table = "webhook_inbox")
    holder = PG.connect(url)
    holder.exec("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.exec("SELECT count(*) FROM #{table}") # takes the snapshot
    holder
  end

  def kill_spawned
    (@spawned || []).each do |pid|
      Process.kill("KILL", pid)
      Process.waitpid(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
    @spawned = []
  end
end

RSpec.configure do |config|
  config.include SidecarHelper, :sidecar
  config.after(:each, :sidecar) { kill_spawned }
end
