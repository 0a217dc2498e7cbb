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
  #     def stripe_inline          # transactional inbox: the row and the block's writes
  #       receive_webhook(:stripe, transactional: true) do |receipt, event|   # commit together
  #         Order.find_by!(payment_intent: ...).mark_paid!
  #       end
  #     end
  #   end
  #
  # Renders the same statuses as WebhookInbox::Endpoint (the same Receiver does the work)
  # and returns the Receiver::Result. With transactional: true the insert goes through
  # ActiveRecord's connection inside ActiveRecord::Base.transaction, the block runs in that
  # transaction for a newly accepted event, and 200 is rendered only after the commit. If
  # the block raises, both roll back and the exception propagates (500: the sender retries).
  #
  # Including it also stops Rails from parsing the request body into params (and so from
  # logging the payload in "Parameters:"): include it in controllers that receive webhooks.
  module Controller
    include EffectReceiver # receive_effect(:name) { |effect| ... }: outbox effects run in Ruby

    JSON_CONTENT_TYPE = "application/json; charset=utf-8"

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

    def receive_in_transaction(receiver)
      result = nil
      ::ActiveRecord::Base.transaction do
        result = receive_once(receiver)
        raise ::ActiveRecord::Rollback unless result.http_status == 200

        yield result.receipt, result.event if block_given? && result.receipt.accepted?
      end
      result
    rescue ::ActiveRecord::ActiveRecordError => e # the commit itself failed: nothing stored
      Receiver::Result.new(http_status: 503, status: :unavailable, reason: :store_unavailable,
                           headers: { "Retry-After" => WebhookInbox.configuration.retry_after.to_s },
                           event: result&.event, error: e.class.name)
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
