# frozen_string_literal: true

module WebhookInbox
  # ActiveRecordStore - Inbox#insert through the application's ActiveRecord connection,
  # so the inbox row commits or rolls back with the caller's transaction (the
  # transactional-inbox pattern: receive_webhook(:stripe, transactional: true) { ... }).
  # Same statement, same receipts and same invalid-JSON quarantine as the native Inbox;
  # the insert runs in a savepoint so a payload jsonb refuses does not abort the caller's
  # transaction. Database failures raise StoreError. The request headers go to
  # request_headers when the table has that column (schema v5; checked once per store).
  #
  # insert_all stores a delivery's several events (Adyen's items) in one transaction.
  #
  # mark_done finishes an event in the caller's transaction (transactional: true with a
  # block: the block is the event's handler), as the sidecar's dispatch does.
  class ActiveRecordStore
    SQL = <<~SQL.tr("\n", " ").freeze
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, raw_body, status, last_error, processed_at, request_headers)
      VALUES ($1, $2, $3, $4::jsonb, $5::bytea, $6::text, $7, CASE WHEN $6::text = 'quarantined' THEN now() END, $8::jsonb)
      ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING 1
    SQL
    SQL_NO_HEADERS = SQL.sub(", request_headers)", ")").sub(", $8::jsonb)", ")").freeze
    # Schema v14: the ordering key and event time derived from the payload, as the native
    # store's insert does (ext/webhook_inbox/store.c).
    SQL_ORDERED = <<~SQL.tr("\n", " ").freeze
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, raw_body, status, last_error, processed_at,
                                 request_headers, ordering_key, ordering_at, next_attempt_at)
      SELECT $1, $2, $3, $4::jsonb, $5::bytea, $6::text, $7, CASE WHEN $6::text = 'quarantined' THEN now() END, $8::jsonb,
             o.key, o.at, least(now(), o.at)
        FROM (SELECT k.key, CASE WHEN k.key IS NOT NULL THEN coalesce(webhook_inbox_ordering_time($4::jsonb, $10), now()) END AS at
                FROM (SELECT webhook_inbox_ordering_key($4::jsonb, $9) AS key) k) o
      ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING 1
    SQL
    # Schema v30: the receipt span's traceparent too, kept only when valid (NULL otherwise).
    SQL_TRACED = SQL_ORDERED.sub("next_attempt_at)", "next_attempt_at, trace_context)")
                            .sub("least(now(), o.at)", "least(now(), o.at), webhook_inbox_trace_context($11)").freeze
    # What webhook_inbox_dispatch writes when a handler succeeds (db/005_history.sql): done,
    # the outcome, processed_at, last_error cleared, a 'done' attempt_log entry (schema v5 on).
    DONE_SQL = <<~SQL.tr("\n", " ").freeze
      UPDATE webhook_inbox SET status = 'done', outcome = $3, processed_at = clock_timestamp(), last_error = NULL,
        attempt_log = webhook_inbox_log_append(attempt_log, webhook_inbox_log_entry('done', $3, $4::float8))
      WHERE source_scope = $1 AND event_id = $2 AND status = 'pending' RETURNING 1
    SQL
    DONE_SQL_NO_LOG = DONE_SQL.sub(/,\s+attempt_log = .*?\)\)/, "").freeze

    def initialize(model: ::ActiveRecord::Base)
      @model = model
      @columns = {} # column name => present? (asked once per store)
    end

    def insert(source_scope:, event_id:, payload:, event_type: "", status: :pending, last_error: nil, raw: false,
               headers: nil, ordering: nil, trace: nil)
      quarantined = status.to_sym == :quarantined
      stored_raw = raw
      headers = RequestHeaders.encode(headers, check: true)
      inserted =
        begin
          run(source_scope, event_id, event_type, payload, raw, quarantined, last_error, headers, ordering, trace)
        rescue ::ActiveRecord::StatementInvalid => e
          raise StoreError, "#{e.cause.class}: #{e.cause&.message.to_s.lines.first&.strip}" unless !raw && data_exception?(e)

          stored_raw = quarantined = true
          run(source_scope, event_id, event_type, payload, true, true, last_error || Inbox::INVALID_JSON_REASON, nil)
        end
      Receipt.new(status: inserted ? :accepted : :duplicate, source_scope: source_scope, event_id: event_id,
                  stored_raw: stored_raw, quarantined: quarantined)
    rescue ::ActiveRecord::ConnectionNotEstablished, ::ActiveRecord::StatementInvalid => e
      raise StoreError, "#{e.class}: #{e.message.to_s.lines.first&.strip}"
    end

    # The events of one delivery (Hashes of #insert's keywords) in one transaction (the
    # caller's, when one is open): all commit together or none does. Returns their Receipts.
    def insert_all(rows)
      @model.transaction(requires_new: true) { rows.map { |r| insert(**r) } }
    rescue ::ActiveRecord::ConnectionNotEstablished, ::ActiveRecord::StatementInvalid => e
      raise StoreError, "#{e.class}: #{e.message.to_s.lines.first&.strip}"
    end

    # Marks the just-inserted pending row done with outcome (text) and the handler's
    # duration, in the caller's transaction: it commits or rolls back with the handler's
    # writes. Raises StoreError when the row is not pending (or the update fails).
    def mark_done(source_scope:, event_id:, outcome:, duration_ms:)
      conn = @model.connection
      logged = column?(conn, "attempt_log")
      binds = [bind("source_scope", source_scope), bind("event_id", event_id), bind("outcome", outcome.to_s)]
      binds << bind("duration_ms", duration_ms.to_f.round(3).to_s) if logged
      done = conn.exec_query(logged ? DONE_SQL : DONE_SQL_NO_LOG, "WebhookInbox Done", binds).rows.size == 1
      raise StoreError, "event #{event_id} is no longer pending: not marked done" unless done
    rescue ::ActiveRecord::ConnectionNotEstablished, ::ActiveRecord::StatementInvalid => e
      raise StoreError, "#{e.class}: #{e.message.to_s.lines.first&.strip}"
    end

    private

    def run(scope, id, type, payload, raw, quarantined, last_error, headers, ordering = nil, trace = nil)
      conn = @model.connection
      binds = [
        bind("source_scope", scope), bind("event_id", id), bind("event_type", type.to_s),
        bind("payload", raw ? nil : payload.to_s), binary("raw_body", raw ? payload.to_s : nil),
        bind("status", quarantined ? "quarantined" : "pending"), bind("last_error", last_error)
      ]
      with_headers = column?(conn, "request_headers")
      binds << bind("request_headers", headers) if with_headers
      ordered = with_headers && column?(conn, "ordering_key")
      binds << bind("ordering_key", ordering&.first) << bind("ordering_time", ordering&.last) if ordered
      traced = ordered && column?(conn, "trace_context")
      binds << bind("trace_context", trace.is_a?(String) && trace.bytesize == Tracing::TRACEPARENT_BYTES ? trace : nil) if traced
      sql = traced ? SQL_TRACED : ordered ? SQL_ORDERED : with_headers ? SQL : SQL_NO_HEADERS
      conn.transaction(requires_new: true) do
        conn.exec_query(sql, "WebhookInbox Insert", binds).rows.size == 1
      end
    end

    # Columns that came with schema v5 (request_headers, attempt_log), v14 (ordering_key) or v30 (trace_context):
    # absent before it.
    def column?(conn, name)
      return @columns[name] if @columns.key?(name)

      @columns[name] = conn.select_value(<<~SQL.squish, "WebhookInbox Schema", [bind("name", name)]) == 1
        SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('webhook_inbox') AND attname = $1 AND NOT attisdropped
      SQL
    end

    def data_exception?(error)
      defined?(::PG::DataException) && error.cause.is_a?(::PG::DataException)
    end

    def bind(name, value)
      ::ActiveRecord::Relation::QueryAttribute.new(name, value, ::ActiveRecord::Type::String.new)
    end

    def binary(name, value)
      ::ActiveRecord::Relation::QueryAttribute.new(name, value, ::ActiveRecord::Type::Binary.new)
    end
  end
end
