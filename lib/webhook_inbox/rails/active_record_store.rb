# frozen_string_literal: true

module WebhookInbox
  # ActiveRecordStore - Inbox#insert through the application's ActiveRecord connection,
  # so the inbox row commits or rolls back with the caller's transaction (the
  # transactional-inbox pattern: receive_webhook(:stripe, transactional: true) { ... }).
  # Same statement, same receipts and same invalid-JSON quarantine as the native Inbox;
  # the insert runs in a savepoint so a payload jsonb refuses does not abort the caller's
  # transaction. Database failures raise StoreError. The request headers go to
  # request_headers when the table has that column (schema v5; checked once per store).
  class ActiveRecordStore
    SQL = <<~SQL.tr("\n", " ").freeze
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, raw_body, status, last_error, processed_at, request_headers)
      VALUES ($1, $2, $3, $4::jsonb, $5::bytea, $6::text, $7, CASE WHEN $6::text = 'quarantined' THEN now() END, $8::jsonb)
      ON CONFLICT (source_scope, event_id) DO NOTHING RETURNING 1
    SQL
    SQL_NO_HEADERS = SQL.sub(", request_headers)", ")").sub(", $8::jsonb)", ")").freeze

    def initialize(model: ::ActiveRecord::Base)
      @model = model
      @headers_column = nil # unknown until the first insert
    end

    def insert(source_scope:, event_id:, payload:, event_type: "", status: :pending, last_error: nil, raw: false,
               headers: nil)
      quarantined = status.to_sym == :quarantined
      stored_raw = raw
      headers = RequestHeaders.encode(headers, check: true)
      inserted =
        begin
          run(source_scope, event_id, event_type, payload, raw, quarantined, last_error, headers)
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

    private

    def run(scope, id, type, payload, raw, quarantined, last_error, headers)
      conn = @model.connection
      binds = [
        bind("source_scope", scope), bind("event_id", id), bind("event_type", type.to_s),
        bind("payload", raw ? nil : payload.to_s), binary("raw_body", raw ? payload.to_s : nil),
        bind("status", quarantined ? "quarantined" : "pending"), bind("last_error", last_error)
      ]
      with_headers = headers_column?(conn)
      binds << bind("request_headers", headers) if with_headers
      conn.transaction(requires_new: true) do
        conn.exec_query(with_headers ? SQL : SQL_NO_HEADERS, "WebhookInbox Insert", binds).rows.size == 1
      end
    end

    def headers_column?(conn)
      return @headers_column unless @headers_column.nil?

      @headers_column = conn.select_value(<<~SQL.squish, "WebhookInbox Schema") == 1
        SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('webhook_inbox') AND attname = 'request_headers' AND NOT attisdropped
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
