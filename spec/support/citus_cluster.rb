# frozen_string_literal: true

require "timeout"
require_relative "throwaway_postgres"

# CitusCluster - a Citus coordinator and workers on this machine, each a ThrowawayPostgres
# with shared_preload_libraries = citus, the extension created and the workers added. Needs
# the citus extension built for the PostgreSQL that ThrowawayPostgres runs; CitusCluster.missing
# says why not (spec/citus skips with it). Citus is never part of the project: build it from
# its source repository (docs/capacity.md, "Trying it").
class CitusCluster
  SETTINGS = {
    # citus_stat_statements: which executor ran a statement (a router "adaptive" with its
    # distribution key, or "insert-select" through the coordinator).
    "shared_preload_libraries" => "citus,pg_stat_statements",
    "citus.stat_statements_track" => "all",
    "max_prepared_transactions" => "100", # two-phase commit of transactions over several nodes
    "wal_level" => "logical",
    # A session whose client died (kill -9 of a sidecar) is ended within 100 ms even while
    # its handler runs, its transaction rolled back (rather than finishing the queued COMMIT).
    "client_connection_check_interval" => "100ms"
  }.freeze

  attr_reader :coordinator, :workers

  # nil when a cluster can start here, else the reason it cannot.
  def self.missing
    bin = ThrowawayPostgres.bin_dir
    pg_config = File.join(bin, "pg_config")
    pg_config = "pg_config" unless File.executable?(pg_config)
    share = IO.popen([pg_config, "--sharedir"], err: File::NULL, &:read).strip
    lib = IO.popen([pg_config, "--pkglibdir"], err: File::NULL, &:read).strip
    return nil if File.exist?(File.join(share, "extension", "citus.control")) && File.exist?(File.join(lib, "citus.so"))

    "the citus extension is not installed for the PostgreSQL in #{bin} " \
      "(no citus.control under #{share}/extension): build Citus 13.2 from source to run spec/citus"
  rescue StandardError => e
    "no PostgreSQL to run Citus on: #{e.message}"
  end

  # settings: each node's postgresql.conf lines (bench/citus passes one node's, citus preloaded,
  # without the specs' statement tracking).
  def initialize(workers: 2, dbname: "webhook_inbox", settings: SETTINGS)
    @coordinator = ThrowawayPostgres.new(dbname: dbname, settings: settings)
    @workers = Array.new(workers) { ThrowawayPostgres.new(dbname: dbname, settings: settings) }
    nodes.each { |n| n.psql("CREATE EXTENSION citus") }
    coordinator.psql("SELECT citus_set_coordinator_host('127.0.0.1', #{coordinator.port})")
    @workers.each { |w| coordinator.psql("SELECT citus_add_node('127.0.0.1', #{w.port})") }
  rescue StandardError
    destroy
    raise
  end

  def nodes
    [@coordinator, *@workers].compact
  end

  # The coordinator: where the application, the receiver and the sidecars connect.
  def url
    coordinator.url
  end

  def psql(sql)
    coordinator.psql(sql)
  end

  def destroy
    nodes.each(&:destroy)
  end
end

# For spec/citus groups: `include CitusClusterSpec` starts one cluster for the group (skipped
# with CitusCluster.missing's reason when Citus is not installed, as on CI) and destroys it
# after the group; examples get cluster, sql, migrate_citus! and wait_for.
module CitusClusterSpec
  def self.included(group)
    group.before(:all) do
      why = CitusCluster.missing
      skip(why) if why
      @cluster = CitusCluster.new(workers: 2)
    end
    group.after(:all) { @cluster&.destroy }
  end

  def cluster = @cluster

  # One statement (or several) on the coordinator: psql's output, stripped.
  def sql(query) = cluster.psql(query).strip

  # `migrate --citus` on the coordinator with the sidecar binary; its output, or raises with it.
  def migrate_citus!
    out, st = Open3.capture2e(SidecarHelper.binary, "migrate", "--citus", "--database-url", cluster.url)
    raise out unless st.success?

    out
  end

  # Polls every 0.1 s until the block is true; raises "never happened: what" past bound seconds.
  # Stops a process the example spawned (a sidecar): TERM, KILL after 30 s.
  def stop_process(pid)
    Process.kill(:TERM, pid)
    Timeout.timeout(30) { Process.wait(pid) }
  rescue Timeout::Error
    Process.kill(:KILL, pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  def wait_for(what, bound: 300)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + bound
    until yield
      raise "never happened: #{what}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.1
    end
  end
end
