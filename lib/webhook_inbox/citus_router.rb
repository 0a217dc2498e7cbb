# frozen_string_literal: true

module WebhookInbox
  # CitusRouter - on a Citus cluster, the node that holds a source scope's shard of
  # webhook_inbox, so an Inbox can send that scope's receipts there: Citus runs the INSERT on
  # that node by local execution, with no routing on the coordinator and no hop.
  #
  # It asks the coordinator (get_shard_id_for_distribution_column, then the placement's node),
  # one query per scope it has not cached, over a pg connection of its own; it caches up to
  # MAX_SCOPES scopes for ttl seconds. The cache only ever costs speed, never a receipt: every
  # node with Citus metadata routes an INSERT on a distributed table itself, so a scope sent to
  # a node its shard has left is still stored once (Citus forwards it). Lookups that fail (the
  # coordinator unreachable, not a Citus database) answer nil - the caller goes through the
  # coordinator - and are not tried again for RETRY_AFTER seconds. Thread-safe; fork-safe (a
  # child opens its own connection). Messages never hold the URL's password.
  class CitusRouter
    LOOKUP = <<~SQL
      SELECT n.nodename || ':' || n.nodeport
      FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
      WHERE p.shardid = get_shard_id_for_distribution_column('webhook_inbox', $1::text)
        AND n.isactive AND n.noderole = 'primary'
      ORDER BY p.placementid LIMIT 1
    SQL
    MAX_SCOPES = 10_000 # scopes cached; past it the oldest entry goes
    RETRY_AFTER = 5     # seconds without lookups after one failed

    # coordinator_url: where the lookups go (the Inbox's database_url). ttl: seconds a scope's
    # node is trusted (a shard moved is followed within ttl). Timeouts in seconds.
    def initialize(coordinator_url, ttl:, connect_timeout:, statement_timeout:)
      begin
        require "pg"
      rescue LoadError
        raise ConfigurationError, "citus_nodes needs the pg gem (gem \"pg\") for its shard lookups"
      end
      @url = coordinator_url
      @ttl = ttl
      @connect_timeout = connect_timeout
      @statement_timeout = statement_timeout
      @mutex = Thread::Mutex.new # @cache, @failed_until, @pid
      @lookup_mutex = Thread::Mutex.new # @conn: one lookup at a time
      @cache = {} # scope => [node, expires_at], oldest first
      @conn = nil
      @pid = Process.pid
      @failed_until = 0
    end

    # "host:port" of the node holding scope's shard, as pg_dist_node names it; nil when
    # unknown (the lookup failed, or lookups rest after a failure). A cached scope answers at
    # once; an uncached one waits for the lookups before it (each bounded by connect_timeout +
    # statement_timeout).
    def node_for(scope)
      cached = @mutex.synchronize do
        reset_after_fork
        cached_node(scope)
      end
      return cached unless cached == :ask

      @lookup_mutex.synchronize do
        cached = @mutex.synchronize { cached_node(scope) } # asked meanwhile by another thread?
        next cached unless cached == :ask

        node = lookup(scope)
        @mutex.synchronize { remember(scope, node) }
        node
      end
    end

    # Forgets scope's node (its insert failed there): the next receipt asks again.
    def forget(scope)
      @mutex.synchronize { @cache.delete(scope) }
    end

    def close
      @lookup_mutex.synchronize do
        @mutex.synchronize { reset_after_fork }
        @conn&.close
        @conn = nil
      end
    end

    def inspect
      "#<#{self.class} scopes=#{@cache.size} ttl=#{@ttl}>"
    end
    alias to_s inspect

    private

    # Called holding @mutex: scope's node, nil (resting after a failure) or :ask.
    def cached_node(scope)
      node, expires = @cache[scope]
      now = monotonic
      return node if node && expires > now
      return nil if now < @failed_until

      :ask
    end

    # Called holding @mutex.
    def remember(scope, node)
      @cache.delete(scope)
      if node
        @cache.shift if @cache.size >= MAX_SCOPES
        @cache[scope] = [node, monotonic + @ttl]
      else
        @failed_until = monotonic + RETRY_AFTER
      end
    end

    # Called holding @lookup_mutex. nil when the lookup failed (the connection is closed).
    def lookup(scope)
      connection.exec_params(LOOKUP, [scope]) { |res| res.ntuples.zero? ? nil : res.getvalue(0, 0) } # cleared after
    rescue PG::Error
      @conn&.close
      @conn = nil
      nil
    end

    def connection
      return @conn if @conn && !@conn.finished? && @conn.status == PG::CONNECTION_OK

      @conn&.close
      @conn = nil
      @conn = PG.connect(@url, connect_timeout: [@connect_timeout.ceil, 1].max, application_name: "webhook_inbox_router")
      @conn.exec("SET statement_timeout = #{(@statement_timeout * 1000).ceil}", &:check) # closed by lookup if it fails
      @conn
    end

    # Called holding @mutex. In a forked child the parent's connection is not ours: its socket
    # is pointed at /dev/null first, so closing our copy never ends the parent's session.
    def reset_after_fork
      return if @pid == Process.pid

      if @conn
        IO.for_fd(@conn.socket, autoclose: false).reopen(File::NULL, "r+") rescue nil # rubocop:disable Style/RescueModifier
        @conn.close rescue nil # rubocop:disable Style/RescueModifier
      end
      @conn = nil
      @cache = {}
      @failed_until = 0
      @pid = Process.pid
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
