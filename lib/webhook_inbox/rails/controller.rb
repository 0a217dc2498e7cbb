# frozen_string_literal: true

module WebhookInbox
  # Controller - receive webhooks from any Rails controller action:
  #
  #   class WebhooksController < ActionController::API
  #     include WebhookInbox::Controller
  #
  #     def stripe
  #       receive_webhook(:stripe)   # an endpoint from WebhookInbox.configure
  #     end
  #
  #     def shop
  #       receive_webhook(:shopify, scope: "shopify:#{params[:shop_id]}:live", secrets: [...])
  #     end
  #
  #     def stripe_paid          # transactional: the block IS the event's handler
  #       receive_webhook(:stripe, transactional: true) do |receipt, event|
  #         order = Order.lock.find_by!(payment_intent: JSON.parse(event.body).dig("data", "object", "id"))
  #         order.update!(status: "paid") unless order.paid?
  #         "paid"                   # a String is kept as the event's outcome
  #       end
  #     end
  #   end
  #
  # Renders the same statuses as WebhookInbox::Endpoint (the same Receiver does the work)
  # and returns the Receiver::Result. With transactional: true the insert goes through
  # ActiveRecord's connection inside ActiveRecord::Base.transaction and 200 is rendered only
  # after the commit. With a block, the block is the event's handler: it runs once, for a
  # newly accepted event, in that transaction, and the row is marked done there too (status,
  # outcome, processed_at, an attempt_log entry: what the sidecar writes when a handler
  # succeeds), so the block's writes and the done row commit together and the sidecar never
  # runs the event (its route, or the lack of one, does not matter). A duplicate delivery
  # answers 200 "duplicate" without running the block; a concurrent one waits for the first
  # transaction and then does the same. A body stored quarantined (not JSON) does not run
  # it. A delivery of several events (Adyen's items) runs the block once per newly accepted
  # item, with that item's receipt and Event, all in the one transaction. If the block raises, both roll back and the exception propagates as it is (Rails
  # answers 500, or 404 for RecordNotFound: the sender retries); ActiveRecord::Rollback in the block raises WebhookInbox::Error, for the
  # same answer. A failing insert, done mark or commit answers 503. Without a block the
  # committed row is pending for the sidecar as usual.
  #
  # Including it also stops Rails from parsing the request body into params (and so from
  # logging the payload in "Parameters:"): include it in controllers that receive webhooks.
  module Controller
    include EffectReceiver # receive_effect(:name) { |effect| ... }: outbox effects run in Ruby

    JSON_CONTENT_TYPE = "application/json; charset=utf-8"
    # The outcome of an event a transactional block handled, when the block returns no String.
    TRANSACTIONAL_OUTCOME = "handled in transaction"

    private

    # The body is the signed payload: never parsed into params, never logged as params.
    def process_action(*)
      request.env["action_dispatch.request.request_parameters"] ||= {}
      super
    end

    def receive_webhook(name, scope: nil, secrets: nil, transactional: false, **options, &block)
      receiver = WebhookInbox.configuration.receiver(name, scope: scope, secrets: secrets,
                                                           transactional: transactional, **options)
      result = transactional ? receive_in_transaction(receiver, &block) : receive_once(receiver)
      render_webhook_result(result)
      result
    end

    def receive_once(receiver)
      raw = request.env["RAW_POST_DATA"]
      raw ? receiver.receive(raw, request.env) : receiver.call(request.env)
    end

    def receive_in_transaction(receiver, &handler)
      result = nil
      in_block = finished = false
      ::ActiveRecord::Base.transaction do
        result = receive_once(receiver)
        raise ::ActiveRecord::Rollback unless result.http_status == 200

        result.each_stored do |receipt, event|
          next unless handler && receipt.accepted? && !receipt.quarantined

          t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          in_block = true
          outcome = yield receipt, event
          in_block = false
          mark_handled(receiver.inbox, receipt, outcome, (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000)
        end
        finished = true
      end
      # The block raised ActiveRecord::Rollback: nothing was stored, so a 200 would lose the event.
      raise Error, "receive_webhook(transactional: true): the block rolled back; nothing stored (answered 500: the sender retries)" if result.http_status == 200 && !finished

      result
    rescue ::ActiveRecord::ActiveRecordError, StoreError => e
      raise if in_block # the block's own error (RecordNotFound, RecordInvalid...): 500, retried

      # the insert, the done mark or the commit failed: nothing stored
      Receiver::Result.new(http_status: 503, status: :unavailable, reason: :store_unavailable,
                           headers: { "Retry-After" => WebhookInbox.configuration.retry_after.to_s },
                           event: result&.event, error: e.class.name)
    end

    # The block handled the event: its row is done in the same transaction (outcome: the
    # block's String value, else TRANSACTIONAL_OUTCOME), so the sidecar never claims it.
    def mark_handled(store, receipt, outcome, duration_ms)
      store.mark_done(source_scope: receipt.source_scope, event_id: receipt.event_id,
                      outcome: outcome.is_a?(String) ? outcome : TRANSACTIONAL_OUTCOME, duration_ms: duration_ms)
    end

    # The body is already JSON (and for accepted/duplicate a prebuilt String): set it
    # directly instead of going through render's renderer and option handling.
    def render_webhook_result(result)
      headers = response.headers
      result.headers&.each { |k, v| headers[k] = v }
      headers["Cache-Control"] = "no-store"
      self.status = result.http_status
      self.content_type = JSON_CONTENT_TYPE
      self.response_body = result.body
    end
  end
end
