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
  class EventList
    STATUSES = %w[pending retrying done quarantined].freeze
    KEYS = %w[status scope event_id type from to error].freeze
    COLUMNS = <<~SQL.squish
      w.source_scope, w.event_id, w.event_type, w.status, w.attempts, w.last_error, w.outcome,
      to_char(w.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS received_at,
      to_char(w.processed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS processed_at
    SQL

    attr_reader :filter

    # params: a Hash-like of strings; unknown keys, bad statuses and unparsable times are dropped.
    def initialize(params)
      @filter = {}
      KEYS.each do |k|
        v = params[k].to_s.strip
        next if v.empty?

        v = parse_time(v) if %w[from to].include?(k)
        next if v.nil? || (k == "status" && !STATUSES.include?(v))

        @filter[k] = v
      end
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
      [rows, more ? encode_cursor(rows.last) : nil]
    end

    # The filter for webhook_inbox_requeue / _count (status left out: the action decides it).
    def to_requeue_filter
      @filter.except("status")
    end

    # The action a bulk change of this list would be: requeue (quarantined), replay (done), or nil.
    def bulk_action
      { "quarantined" => "requeue", "done" => "replay" }[@filter["status"]]
    end

    def to_params
      @filter.dup
    end

    private

    # [SQL fragments with $n placeholders, their values]: fixed text, values only as binds.
    def conditions
      where = []
      binds = []
      add = lambda do |fragment, value|
        binds << value
        where << format(fragment, n: binds.size)
      end
      case @filter["status"]
      when "retrying" then add.call("w.status = $%<n>s AND w.attempts > 0", "pending")
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
      [where, binds]
    end

    # ISO 8601 or the browser's datetime-local ("2026-01-02T03:04"), read as UTC; nil if neither.
    def parse_time(text)
      text = "#{text}:00" if text.match?(/\A\d{4}-\d\d-\d\dT\d\d:\d\d\z/)
      text = "#{text}Z" if text.match?(/\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\z/)
      Time.iso8601(text).utc.iso8601(6)
    rescue ArgumentError
      nil
    end

    def encode_cursor(row)
      Base64.urlsafe_encode64(JSON.generate(row.values_at("received_at", "source_scope", "event_id")), padding: false)
    end

    def decode_cursor(cursor)
      return nil if cursor.to_s.empty?

      values = JSON.parse(Base64.urlsafe_decode64(cursor.to_s))
      values.is_a?(Array) && values.size == 3 && values.all?(String) && Time.iso8601(values[0]) ? values : nil
    rescue ArgumentError, JSON::ParserError
      nil
    end
  end
end
