# frozen_string_literal: true

module WebhookInbox
  # Deliveries refused for a signature or secret mismatch, or a PayPal certificate that could
  # not be fetched, and kept aside (endpoints with keep_refused: webhook_inbox_refused; never
  # processed): the list, newest first, by
  # endpoint; one delivery (its headers and body redacted); and reverify (POST, CSRF-checked),
  # which verifies an endpoint's kept deliveries with its current secrets at their receipt
  # time, admits the ones that verify into the inbox and records the action with the actor.
  class RefusedController < ApplicationController
    KEYS = %w[endpoint].freeze
    # What each Refused::REASONS value means, as the list explains it; reverify takes every one.
    REASON_NOTES = {
      "signature_mismatch" => "no secret the endpoint had signs it",
      "no_secret" => "the endpoint had no secret",
      "unknown_key" => "it names a key the endpoint did not have (PayPal: no certificate at its URL)",
      "certificate_unavailable" => "PayPal's certificate could not be fetched (answered 503: PayPal retries; " \
                                   "kept as unknown_key before schema v20)"
    }.freeze
    ENDPOINT = /\A[A-Za-z0-9_]{1,200}\z/.freeze
    COLUMNS = <<~SQL.squish
      id, endpoint, source_scope, provider, reason, octet_length(body) AS bytes,
      to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS received_at
    SQL

    def index
      @notice = take_notice
      @filter = EventList.read_filter(params, KEYS, [], "endpoint" => ENDPOINT)
      before = cursor
      limit = WebhookInbox.configuration.dashboard_page_size.to_i.clamp(1, 500)
      @rows = dashboard_connection do |c|
        c.select_all(<<~SQL.squish, "WebhookInbox refused", [@filter["endpoint"], before, limit + 1]).to_a
          SELECT #{COLUMNS} FROM webhook_inbox_refused
           WHERE ($1::text IS NULL OR endpoint = $1) AND ($2::bigint IS NULL OR id < $2)
           ORDER BY id DESC LIMIT $3
        SQL
      end
      @next_cursor = @rows.size > limit ? @rows[limit - 1]["id"] : nil
      @rows = @rows.first(limit)
      @endpoints = WebhookInbox.configuration.endpoint_names.map(&:to_s)
    end

    def show
      id = EventList.text(params, :id).to_s
      raise EventList::BadFilter, "id: not a kept delivery's number" unless id.match?(/\A\d{1,18}\z/)

      @row = dashboard_connection do |c|
        c.select_one("SELECT #{COLUMNS}, request_headers::text AS request_headers, encode(body, 'hex') AS body_hex " \
                     "FROM webhook_inbox_refused " \
                     "WHERE id = $1", "WebhookInbox refused", [id.to_i])
      end
      return head(:not_found) unless @row

      headers = @row["request_headers"] && JSON.parse(@row["request_headers"])
      @headers = headers.is_a?(Hash) ? Redactor.new.redact(headers).sort : nil
      @body = body_view([@row["body_hex"]].pack("H*"))
    end

    def reverify
      name = EventList.read_filter(params, KEYS, [], "endpoint" => ENDPOINT)["endpoint"]
      unless name && WebhookInbox.configuration.endpoint_names.map(&:to_s).include?(name)
        return render(plain: "endpoint: not a configured endpoint", status: :unprocessable_entity)
      end

      r = Refused::Reverify.new(exec: Refused.active_record_exec).call(name, actor: dashboard_actor)
      notice!("Reverified #{name}: #{r[:admitted]} admitted to the inbox, #{r[:still_refused]} still refused" \
              "#{r[:expired].positive? ? ", #{r[:expired]} past the age bound deleted" : ''} (action ##{r[:action_id]}).")
      redirect_to refused_index_path(endpoint: name)
    rescue StoreError
      render plain: "the inbox is unavailable: nothing more was admitted; try again", status: :service_unavailable
    rescue ConfigurationError => e # the endpoint's settings (never a secret in the message)
      render plain: "cannot reverify: #{e.message}", status: :unprocessable_entity
    end

    private

    # The id below which the next page starts (digits), or nil for the first page.
    def cursor
      v = EventList.text(params, :before).to_s
      return nil if v.empty?
      raise EventList::BadFilter, "before: not a page cursor" unless v.match?(/\A\d{1,18}\z/)

      v.to_i
    end

    # The body as the page shows it: redacted JSON (PayloadView), else nil (not JSON: only its size).
    def body_view(bytes)
      text = bytes.dup.force_encoding(Encoding::UTF_8)
      return nil unless text.valid_encoding?

      PayloadView.new.render(text)
    rescue JSON::ParserError
      nil
    end
  end
end
