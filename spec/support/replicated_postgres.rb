# frozen_string_literal: true

require_relative "throwaway_postgres"

# ReplicatedPostgres - a primary and a hot standby on real streaming replication, for the
# failover specs and bin/failover. The standby is a pg_basebackup -R of the primary taken
# after the block given to .new has set the primary up (schema, handlers), so both nodes hold
# the same configuration: synchronous_standby_names = '*' (every commit waits until the
# standby has flushed it) is set with ALTER SYSTEM on the primary and so copied to the standby
# - after a promotion the new primary still names a synchronous standby, as in production,
# until #fail_over! (or the operator) clears it.
class ReplicatedPostgres
  # client_connection_check_interval: a backend whose client gave up notices within 250 ms.
  SETTINGS = { "wal_level" => "replica", "max_wal_senders" => "10", "hot_standby" => "on",
               "client_connection_check_interval" => "250ms" }.freeze

  attr_reader :primary, :standby

  # Yields the primary (before the standby exists) for schema setup.
  def initialize(settings: {})
    @settings = SETTINGS.merge(settings)
    @primary = ThrowawayPostgres.new(settings: @settings)
    yield @primary if block_given?
    @primary.alter_system("synchronous_standby_names", "'*'")
    @standby = ThrowawayPostgres.new(settings: @settings, base_backup_of: @primary)
    wait_for_sync_standby
  rescue StandardError
    destroy
    raise
  end

  # A multi-host libpq conninfo naming both nodes, primary first; read-write sessions only.
  def url(db = primary.dbname)
    user = primary.url[/user=(\S+)/, 1]
    "host=#{primary.socket_dir},#{standby.socket_dir} port=#{primary.port},#{standby.port} " \
      "dbname=#{db} user=#{user} target_session_attrs=read-write"
  end

  # The node that takes writes now.
  def current_primary
    @promoted ? standby : primary
  end

  # The failover an operator (or Patroni) does: the primary stops hard (no shutdown
  # checkpoint: a crash), the standby is promoted and, unless clear_sync is false, its
  # synchronous_standby_names cleared (it has no standby of its own: every commit would wait
  # forever). Yields once the primary is down (the moment of the crash). Returns the seconds
  # from then to the promoted node taking writes.
  def fail_over!(clear_sync: true)
    primary.stop(mode: "immediate")
    t0 = monotonic
    yield if block_given?
    standby.promote
    @promoted = true
    clear_synchronous_standby_names if clear_sync
    monotonic - t0
  end

  def clear_synchronous_standby_names
    standby.alter_system("synchronous_standby_names", nil)
  end

  def destroy
    @standby&.destroy
    @primary&.destroy
  end

  private

  def wait_for_sync_standby
    deadline = monotonic + 60
    until primary.psql("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'").to_i == 1
      raise "standby did not become synchronous:\n#{standby.log_tail}" if monotonic > deadline

      sleep 0.1
    end
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
