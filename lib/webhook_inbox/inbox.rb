# frozen_string_literal: true

module WebhookInbox
  # What an insert did. status is :accepted (a new row) or :duplicate (the key existed:
  # the stored row keeps its own state). stored_raw: the payload went to raw_body;
  # quarantined: the new row was written as quarantined (explicitly, or because the
  # payload is not valid JSON).
  Receipt = Struct.new(:status, :source_scope, :event_id, :stored_raw, :quarantined, keyword_init: true) do
    def accepted?
      status == :accepted
    end

    def duplicate?
      status == :duplicate
    end
  end

  # Inbox - stores verified events in the webhook_inbox table through native libpq
  # connections, exactly once per (source_scope, event_id):
  #
  #   inbox = WebhookInbox::Inbox.new(database_url: "postgres://app@db/app", pool_size: 5)
  #   inbox.insert(source_scope: "stripe:acct_1:live", event_id: "evt_1",
  #                event_type: "charge.succeeded", payload: raw_body).status  # => :accepted
  #
  # The row is committed when #insert returns. The GVL is released while waiting on
  # PostgreSQL, so Puma threads insert in parallel over a pool of up to pool_size
  # connections. A connection lost (server restart, failover) is reopened once and the
  # insert retried; ON CONFLICT DO NOTHING makes that retry idempotent. A session that lost
  # the prepared statement (DISCARD ALL from a pooler: SQLSTATE 26000) is set up again and
  # the insert retried once. Behind pgbouncer use session pooling, or transaction pooling
  # with max_prepared_statements > 0 (1.21+). Safe across
  # fork: a child never uses, nor terminates, a connection its parent opened.
  #
  # Payloads: by default the payload is stored as jsonb. If PostgreSQL refuses it as
  # jsonb (not JSON, a \u0000 escape, invalid UTF-8, ...), the row is still stored, with
  # the bytes in raw_body, status quarantined and last_error "payload is not valid JSON":
  # a verified event is never lost, and never processed as if it were valid. Pass
  # raw: true for bodies that are not JSON by design (Slack's form posts): the bytes go
  # to raw_body and the row stays pending for the worker.
  #
  # Failures raise StoreError (nothing was committed, or the retry will be a duplicate);
  # messages never hold the password or the payload.
  #
  # Group commit (group_commit: true, the default): while one insert is in flight, inserts
  # from other threads queue; when it is answered, the first queued thread takes the whole
  # queue (up to GROUP_MAX_ROWS rows / GROUP_MAX_BYTES of payload) and inserts it as one
  # statement and one commit on one pooled connection - the leader/follower pattern. A lone
  # caller never waits for company: it leads a batch of one, the plain insert. Each caller
  # still gets its own Receipt, only once the batch committed; of two rows with the same key
  # in one batch the first is :accepted, the second :duplicate. A bad row never fails its
  # neighbours: when PostgreSQL refuses the batch (at the statement or at its commit) for
  # an error one row can cause - a payload jsonb refuses, a constraint, an index limit - the
  # core redoes that batch row by row: a payload jsonb refuses is quarantined (the rule
  # above), a row still refused alone raises StoreError in its own caller only. At most
  # group_leaders batches run at once (each on its own connection). A queued caller waits for
  # its batch to start at most checkout_timeout (StoreError, nothing sent), then for its
  # answer as long as the leader's insert may take; Thread#raise and Timeout end either
  # wait at once. A caller that gives up while its row is in flight gets StoreError (or the
  # interrupt) and the row may still commit: the sender's retry is then a duplicate, as for
  # an abandoned plain insert. A leader interrupted mid-batch abandons the statement (the
  # connection is closed); the other rows go back to the queue and are sent again by a new
  # leader (ON CONFLICT: a row the abandoned statement did commit answers :duplicate). A
  # failed batch (server down, timeout) raises StoreError in every caller of that batch.
  #
  # On a Citus cluster (the inbox distributed by source_scope: `migrate --citus`), pass
  # group_by_scope: true: a batch then takes only rows of its leader's source_scope, so
  # each statement and commit touch one shard (one node, no two-phase commit); rows of
  # other scopes wait for the next leader, in their order. Such a batch of up to 32 rows is
  # sent as one multi-row INSERT ... VALUES (prepared once per connection and row count), which
  # Citus routes straight to the shard (a larger batch, or one with a row whose ordering key the
  # extension leaves to SQL, goes as arrays, as without group_by_scope: INSERT ... SELECT, which
  # Citus runs through the coordinator, but which derives the ordering once per statement).
  #
  # Straight to the shard's node (citus_nodes: { "host:port" => url }): a receipt whose scope's
  # shard lives on a node of the map goes to that node (Citus runs the INSERT there by local
  # execution: no routing on the coordinator, no hop), through a pool of its own (pool_size
  # connections per node, group_by_scope batches, the group_leaders shared out over the nodes,
  # at least one each, custom plans: below); any other goes through database_url, the
  # coordinator. The keys name the nodes as pg_dist_node does (nodename:nodeport); the values
  # are how this app reaches them (its own host, user, password, sslmode). Which node holds a
  # scope's shard: CitusRouter (asked of the coordinator, cached citus_route_ttl seconds). A
  # stale answer costs a hop, never a receipt (any node with Citus metadata routes the INSERT
  # itself). When the node's insert raises StoreError (the node down, a timeout) the scope's
  # answer is forgotten and the row is inserted again through the coordinator: ON CONFLICT
  # decides (a row the node did commit answers :duplicate), and #insert still returns only
  # after a commit.
  #
  # Deadlines: each wait for an answer ends after statement_timeout + connect_timeout, even
  # when the server accepts TCP but never answers (a frozen host, a stopped postmaster);
  # Thread#raise, Thread#kill and Timeout end it within ~50 ms. Giving up closes the
  # connection instead of sending a cancel request (PQcancel blocks on a frozen server);
  # the session runs with client_connection_check_interval = 1s (PostgreSQL 14+, Linux),
  # so the server aborts an abandoned insert once it sees the connection closed. A signal
  # trap that runs during a wait does not abandon the insert: the wait resumes.
  class Inbox
    INVALID_JSON_REASON = "payload is not valid JSON"
    STATUSES = %i[pending quarantined].freeze
    GROUP_MAX_ROWS = 256 # rows in one group-commit batch
    GROUP_MAX_BYTES = 8 << 20 # payload bytes in one batch (a larger row still goes, alone)
    # Bounds on the text an event is keyed and routed by, in bytes. Provider ids are far
    # shorter (Stripe's under 100, GitHub's and Shopify's UUIDs 36, Standard Webhooks' ~30),
    # and an unbounded one can exceed what the (source_scope, event_id) index holds
    # (SQLSTATE 54000, ~2.7 kB). event_id: EVENT_ID_MAX_BYTES (the extension's, event_id.h);
    # a longer signed id is stored as Inbox.stored_event_id gives it (Receiver#bound_signed_id).
    MAX_TEXT_BYTES = { source_scope: 255, event_id: EVENT_ID_MAX_BYTES, event_type: 255 }.freeze

    # A caller's row in the group-commit queue. state: :queued (waiting for a batch), :lead
    # (handed the next batch), :sent (in a batch in flight), :done (code or error set),
    # :abandoned (its caller gave up while the row was in flight). cond: signalled on every
    # state change the caller waits for. Guarded by the inbox's @group_mutex.
    Pending = Struct.new(:row, :bytes, :state, :code, :error, :cond, :deadline)

    attr_reader :pool_size, :connect_timeout, :statement_timeout, :group_leaders

    # database_url: a libpq URL or key=value string. Timeouts in seconds (Float ok):
    # connect_timeout bounds connecting, statement_timeout is set on the session and
    # (plus connect_timeout) bounds each wait for an answer. checkout_timeout: how long
    # #insert waits for a free connection when all pool_size are busy (and, with group commit,
    # for its batch to start). group_commit: coalesce concurrent inserts (above); group_leaders:
    # batches in flight at once (at most pool_size); group_by_scope: one source_scope per
    # batch (Citus, above). citus_nodes, citus_route_ttl: receipts straight to the shard's node
    # (Citus, above). custom_plans: sessions plan each execution for its parameters
    # (plan_cache_mode = force_custom_plan), what citus_nodes sets for its nodes' pools: a worker
    # that runs a reused plan's INSERT on its own shard leaks memory at every execution (Citus
    # 13.2, measured; wi_store_set_custom_plans). shard_receive: a batch of two rows or more goes
    # through webhook_inbox_citus_receive() (db/citus/006), which writes the shard's own table on
    # the node holding it (wi_store_set_shard_receive; a row alone keeps its statement: no saving
    # there, measured); what citus_nodes sets for its nodes' pools unless citus_shard_receive is
    # false (the INSERT on the distributed table there, as before: to compare).
    def initialize(database_url:, pool_size: 5, connect_timeout: 5, statement_timeout: 5, checkout_timeout: nil,
                   group_commit: true, group_leaders: 2, group_by_scope: false, citus_nodes: nil, citus_route_ttl: 30,
                   custom_plans: false, shard_receive: false, citus_shard_receive: true)
      raise ConfigurationError, "database_url is required" if database_url.nil? || database_url.to_s.empty?
      raise ConfigurationError, "pool_size must be >= 1" unless pool_size.is_a?(Integer) && pool_size >= 1
      raise ConfigurationError, "group_leaders must be >= 1" unless group_leaders.is_a?(Integer) && group_leaders >= 1

      @database_url = database_url.to_s.dup.freeze
      @pool_size = pool_size
      @connect_timeout = positive(connect_timeout, :connect_timeout)
      @statement_timeout = positive(statement_timeout, :statement_timeout)
      @checkout_timeout = checkout_timeout ? positive(checkout_timeout, :checkout_timeout) : @connect_timeout
      @group_commit = group_commit ? true : false
      @group_leaders = [group_leaders, pool_size].min
      @group_by_scope = group_by_scope ? true : false
      @custom_plans = custom_plans ? true : false
      @shard_receive = shard_receive ? true : false
      reset_pool
      @created = 1
      checkin(new_connection) # parses database_url now: a bad one fails here, not on the first webhook
      begin
        direct_to_nodes(citus_nodes, citus_route_ttl, group_commit, citus_shard_receive) if citus_nodes
      rescue StandardError
        close
        raise
      end
    end

    # Inserts one event. Returns a Receipt. Raises StoreError when it cannot be stored,
    # ArgumentError for text fields that are not UTF-8, contain NUL or are longer than
    # MAX_TEXT_BYTES. headers: the
    # delivery's kept request headers (RequestHeaders.from_env's text, or a Hash of
    # Strings), stored in request_headers when the schema has that column (v5); headers
    # that cannot be stored are left out, never a reason to refuse the event. ordering:
    # [key spec, time path or nil] (Ordering#for) or nil: PostgreSQL derives the event's
    # ordering key and time from the payload (schema v14; left out against an older one).
    # trace: the receipt span's W3C traceparent (Tracing) or nil; stored in trace_context
    # (schema v30) when it is a valid one, as NULL otherwise, never a reason to refuse.
    def insert(source_scope:, event_id:, payload:, event_type: "", status: :pending, last_error: nil, raw: false,
               headers: nil, ordering: nil, trace: nil)
      row = row_of(source_scope, event_id, payload, event_type, status, last_error, raw, headers, ordering, trace)
      receipt(row, routed(row[0]) { |inbox| inbox.store_row(row) })
    end

    # Inserts the events of one delivery (rows: Hashes of #insert's keywords, at most
    # GROUP_MAX_ROWS) in one statement and one commit on one pooled connection, outside the
    # group-commit queue (one row goes through #insert, and so the queue); returns their
    # Receipts in order, each only once all are committed
    # (of two rows with the same key the second is :duplicate). Raises as #insert does, and
    # StoreError when any row could not be stored: if PostgreSQL refuses the statement for
    # one row's data, the rows are inserted one by one (Connection#insert_batch), so some may
    # be committed; the sender's retry then answers those :duplicate.
    def insert_all(rows)
      raise ArgumentError, "insert_all takes 1 to #{GROUP_MAX_ROWS} rows" unless rows.is_a?(Array) && rows.size.between?(1, GROUP_MAX_ROWS)
      return [insert(**rows[0])] if rows.size == 1

      built = rows.map do |r|
        row_of(r.fetch(:source_scope), r.fetch(:event_id), r.fetch(:payload), r.fetch(:event_type, ""),
               r.fetch(:status, :pending), r[:last_error], r[:raw], r[:headers], r[:ordering], r[:trace])
      end
      scope = built[0][0]
      codes = built.all? { |r| r[0] == scope } ? routed(scope) { |inbox| inbox.store_rows(built) } : store_rows(built)
      failed = codes.find { |c| c.is_a?(Exception) }
      raise failed if failed

      built.zip(codes).map { |row, code| receipt(row, code) }
    end

    # Opens one connection now (or checks an idle one), raising StoreError if PostgreSQL
    # is unreachable. For readiness probes.
    def ping
      with_connection(&:connect)
      true
    end

    # Yields a checked-out native connection (WebhookInbox::Inbox::Connection).
    def with_connection
      conn = checkout
      begin
        result = yield conn
      rescue Exception # rubocop:disable Lint/RescueException
        # A failed insert leaves the connection usable or already dropped by the core;
        # on a Ruby-level interrupt (Timeout, Thread#raise) we cannot know: close it.
        conn.close if conn && !$!.is_a?(StoreError) && !$!.is_a?(ArgumentError)
        raise
      ensure
        checkin(conn) if conn
      end
      result
    end

    # Closes every idle connection (the nodes' too); connections in use close when checked in.
    def close
      @mutex.synchronize do
        @closed = true
        @idle.each(&:close)
        @idle.clear
      end
      @nodes&.each_value(&:close)
      @router&.close
      nil
    end

    def closed?
      @closed
    end

    def group_commit?
      @group_commit
    end

    # true: a group-commit batch holds rows of one source_scope only (Citus).
    def group_by_scope?
      @group_by_scope
    end

    # Receipts sent straight to a shard's node, and those of them inserted again through the
    # coordinator after the node's insert failed (citus_nodes; tests and diagnostics).
    def direct_counts
      return { direct: 0, fallback: 0 } unless @count_mutex

      @count_mutex.synchronize { @direct_counts.dup }
    end

    # The node ("host:port") that citus_nodes sends scope's receipts to, nil for the
    # coordinator (tests and diagnostics; may ask the coordinator, as a receipt would).
    def citus_node(scope)
      node = @router&.node_for(scope)
      node if @nodes&.key?(node)
    end

    # Server process ids of the idle connections (tests and diagnostics).
    def backend_pids
      @mutex.synchronize { @idle.map(&:backend_pid).compact }
    end

    # Inserts waiting in the group-commit queue for a batch to start (tests and diagnostics).
    def queued_inserts
      @group_mutex.synchronize { @queue.size }
    end

    # Group-commit batches in flight, or handed to a queued caller to start: 0 when idle
    # (tests and diagnostics).
    def leaders_in_flight
      @group_mutex.synchronize { @leaders }
    end

    def inspect
      "#<#{self.class} database_url=#{self.class.redact(@database_url).inspect} pool_size=#{@pool_size}>"
    end
    alias to_s inspect

    # The URL or conninfo with any password replaced by "***". A URL's password is taken as
    # its author meant it - up to the last '@' before the query - so none of a password with
    # an unencoded '@' or '/' shows (libpq would cut it at the first '@'; Inbox.new refuses
    # such a URL). Same rule as the native redact.c.
    def self.redact(url)
      s = url.to_s
      if (span = url_password_span(s))
        s = "#{s[0...span.begin]}***#{s[span.end..]}"
      end
      s.gsub(/(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)/i, '\1***')
       .gsub(/([?&]password=)[^&]*/i, '\1***')
    end

    # The byte range of a postgres:// URL's password (see redact), or nil.
    def self.url_password_span(url)
      rest = url[%r{\Apostgres(?:ql)?://}] or return nil
      at = url.index("@", rest.size) or return nil
      # User info: an '@' before any '/' (libpq's rule), or before any '?' (a '/' in the password).
      slash = url.index("/", rest.size)
      question = url.index("?", rest.size)
      return nil if slash && slash < at && question && question < at

      colon = url.index(":", rest.size) # a user name has neither '/' nor '?'
      return nil if colon.nil? || colon > at || [slash, question].compact.any? { |i| i < colon }

      query = url.index("?", at) || url.size
      (colon + 1)...url.rindex("@", query - 1)
    end
    private_class_method :url_password_span

    protected

    # Stores one checked row (row_of) on this inbox's own pool; its result code.
    def store_row(row)
      @group_commit ? group_insert(row) : with_connection { |conn| conn.insert(*row) }
    end

    # Stores checked rows in one statement on this inbox's own pool; their codes (or errors).
    def store_rows(rows)
      with_connection { |conn| conn.insert_batch(rows) }
    end

    private

    # citus_nodes: an Inbox per node (same settings, group_by_scope) and the router. The nodes
    # share group_leaders (at least one each): as many batches in flight as through the
    # coordinator, so as many rows a batch (with group_leaders each, two nodes made batches of
    # half the rows, and a receipt cost 1.65x, measured).
    def direct_to_nodes(nodes, ttl, group_commit, shard_receive)
      unless nodes.is_a?(Hash) && !nodes.empty? &&
             nodes.all? { |k, v| k.is_a?(String) && k.match?(/\A\S+:\d+\z/) && v.is_a?(String) && !v.empty? }
        raise ConfigurationError, "citus_nodes must map \"host:port\" (as pg_dist_node names a node) to a database URL"
      end

      @count_mutex = Thread::Mutex.new
      @direct_counts = { direct: 0, fallback: 0 }
      @router = CitusRouter.new(@database_url, ttl: positive(ttl, :citus_route_ttl), connect_timeout: @connect_timeout,
                                               statement_timeout: @statement_timeout)
      @nodes = {}
      leaders = (@group_leaders.to_f / nodes.size).ceil
      nodes.each do |node, url|
        @nodes[node.dup.freeze] =
          Inbox.new(database_url: url, pool_size: @pool_size, connect_timeout: @connect_timeout,
                    statement_timeout: @statement_timeout, checkout_timeout: @checkout_timeout,
                    group_commit: group_commit, group_leaders: leaders, group_by_scope: true, custom_plans: true,
                    shard_receive: shard_receive)
      end
      @nodes.freeze
    end

    # Yields the inbox to store scope's rows: its shard's node's (citus_nodes) or this one. A
    # StoreError on the node forgets the scope's node and yields this inbox (the coordinator)
    # again: ON CONFLICT makes the second insert answer :duplicate for a row the first committed.
    def routed(scope)
      node = @router && @nodes[@router.node_for(scope)]
      return yield(self) unless node

      count(:direct)
      begin
        yield node
      rescue StoreError
        @router.forget(scope)
        count(:fallback)
        yield self
      end
    end

    def count(what)
      @count_mutex.synchronize { @direct_counts[what] += 1 }
    end

    # Connection#insert's arguments for one event, checked (ArgumentError).
    def row_of(source_scope, event_id, payload, event_type, status, last_error, raw, headers, ordering, trace = nil)
      raise ArgumentError, "status must be :pending or :quarantined" unless STATUSES.include?(status.to_sym)

      scope = key_text(source_scope, :source_scope)
      id = key_text(event_id, :event_id)
      raise ArgumentError, "source_scope and event_id must not be empty" if scope.empty? || id.empty?

      [scope, id, key_text(event_type, :event_type), String(payload), raw ? true : false,
       status.to_sym == :quarantined, last_error && text(last_error, :last_error), RequestHeaders.encode(headers),
       ordering && checked_ordering(ordering), trace.is_a?(String) ? trace : nil]
    end

    def receipt(row, code)
      Receipt.new(status: code.anybits?(1) ? :accepted : :duplicate, source_scope: row[0], event_id: row[1],
                  stored_raw: code.anybits?(2), quarantined: code.anybits?(4))
    end

    def positive(value, name)
      raise ConfigurationError, "#{name} must be a positive number of seconds" unless value.is_a?(Numeric) && value.positive?

      value
    end

    def text(value, name)
      s = value.to_s
      s = s.encoding == Encoding::UTF_8 ? s : s.dup.force_encoding(Encoding::UTF_8)
      raise ArgumentError, "#{name} is not valid UTF-8" unless s.valid_encoding?
      raise ArgumentError, "#{name} contains a NUL byte" if s.include?("\0")

      s
    end

    def checked_ordering(value)
      unless value.is_a?(Array) && value.size == 2 && (value[1].nil? || Ordering::PATH.match?(value[1].to_s))
        raise ArgumentError, "ordering must be [key spec, time path or nil] (Ordering#for)"
      end
      [Ordering.check(value[0]), value[1]&.to_s]
    rescue ConfigurationError => e
      raise ArgumentError, e.message
    end

    def key_text(value, name)
      s = text(value, name)
      max = MAX_TEXT_BYTES[name]
      raise ArgumentError, "#{name} is longer than #{max} bytes" if s.bytesize > max

      s
    end

    def new_connection
      # group_by_scope (Citus): a batch of one scope as multi-row VALUES, which Citus routes
      # to the scope's shard (the arrays form goes through the coordinator's INSERT ... SELECT)
      Connection.new(@database_url, (@connect_timeout * 1000).ceil, (@statement_timeout * 1000).ceil, @group_by_scope,
                     @custom_plans, @shard_receive)
    end

    # After fork the child gets a fresh pool: the parent's connections are dropped by the
    # native core without a Terminate message (the parent keeps its sessions). And an empty
    # group-commit queue: the parent's leaders and followers do not exist here. @pid is set
    # last: check_fork lets a thread through as soon as it matches, so every other field
    # must be fresh by then (set first, a second thread of a new worker queued on the old
    # queue while the first one swapped it, and waited for a batch that never came).
    def reset_pool
      @mutex = Thread::Mutex.new
      @available = Thread::ConditionVariable.new
      @idle = []
      @created = 0
      @closed = false
      @group_mutex = Thread::Mutex.new
      @queue = [] # Pending rows not yet in a batch, oldest first
      @leaders = 0 # batches in flight (or handed to a queued caller to start)
      @pid = Process.pid
    end

    def after_fork
      old = @idle
      reset_pool
      old.each(&:close) # in the child: dup2(/dev/null) over the socket, then free
    end

    # Serializes the first checkouts after a fork, so two threads of a new Puma worker do
    # not both reset the pool (swapping @mutex under each other).
    FORK_LOCK = Thread::Mutex.new

    def check_fork
      FORK_LOCK.synchronize { after_fork if @pid != Process.pid } if @pid != Process.pid
    end

    DEFER = { Object => :never }.freeze
    TAKE = { Object => :immediate }.freeze

    # Inserts row (Connection#insert's arguments) through the group-commit queue; returns
    # its result code. Bookkeeping runs with interrupts deferred, so a Timeout or
    # Thread#raise never leaves the queue or the leader count half-updated; only the waits
    # and the leader's native call take them. A caller that finds a leader slot free leads
    # alone at once (the queue is empty whenever a slot is free: hand_off).
    def group_insert(row)
      check_fork
      Thread.handle_interrupt(DEFER) do
        entry = nil
        batch = @group_mutex.synchronize do
          if @leaders < @group_leaders
            @leaders += 1
            nil
          else
            entry = Pending.new(row, row[3].bytesize, :queued)
            join_group(entry)
          end
        end
        next lead_alone(row) unless entry

        lead(batch) if batch
        raise entry.error if entry.error

        entry.code
      end
    end

    # The lone caller's insert: today's path, then the slot passes to whoever queued meanwhile.
    def lead_alone(row)
      Thread.handle_interrupt(TAKE) { with_connection { |conn| conn.insert(*row) } }
    ensure
      @group_mutex.synchronize { hand_off }
    end

    # Called holding @group_mutex with every leader slot taken: queues entry. Returns the
    # batch to lead once handed one, or nil once entry is done (raising its caller's
    # give-up or interrupt; ensure, not rescue: Thread#kill too).
    def join_group(entry)
      entry.cond = Thread::ConditionVariable.new
      entry.deadline = monotonic + @checkout_timeout
      @queue << entry
      batch = nil
      finished = false
      begin
        until entry.state == :done
          if entry.state == :lead
            batch = take_batch(entry)
            break
          end
          left = entry.deadline - monotonic
          if left <= 0
            raise StoreError, "no inbox batch started within #{@checkout_timeout}s" if entry.state == :queued

            raise StoreError, "gave up waiting for the batch that carries this insert; it may still commit"
          end
          Thread.handle_interrupt(TAKE) { entry.cond.wait(@group_mutex, left) }
        end
        finished = true
      ensure
        give_up(entry) unless finished
      end
      batch
    end

    # Called holding @group_mutex: entry's caller stops waiting (deadline, interrupt).
    def give_up(entry)
      case entry.state
      when :queued then @queue.delete(entry)
      when :sent then entry.state = :abandoned # its leader ignores the answer
      when :lead # handed a batch it will not lead (hand_off took it off the queue): pass it on
        hand_off
      end
    end

    # Called holding @group_mutex: entry, then the oldest queued rows up to the limits,
    # marked :sent. Each follower may now wait as long as the leader's call can take:
    # connecting, and two round trips (the one reconnect).
    # With group_by_scope, rows of other scopes are passed over and stay queued in order.
    def take_batch(entry)
      batch = [entry] # handed the slot, so no longer queued (hand_off)
      bytes = entry.bytes
      if @group_by_scope
        scope = entry.row[0]
        @queue.each do |nxt|
          next unless nxt.row[0] == scope
          break if batch.size >= GROUP_MAX_ROWS || bytes + nxt.bytes > GROUP_MAX_BYTES

          batch << nxt
          bytes += nxt.bytes
        end
        @queue.reject! { |e| batch.any? { |b| b.equal?(e) } }
      else
        while (nxt = @queue.first) && batch.size < GROUP_MAX_ROWS && bytes + nxt.bytes <= GROUP_MAX_BYTES
          batch << @queue.shift
          bytes += nxt.bytes
        end
      end
      deadline = monotonic + (@connect_timeout * 3) + (@statement_timeout * 2)
      batch.each do |e|
        e.state = :sent
        e.deadline = deadline
      end
      batch
    end

    # Called holding @group_mutex when a batch ends: the oldest queued caller leads the
    # next one (the slot passes to it), or the slot is freed. The caller handed the slot
    # leaves the queue at once: left in it until it woke, a second batch ending meanwhile
    # handed it that slot too, or another leader took it into its batch as a follower, and
    # the slot was lost for the life of the process (group_leaders 2 ran as 1).
    def hand_off
      if (nxt = @queue.shift)
        nxt.state = :lead
        nxt.cond.signal
      else
        @leaders -= 1
      end
    end

    # Inserts the batch (interrupts deferred on entry) and answers every follower. Anything
    # else than the store's own error - an interrupt of the leader (raise, Timeout, kill) -
    # abandons the statement; the other rows are queued again.
    def lead(batch)
      codes = error = nil
      answered = false
      begin
        codes = Thread.handle_interrupt(TAKE) do
          with_connection do |conn|
            batch.size == 1 ? [conn.insert(*batch[0].row)] : conn.insert_batch(batch.map(&:row))
          end
        end
      rescue StoreError, ConfigurationError => e # the store's answer for the whole batch
        error = e
      ensure
        @group_mutex.synchronize do
          if codes || error
            answer(batch, codes, error)
          else
            requeue(batch.drop(1))
          end
          answered = true
          hand_off
        end
      end
      answered
    end

    # Called holding @group_mutex: every caller of the batch still waiting gets its code, or
    # its own row's error (a row the server refused alone), or the batch's error (the leader
    # the original, the others a copy).
    def answer(batch, codes, error)
      batch.each_with_index do |e, i|
        next if e.state == :abandoned

        code = codes && codes[i]
        e.code, e.error = code.is_a?(Exception) ? [nil, code] : [code, error && (i.zero? ? error : error.class.new(error.message))]
        e.state = :done
        e.cond&.signal
      end
    end

    # Called holding @group_mutex: rows of an abandoned batch go back to the head of the
    # queue (their callers still wait), with a new deadline to start.
    def requeue(entries)
      live = entries.reject { |e| e.state == :abandoned }
      deadline = monotonic + @checkout_timeout
      live.each do |e|
        e.state = :queued
        e.deadline = deadline
        e.cond ||= Thread::ConditionVariable.new
      end
      @queue.unshift(*live)
    end

    def checkout
      check_fork
      deadline = nil
      @mutex.synchronize do
        loop do
          raise StoreError, "inbox is closed" if @closed
          return @idle.pop unless @idle.empty?

          if @created < @pool_size
            @created += 1
            break
          end
          deadline ||= monotonic + @checkout_timeout
          left = deadline - monotonic
          raise StoreError, "no free inbox connection within #{@checkout_timeout}s (pool_size #{@pool_size})" if left <= 0

          @available.wait(@mutex, left)
        end
      end
      begin
        new_connection
      rescue Exception # rubocop:disable Lint/RescueException
        @mutex.synchronize { @created -= 1 }
        raise
      end
    end

    def checkin(conn)
      return if @pid != Process.pid # checked out before a fork: not ours to pool

      @mutex.synchronize do
        if @closed || conn.closed?
          conn.close
          @created -= 1 if conn.closed? && !@closed
        else
          @idle.push(conn)
        end
        @available.signal
      end
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
