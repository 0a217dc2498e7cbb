# frozen_string_literal: true

module WebhookInbox
  # The event list (filters, keyset pages) and one event: its payload (redacted), every run
  # from attempt_log, its outcome, the effects it emitted and its Ruby handler runs
  # (EffectList.for_event); requeue or replay go through BulkController's confirmation with
  # the event's key as the filter.
  class EventsController < ApplicationController
    def index
      @list = EventList.new(params)
      limit = WebhookInbox.configuration.dashboard_page_size.to_i.clamp(1, 500)
      @events, @next_cursor = dashboard_connection { |c| @list.page(c, cursor: params[:cursor], limit: limit) }
    end

    def show
      @event = dashboard_connection do |c|
        c.select_one(<<~SQL.squish, "WebhookInbox event", [EventList.text(params, :scope).to_s, EventList.text(params, :id).to_s])
          SELECT source_scope, event_id, event_type, status, attempts, last_error, outcome, payload::text AS payload,
                 octet_length(raw_body) AS raw_bytes, attempt_log::text AS attempt_log, request_headers::text AS request_headers,
                 to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS received_at,
                 to_char(processed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS processed_at,
                 to_char(requeued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS requeued_at,
                 to_char(recovered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS recovered_at,
                 to_char(next_attempt_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS next_attempt_at
            FROM webhook_inbox WHERE source_scope = $1 AND event_id = $2
        SQL
      end
      return head(:not_found) unless @event

      @runs, @effects, @effects_more = dashboard_connection do |c|
        EffectList.for_event(c, @event["source_scope"], @event["event_id"])
      end

      @notice = take_notice
      view = PayloadView.new
      @payload = @event["payload"] && view.render(@event["payload"])
      @payload_cut = view.cut?
      @attempts = attempts(@event["attempt_log"])
      headers = @event["request_headers"] && JSON.parse(@event["request_headers"])
      @headers = headers.is_a?(Hash) ? Redactor.new.redact(headers).sort : nil # an object, unless written by hand
    end

    private

    # attempt_log's runs (objects), oldest first; none from a value written by hand that is
    # not an array of objects.
    def attempts(text)
      runs = text.to_s.empty? ? [] : JSON.parse(text)
      runs.is_a?(Array) ? runs.grep(Hash) : []
    rescue JSON::NestingError
      []
    end
  end
end
