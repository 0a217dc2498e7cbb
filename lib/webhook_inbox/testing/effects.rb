# frozen_string_literal: true

require "json"

module WebhookInbox
  module Testing
    # Effects - what the sidecar's deliverer does for a destination that is this app, done
    # synchronously in an integration test: every pending effect of the destination is signed
    # as the sidecar signs it (Standard Webhooks, webhook-id "<path> <operation id>"), POSTed through the
    # test's own session, and saved as the sidecar saves it: 2xx delivered; 408, 429 and 5xx
    # still pending with the attempt counted; any other status quarantined. Rows are read and
    # written on ActiveRecord's connection, so they roll back with the test.
    module Effects
      Delivery = Struct.new(:operation_id, :status, :body, keyword_init: true)

      PENDING_SQL = <<~SQL.tr("\n", " ").freeze
        SELECT operation_id, payload::text, source_scope FROM webhook_inbox_outbox
         WHERE destination = %s AND status = 'pending' ORDER BY created_at, operation_id
      SQL
      SAVE_SQL = <<~SQL.tr("\n", " ").freeze
        UPDATE webhook_inbox_outbox
           SET status = %s, attempts = attempts + 1, response_status = %d, response_excerpt = left(%s, 1000),
               last_error = %s, last_attempt_at = now(),
               processed_at = CASE WHEN %s = 'pending' THEN NULL ELSE now() END
         WHERE operation_id = %s AND source_scope = %s
      SQL

      module_function

      def pending(connection, destination)
        connection.uncached { connection.select_rows(format(PENDING_SQL, connection.quote(destination.to_s)), "webhook_inbox effects") }
      end

      # The effect is the one of operation_id in source_scope (the outbox's key, db/025).
      def save(connection, operation_id, status, body, source_scope: "")
        state = if status.between?(200, 299) then "delivered"
                elsif status == 408 || status == 429 || status >= 500 then "pending"
                else "quarantined"
                end
        error = state == "delivered" ? nil : "HTTP #{status} (test delivery)"
        connection.exec_update(format(SAVE_SQL, connection.quote(state), status, connection.quote(body.to_s),
                                      connection.quote(error), connection.quote(state), connection.quote(operation_id),
                                      connection.quote(source_scope.to_s)),
                               "webhook_inbox effects")
        connection.clear_query_cache
      end

      # The path part of to: (a path or URL), as the sidecar takes it from a destination URL.
      def path(to)
        path = to.to_s.sub(%r{\A[a-z][a-z0-9+.-]*://[^/?#]*}i, "").split(/[?#]/, 2).first.to_s
        path.start_with?("/") ? path : "/"
      end

      def secret(given)
        given || WebhookInbox.configuration.effect_secrets.first ||
          raise(ConfigurationError, "deliver_webhook_inbox_effects: no secret (pass secret: or set WEBHOOK_INBOX_EFFECT_SECRET " \
                                    "or c.effect_secrets, as for receive_effect)")
      end
    end
  end
end
