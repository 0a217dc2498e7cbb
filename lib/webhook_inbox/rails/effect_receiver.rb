# frozen_string_literal: true

require "json"

module WebhookInbox
  # Effect - one outbox effect the sidecar delivered to this app (db/006_outbox.sql):
  # operation_id is the webhook-id it signed (webhook_inbox_outbox.operation_id), payload the
  # parsed JSON it carried. #inspect never prints the payload.
  Effect = Struct.new(:name, :operation_id, :payload, :body, keyword_init: true) do
    def inspect
      "#<WebhookInbox::Effect name=#{name.inspect} operation_id=#{operation_id.inspect} body=(#{body.to_s.bytesize} bytes)>"
    end
    alias_method :to_s, :inspect
  end

  # Raised by a receive_effect block to refuse an effect for good: answered 422, and the
  # sidecar quarantines it (with the message in its response excerpt) instead of retrying.
  class EffectRejected < Error; end

  # EffectReceiver - receive_effect for controllers (included by WebhookInbox::Controller):
  # the Rails app as an outbox destination, for side effects that must run in Ruby (mailers,
  # SDKs). The sidecar signs each delivery with Standard Webhooks, webhook-id
  # "<destination path> <operation id>": every endpoint shares one secret, so the signed id
  # names the endpoint, and an effect for /effects/a is refused at /effects/b (401
  # :wrong_endpoint) instead of running b's block with a's payload. The path compared is
  # request.path; behind a proxy that rewrites paths pass endpoint: "/the/path/the/sidecar/posts/to".
  #
  #   class EffectsController < ActionController::API
  #     include WebhookInbox::Controller
  #
  #     def send_receipt
  #       receive_effect(:send_receipt) do |effect|
  #         ReceiptMailer.with(payment_id: effect.payload["payment_id"]).receipt.deliver_now
  #         Payment.find_by!(payment_id: effect.payload["payment_id"]).update!(receipt_sent_at: Time.current)
  #       end
  #     end
  #   end
  #
  # The block runs once per operation id: it runs inside an ActiveRecord transaction that
  # first inserts the operation id into webhook_inbox_effects_received, so its database
  # writes and that row commit together. A redelivery (the sidecar died before saving the
  # 200, or a lost answer) finds the row and is answered 200 "duplicate" without running the
  # block; a concurrent one waits for the first transaction's outcome. Answers: 200
  # done/duplicate; 401 a bad signature, a stale timestamp or another endpoint's effect;
  # 400 a body that is not JSON;
  # 422 the block raised EffectRejected (quarantined); any other exception propagates (500:
  # the sidecar retries with backoff, and the block's writes were rolled back). Work the
  # block does outside the database (an email) is not rolled back: it is at least once, so
  # pass effect.operation_id to APIs that take an idempotency key.
  #
  # Secrets: secrets: or WebhookInbox.configuration.effect_secrets (default: the
  # WEBHOOK_INBOX_EFFECT_SECRET environment variable), "whsec_..." as the sidecar's
  # WEBHOOK_INBOX_DEST_<NAME>_SECRET.
  module EffectReceiver
    DEDUPE_SQL = <<~SQL.tr("\n", " ").freeze
      INSERT INTO webhook_inbox_effects_received (operation_id, name) VALUES ($1, $2)
      ON CONFLICT (operation_id) DO NOTHING RETURNING 1
    SQL

    private

    def receive_effect(name, secrets: nil, tolerance: Verifier::DEFAULT_TOLERANCE, endpoint: nil)
      raise ArgumentError, "receive_effect needs a block" unless block_given?

      raw = request.raw_post.to_s
      event = WebhookInbox.configuration.effect_verifier(secrets, tolerance).verify(raw, request.env)
      operation_id = effect_operation_id(event.event_id, endpoint || request.path)
      effect = Effect.new(name: name.to_sym, operation_id: operation_id, payload: JSON.parse(raw), body: raw)
      outcome = ::ActiveRecord::Base.transaction do
        fresh = claim_effect(effect)
        yield effect if fresh
        fresh ? "done" : "duplicate"
      end
      render_effect(200, status: outcome)
    rescue VerificationError => e
      render_effect(401, status: "rejected", reason: e.reason)
    rescue JSON::ParserError
      render_effect(400, status: "rejected", reason: "malformed_payload")
    rescue EffectRejected => e
      render_effect(422, status: "rejected", reason: e.message)
    end

    # The operation id from a signed webhook-id "<path> <operation id>", when path is this
    # endpoint's; else VerificationError :wrong_endpoint.
    def effect_operation_id(webhook_id, path)
      prefix = "#{path} "
      unless webhook_id.start_with?(prefix) && webhook_id.bytesize > prefix.bytesize
        raise VerificationError.new(:wrong_endpoint, "the effect was signed for another endpoint")
      end

      webhook_id.byteslice(prefix.bytesize..)
    end

    def claim_effect(effect)
      binds = [::ActiveRecord::Relation::QueryAttribute.new("operation_id", effect.operation_id, ::ActiveRecord::Type::String.new),
               ::ActiveRecord::Relation::QueryAttribute.new("name", effect.name.to_s, ::ActiveRecord::Type::String.new)]
      ::ActiveRecord::Base.connection.exec_query(DEDUPE_SQL, "WebhookInbox Effect", binds).rows.size == 1
    end

    def render_effect(status, body)
      response.headers["Cache-Control"] = "no-store"
      self.status = status
      self.content_type = "application/json; charset=utf-8"
      self.response_body = JSON.generate(body)
    end
  end
end
