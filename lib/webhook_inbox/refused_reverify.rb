# frozen_string_literal: true

require "json"

module WebhookInbox
  class Refused
    # Reverify - verifies an endpoint's kept refused deliveries again with its current
    # secrets, the signed timestamp checked against each row's received_at (never the time of
    # the reverify: a captured old delivery is refused as it would have been at receipt).
    # What verifies now is stored through the endpoint's Receiver (Receiver#reverify: the same
    # Inbox#insert, scope and key as the delivery would have had; a duplicate is fine) and its
    # row deleted; the rest stay. Rows older than the endpoint's age bound are deleted first.
    # One webhook_inbox_actions row records who, the endpoint and how many were admitted.
    #
    #   Refused::Reverify.new(exec: WebhookInbox.refused.exec).call(:stripe, actor: "ops@host")
    #   # => { admitted: 20, still_refused: 2, expired: 0, action_id: 7 }
    #
    # receiver_for: ->(scope) { the endpoint's Receiver for that scope } (default: the
    # configured endpoint's, with the row's scope). A StoreError (inbox down) stops it: the
    # rows not yet admitted stay for the next run.
    class Reverify
      PAGE = 100
      EXPIRE_SQL = "DELETE FROM webhook_inbox_refused WHERE endpoint = $1 AND received_at < now() - make_interval(secs => $2)"
      PAGE_SQL = <<~SQL.tr("\n", " ").freeze
        SELECT id, source_scope, encode(body, 'hex') AS body, request_headers::text AS request_headers,
               request_env::text AS request_env, extract(epoch FROM received_at)::text AS received_at
          FROM webhook_inbox_refused WHERE endpoint = $1 AND id > $2 ORDER BY id LIMIT #{PAGE}
      SQL
      DELETE_SQL = "DELETE FROM webhook_inbox_refused WHERE endpoint = $1 AND id = ANY($2::bigint[])"
      ACTION_SQL = "INSERT INTO webhook_inbox_actions (actor, action, filter, count) VALUES ($1, 'reverify', $2::jsonb, $3) RETURNING id"

      def initialize(exec:, configuration: WebhookInbox.configuration)
        raise ConfigurationError, "reverify needs a database (WebhookInbox.refused.exec)" unless exec

        @exec = exec
        @configuration = configuration
      end

      def call(endpoint, actor:, receiver_for: nil)
        endpoint = endpoint.to_s
        raise ConfigurationError, "no endpoint #{endpoint.inspect}" unless @configuration.endpoint_names.include?(endpoint.to_sym)

        receiver_for ||= ->(scope) { @configuration.receiver(endpoint.to_sym, scope: scope) }
        bounds = receiver_for.call(@configuration.endpoint_summary(endpoint)[:scope]).keep_refused || DEFAULT_BOUNDS
        expired = @exec.call("#{EXPIRE_SQL} RETURNING id", [endpoint, bounds[:age]]).size
        admitted, refused = admit_all(endpoint, receiver_for)
        id = @exec.call(ACTION_SQL, [actor.to_s.empty? ? "unknown" : actor.to_s[0, 200],
                                     JSON.generate(endpoint: endpoint, still_refused: refused, expired: expired),
                                     admitted]).first["id"].to_i
        { admitted: admitted, still_refused: refused, expired: expired, action_id: id }
      end

      private

      # Pages through the endpoint's rows by id; deletes each page's admitted rows once
      # they are in the inbox. Returns [admitted, still refused].
      def admit_all(endpoint, receiver_for)
        admitted = refused = 0
        after = 0
        loop do
          rows = @exec.call(PAGE_SQL, [endpoint, after])
          break if rows.empty?

          ids = rows.select { |row| admit?(row, receiver_for) }.map { |row| row["id"].to_i }
          @exec.call(DELETE_SQL, [endpoint, "{#{ids.join(',')}}"]) unless ids.empty?
          admitted += ids.size
          refused += rows.size - ids.size
          after = rows.last["id"].to_i
        end
        [admitted, refused]
      end

      def admit?(row, receiver_for)
        env = Reverify.env(row["request_headers"], row["request_env"])
        body = [row["body"]].pack("H*")
        result = receiver_for.call(row["source_scope"]).reverify(body, env, received_at: Time.at(row["received_at"].to_r))
        raise StoreError, (result.error || result.reason).to_s if result.http_status == 503 # the next run retries

        result.http_status == 200
      end

      # The Rack env a stored delivery came with: its kept headers as HTTP_* (Content-Type and
      # Content-Length without the prefix), its request line and a JWT provider's signature
      # header (Refused::JWT_SIGNATURE_HEADERS).
      def self.env(headers_text, env_text)
        env = {}
        headers = headers_text.to_s.empty? ? {} : JSON.parse(headers_text)
        line = env_text.to_s.empty? ? {} : JSON.parse(env_text)
        line.each { |k, v| env[k] = v.to_s if ENV_KEYS.include?(k) || JWT_SIGNATURE_HEADERS.value?(k) }
        headers.each do |name, value|
          key = name.to_s.upcase.tr("-", "_")
          env[%w[CONTENT_TYPE CONTENT_LENGTH].include?(key) ? key : "HTTP_#{key}"] = value.to_s
        end
        env["REQUEST_METHOD"] ||= "POST"
        env
      end
    end
  end
end
