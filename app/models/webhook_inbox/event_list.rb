# frozen_string_literal: true

require "base64"
require "json"
require "time"

module WebhookInbox
  # EventList - the dashboard's event filters and keyset pagination over the inbox, newest
  # first by (received_at, source_scope, event_id), LIMIT page size + 1: each page walks
  # webhook_inbox_received_idx (or the quarantined / pending partial indexes) from the
  # cursor, never an OFFSET over millions of rows.
  #
  # Filters (all optional, from request params): status (pending, retrying, done,
  # quarantined), scope, event_id, type (exact, or 'prefix*'), from/to (received_at, UTC,
  # [from, to)), error (case-insensitive text in last_error). to_requeue_filter gives the
  # same filter as webhook_inbox_requeue() reads it, so a bulk action moves what the list shows.
  #
  # Parameters are the client's: a value that is not one string of UTF-8 text without NUL, a
  # status not listed or a time outside 0001-9999 raises BadFilter (a 400, never a filter
  # silently wider than asked). A cursor that is not one this list wrote gives the first page.
  class EventList
    # A filter parameter the list cannot use; the message names it, never echoes its value.
    class BadFilter < ArgumentError; end

    STATUSES = %w[pending retrying done quarantined].freeze
    KEYS = %w[status scope event_id type from to error].freeze
    COLUMNS = <<~SQL.squish
      w.source_scope, w.event_id, w.event_type, w.status, w.attempts, w.last_error, w.outcome,
      to_char(w.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS received_at,
      to_char(w.processed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS processed_at
    SQL

    TEXT_ARRAY = PG::TextEncoder::Array.new # text[] parameters (ids with commas or quotes stay values)

    attr_reader :filter

    # params: a Hash-like of strings; unknown keys are ignored, empty values are no filter.
    # Raises BadFilter (see above).
    def initialize(params)
      @filter = self.class.read_filter(params, KEYS, STATUSES)
    end

    # The filter in params (keys; empty values left out): from/to as UTC times, status one
    # of statuses, a key of formats matching its pattern. Raises BadFilter naming the key.
    # EffectList reads its filter here too.
    def self.read_filter(params, keys, statuses, formats = {})
      keys.each_with_object({}) do |k, filter|
        v = text(params, k).to_s.strip
        next if v.empty?

        if %w[from to].include?(k)
          v = parse_time(v) or raise BadFilter, "#{k}: not a time from 0001 to 9999 (ISO 8601, or 2026-01-31T00:00 read as UTC)"
        elsif k == "status" && !statuses.include?(v)
          raise BadFilter, "status: one of #{statuses.join(', ')}"
        elsif formats[k] && !formats[k].match?(v)
          raise BadFilter, "#{k}: not a well-formed #{k.tr('_', ' ')}"
        end
        filter[k] = v
      end
    end

    # [SQL fragments with $n placeholders, their values] from the block, which calls
    # add.(fragment with %<n>s for the placeholder's number, value): fixed text, values only as binds.
    def self.sql_conditions
      where = []
      binds = []
      yield lambda { |fragment, value|
        binds << value
        where << format(fragment, n: binds.size)
      }
      [where, binds]
    end

    # params[key] as one String of UTF-8 text without NUL (what PostgreSQL's text takes), or
    # nil when absent; raises BadFilter for anything else (a list, a hash, a NUL, bad UTF-8).
    def self.text(params, key)
      v = params[key]
      return nil if v.nil?
      raise BadFilter, "#{key}: one value expected" unless v.is_a?(String)
      raise BadFilter, "#{key}: not UTF-8 text without NUL" unless text?(v)

      v
    end

    def self.text?(value)
      value.is_a?(String) && value.dup.force_encoding(Encoding::UTF_8).valid_encoding? && !value.include?("\0")
    end

    # ISO 8601 or the browser's datetime-local ("2026-01-02T03:04"), read as UTC, as UTC ISO
    # 8601 text with microseconds; nil if neither, or outside 0001-9999 (PostgreSQL refuses
    # year 0, and a wider range says nothing more).
    def self.parse_time(text)
      text = "#{text}:00" if text.match?(/\A\d{4}-\d\d-\d\dT\d\d:\d\d\z/)
      text = "#{text}Z" if text.match?(/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\z/)
      t = Time.iso8601(text).utc
      (1..9999).cover?(t.year) ? t.iso8601(6) : nil
    rescue ArgumentError, RangeError
      nil
    end

    # A keyset cursor (a time, then texts) as URL-safe text; EffectList pages the same way.
    def self.encode_cursor(values)
      Base64.urlsafe_encode64(JSON.generate(values), padding: false)
    end

    # [time, text, ...] (size values) from a cursor encode_cursor wrote, else nil (the first
    # page): never raises, whatever the client sent.
    def self.decode_cursor(cursor, size)
      return nil unless cursor.is_a?(String) && !cursor.empty?

      values = JSON.parse(Base64.urlsafe_decode64(cursor))
      return nil unless values.is_a?(Array) && values.size == size && values.all? { |v| text?(v) }

      at = parse_time(values[0])
      at && [at, *values.drop(1)]
    rescue ArgumentError, EncodingError, JSON::ParserError
      nil
    end

    # [rows (Hashes), next cursor or nil] for the page after cursor (nil: the first page).
    def page(connection, cursor: nil, limit: 50)
      where, binds = conditions
      if (after = decode_cursor(cursor))
        binds.concat(after)
        n = binds.size
        where << "(w.received_at, w.source_scope, w.event_id) < ($#{n - 2}::timestamptz, $#{n - 1}, $#{n})"
      end
      binds << limit + 1
      sql = "SELECT #{COLUMNS} FROM webhook_inbox w #{where.empty? ? '' : "WHERE #{where.join(' AND ')}"} " \
            "ORDER BY w.received_at DESC, w.source_scope DESC, w.event_id DESC LIMIT $#{binds.size}"
      rows = connection.select_all(sql, "WebhookInbox events", binds).to_a
      more = rows.size > limit
      rows = rows.first(limit)
      [charge_ruby_runs(connection, rows), more ? encode_cursor(rows.last) : nil]
    end

    # The filter for webhook_inbox_requeue / _count (status left out: the action decides it).
    def to_requeue_filter
      @filter.except("status")
    end

    # Whether the filter leaves out none of the stored events of status, so that a bulk action
    # would move every one of them: no scope, event id or error text, a type of at most "*",
    # and no time range or one that holds them all (from at or before the oldest, to after
    # the newest; one indexed min and max).
    def every_event?(connection, status)
      f = to_requeue_filter
      return false if f.key?("scope") || f.key?("event_id") || f.key?("error") || f.fetch("type", "*") != "*"
      return true unless f.key?("from") || f.key?("to")

      connection.select_value(<<~SQL.squish, "WebhookInbox filter range", [f["from"], f["to"], status]).to_i == 1
        SELECT CASE WHEN (($1::timestamptz IS NULL OR $1::timestamptz <= min(received_at))
                      AND ($2::timestamptz IS NULL OR $2::timestamptz > max(received_at))) IS NOT FALSE THEN 1 ELSE 0 END
          FROM webhook_inbox WHERE status = $3
      SQL
    end

    # The action a bulk change of this list would be: requeue (quarantined), replay (done), or nil.
    def bulk_action
      { "quarantined" => "requeue", "done" => "replay" }[@filter["status"]]
    end

    def to_params
      @filter.dup
    end

    private

    # Adds to each row's attempts those of its Ruby handler runs (charged on the run, in the
    # outbox, not on the event: an event handed to Ruby handlers keeps 0 itself). One query for
    # the page; ANY over scopes and ids (not a correlated subquery) so Citus plans it too.
    def charge_ruby_runs(connection, rows)
      return rows if rows.empty?

      runs = connection.select_rows(<<~SQL.squish, "WebhookInbox event runs' attempts",
        SELECT source_scope, source_event_id, sum(attempts) FROM webhook_inbox_outbox
         WHERE destination = 'ruby' AND source_scope = ANY($1::text[]) AND source_event_id = ANY($2::text[])
         GROUP BY 1, 2
      SQL
                                    [TEXT_ARRAY.encode(rows.map { |r| r["source_scope"] }.uniq),
                                     TEXT_ARRAY.encode(rows.map { |r| r["event_id"] })])
      charged = runs.to_h { |scope, id, n| [[scope, id], n.to_i] }
      rows.each { |r| r["attempts"] = r["attempts"].to_i + charged.fetch([r["source_scope"], r["event_id"]], 0) }
    end

    # [SQL fragments with $n placeholders, their values] (sql_conditions).
    def conditions
      self.class.sql_conditions do |add|
        case @filter["status"]
        # pending with an attempt charged: on the event, or on one of its Ruby handler runs (as
        # charge_ruby_runs counts them; a correlated EXISTS on the co-located outbox, which
        # Citus pushes down with the scope)
        when "retrying" then add.call("w.status = $%<n>s AND (w.attempts > 0 OR EXISTS (SELECT 1 FROM webhook_inbox_outbox o " \
                                      "WHERE o.destination = 'ruby' AND o.source_scope = w.source_scope " \
                                      "AND o.source_event_id = w.event_id AND o.attempts > 0))", "pending")
        when String then add.call("w.status = $%<n>s", @filter["status"])
        end
        add.call("w.source_scope = $%<n>s", @filter["scope"]) if @filter["scope"]
        add.call("w.event_id = $%<n>s", @filter["event_id"]) if @filter["event_id"]
        if (type = @filter["type"])
          type.end_with?("*") ? add.call("starts_with(w.event_type, $%<n>s)", type.chomp("*")) : add.call("w.event_type = $%<n>s", type)
        end
        add.call("w.received_at >= $%<n>s::timestamptz", @filter["from"]) if @filter["from"]
        add.call("w.received_at < $%<n>s::timestamptz", @filter["to"]) if @filter["to"]
        add.call("strpos(lower(w.last_error), lower($%<n>s)) > 0", @filter["error"]) if @filter["error"]
      end
    end

    def encode_cursor(row)
      self.class.encode_cursor(row.values_at("received_at", "source_scope", "event_id"))
    end

    # [received_at, scope, event id] from a cursor this list wrote, else nil (the first page).
    def decode_cursor(cursor)
      self.class.decode_cursor(cursor, 3)
    end
  end
end
