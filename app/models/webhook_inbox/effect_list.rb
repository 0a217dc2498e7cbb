# frozen_string_literal: true

require "json"

module WebhookInbox
  # EffectList - the dashboard's view of the outbox (webhook_inbox_outbox: effects emitted
  # by handlers, events routed to a destination, and Ruby handler runs under destination
  # 'ruby'): filters, keyset pages newest first by (created_at, operation_id), one effect,
  # an event's effects, and the audited requeue of quarantined effects.
  #
  # Filters (all optional): status (pending, delivered, quarantined), destination, handler
  # (a Ruby handler's name: destination ruby), operation_id, scope / event_id (the emitting
  # event), from/to (created_at, UTC, [from, to)), error (text in last_error). Parameters are
  # read by EventList.read_filter, as the events list's are: anything else raises
  # EventList::BadFilter, a 400.
  class EffectList
    STATUSES = %w[pending delivered quarantined].freeze
    KEYS = %w[status destination handler operation_id scope event_id from to error].freeze
    RUBY = "ruby" # the destination of Ruby handler runs (db/009_ruby_handlers.sql)
    EVENT_EFFECTS_SHOWN = 100
    # The event page's query for other destinations stops after this long rather than hold
    # the page (before schema v13 no index serves it: webhook_inbox_outbox_event_idx).
    EVENT_EFFECTS_TIMEOUT_MS = 2000
    COLUMNS = <<~SQL.squish
      o.operation_id, o.destination, CASE WHEN o.destination = 'ruby' THEN o.payload->>'handler' END AS handler,
      o.status, o.attempts, o.last_error, o.response_status, o.source_scope, o.source_event_id,
      to_char(o.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
      to_char(o.processed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS processed_at
    SQL
    DETAIL_COLUMNS = <<~SQL.squish
      #{COLUMNS}, o.payload::text AS payload, o.response_excerpt, o.provider_id,
      to_char(o.last_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS last_attempt_at,
      to_char(o.next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS next_attempt_at,
      to_char(o.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS lease_until
    SQL
    FORMATS = { # what each key's value must look like (the outbox's own CHECKs), else a 400
      "destination" => /\A[a-z][a-z0-9_]{0,62}\z/, "handler" => /\A[!-~]{1,120}\z/, "operation_id" => /\A[!-~]{1,200}\z/
    }.freeze

    attr_reader :filter

    # params: a Hash-like of strings; unknown keys are ignored, empty values are no filter.
    # Raises EventList::BadFilter.
    def initialize(params)
      @filter = EventList.read_filter(params, KEYS, STATUSES, FORMATS)
      return unless @filter.key?("handler") && @filter.fetch("destination", RUBY) != RUBY

      raise EventList::BadFilter, "handler: only Ruby handler runs (destination ruby) have one"
    end

    # [rows (Hashes), next cursor or nil] for the page after cursor (nil: the first page).
    def page(connection, cursor: nil, limit: 50)
      where, binds = conditions
      if (after = EventList.decode_cursor(cursor, 2))
        binds.concat(after)
        where << "(o.created_at, o.operation_id) < ($#{binds.size - 1}::timestamptz, $#{binds.size})"
      end
      binds << limit + 1
      rows = connection.select_all("SELECT #{COLUMNS} FROM webhook_inbox_outbox o #{where_sql(where)} " \
                                   "ORDER BY o.created_at DESC, o.operation_id DESC LIMIT $#{binds.size}",
                                   "WebhookInbox effects", binds).to_a
      more = rows.size > limit
      rows = rows.first(limit)
      [rows, more ? EventList.encode_cursor(rows.last.values_at("created_at", "operation_id")) : nil]
    end

    # One effect's row (DETAIL_COLUMNS), or nil.
    def self.find(connection, operation_id)
      connection.select_one("SELECT #{DETAIL_COLUMNS} FROM webhook_inbox_outbox o WHERE o.operation_id = $1",
                            "WebhookInbox effect", [operation_id])
    end

    # An event's effects: [Ruby handler runs, other effects (nil when their query ran out of
    # time), whether more than EVENT_EFFECTS_SHOWN exist]. The runs use the outbox's index on
    # (source_scope, source_event_id) for destination ruby, the others (v13 on) webhook_inbox_outbox_event_idx.
    def self.for_event(connection, scope, event_id)
      runs = connection.select_all("SELECT #{COLUMNS} FROM webhook_inbox_outbox o WHERE o.destination = 'ruby' " \
                                   "AND o.source_scope = $1 AND o.source_event_id = $2 ORDER BY handler",
                                   "WebhookInbox event runs", [scope, event_id]).to_a
      others = connection.transaction(requires_new: true) do
        connection.execute("SET LOCAL statement_timeout = #{Integer(EVENT_EFFECTS_TIMEOUT_MS)}")
        connection.select_all("SELECT #{COLUMNS} FROM webhook_inbox_outbox o WHERE o.destination <> 'ruby' " \
                              "AND o.source_scope = $1 AND o.source_event_id = $2 ORDER BY o.created_at, o.operation_id " \
                              "LIMIT $3", "WebhookInbox event effects", [scope, event_id, EVENT_EFFECTS_SHOWN + 1]).to_a
      end
      [runs, others.first(EVENT_EFFECTS_SHOWN), others.size > EVENT_EFFECTS_SHOWN]
    rescue ::ActiveRecord::QueryCanceled
      [runs, nil, false]
    end

    # A Ruby run's entries in its event's attempt_log (the worker writes "Ruby handler NAME:
    # error" and "Ruby handler NAME done"), oldest first; [] for other effects.
    def self.handler_log(connection, effect)
      return [] unless effect["destination"] == RUBY && effect["handler"]

      connection.select_values(<<~SQL.squish, "WebhookInbox handler log",
        SELECT e::text FROM webhook_inbox w,
               jsonb_array_elements(CASE WHEN jsonb_typeof(w.attempt_log) = 'array' THEN w.attempt_log ELSE '[]' END) e
         WHERE w.source_scope = $1 AND w.event_id = $2 AND jsonb_typeof(e) = 'object'
           AND (starts_with(e->>'detail', $3 || ':') OR starts_with(e->>'detail', $3 || ' done'))
      SQL
                               [effect["source_scope"], effect["source_event_id"], "Ruby handler #{effect['handler']}"])
                .map { |t| JSON.parse(t) }
    end

    # How many quarantined effects a requeue of this filter would move now.
    def requeue_count(connection)
      where, binds = conditions(status: "quarantined")
      connection.select_value("SELECT count(*) FROM webhook_inbox_outbox o #{where_sql(where)}",
                              "WebhookInbox effects requeue count", binds).to_i
    end

    # Moves the quarantined effects of this filter back to pending, each through the schema's
    # webhook_inbox_outbox_requeue (attempts reset, due now, deliverers woken), and records
    # the action in webhook_inbox_actions (action requeue, filter {"effects": {...}}) in the
    # same transaction: that function audits nothing. Returns [moved, action id]. Publishes
    # requeue.webhook_inbox (kind "effects").
    def requeue!(connection, actor)
      where, binds = conditions(status: "quarantined")
      payload = ->((moved, id)) { { kind: "effects", filter: to_requeue_filter, moved: moved, action_id: id, actor: actor } }
      Instrumentation.instrument("requeue.webhook_inbox", payload) { requeue_in(connection, actor, where, binds) }
    end

    def requeue_in(connection, actor, where, binds)
      connection.transaction do
        moved = connection.select_value(<<~SQL.squish, "WebhookInbox effects requeue", binds).to_i
          SELECT coalesce(sum(webhook_inbox_outbox_requeue(q.operation_id, NULL)), 0)
            FROM (SELECT o.operation_id FROM webhook_inbox_outbox o #{where_sql(where)}
                   ORDER BY o.operation_id FOR UPDATE) q
        SQL
        id = connection.select_value(<<~SQL.squish, "WebhookInbox effects requeue action", [actor, JSON.generate(to_requeue_filter), moved])
          INSERT INTO webhook_inbox_actions (actor, action, filter, count)
          VALUES ($1, 'requeue', jsonb_build_object('effects', $2::jsonb), $3) RETURNING id
        SQL
        [moved, id.to_i]
      end
    end
    private :requeue_in

    # Whether a requeue would move every quarantined effect: no filter but a time range, and
    # none or one that holds them all (the bulk guard EventList#every_event? is for events).
    def every_effect?(connection)
      f = to_requeue_filter
      return false unless (f.keys - %w[from to]).empty?
      return true if f.empty?

      connection.select_value(<<~SQL.squish, "WebhookInbox effects filter range", [f["from"], f["to"]]).to_i == 1
        SELECT CASE WHEN (($1::timestamptz IS NULL OR $1::timestamptz <= min(created_at))
                      AND ($2::timestamptz IS NULL OR $2::timestamptz > max(created_at))) IS NOT FALSE THEN 1 ELSE 0 END
          FROM webhook_inbox_outbox WHERE status = 'quarantined'
      SQL
    end

    # The filter a requeue moves (status left out: a requeue moves quarantined effects).
    def to_requeue_filter
      @filter.except("status")
    end

    def to_params
      @filter.dup
    end

    private

    def where_sql(where) = where.empty? ? "" : "WHERE #{where.join(' AND ')}"

    # [SQL fragments with $n placeholders, their values] (EventList.sql_conditions).
    def conditions(status: @filter["status"])
      EventList.sql_conditions do |add|
        add.call("o.status = $%<n>s", status) if status
        add.call("o.destination = $%<n>s", @filter["destination"]) if @filter["destination"]
        add.call("o.destination = 'ruby' AND o.payload->>'handler' = $%<n>s", @filter["handler"]) if @filter["handler"]
        add.call("o.operation_id = $%<n>s", @filter["operation_id"]) if @filter["operation_id"]
        add.call("o.source_scope = $%<n>s", @filter["scope"]) if @filter["scope"]
        add.call("o.source_event_id = $%<n>s", @filter["event_id"]) if @filter["event_id"]
        add.call("o.created_at >= $%<n>s::timestamptz", @filter["from"]) if @filter["from"]
        add.call("o.created_at < $%<n>s::timestamptz", @filter["to"]) if @filter["to"]
        add.call("strpos(lower(o.last_error), lower($%<n>s)) > 0", @filter["error"]) if @filter["error"]
      end
    end
  end
end
