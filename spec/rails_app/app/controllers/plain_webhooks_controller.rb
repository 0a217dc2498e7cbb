# frozen_string_literal: true

# The baseline for bench/receive, written like the Didit article: Ruby HMAC,
# secure_compare, WebhookEvent.create!, RecordNotUnique treated as a duplicate.
class PlainWebhooksController < ActionController::API
  TOLERANCE = 300

  def create
    body = request.raw_post
    parts = request.headers["Stripe-Signature"].to_s.split(",").map { |kv| kv.split("=", 2) }
    timestamp = parts.find { |k, _| k == "t" }&.last.to_i
    signature = parts.find { |k, _| k == "v1" }&.last.to_s
    return head(:unauthorized) if signature.empty? || (Time.now.to_i - timestamp).abs > TOLERANCE

    expected = OpenSSL::HMAC.hexdigest("SHA256", ENV.fetch("STRIPE_WEBHOOK_SECRET"), "#{timestamp}.#{body}")
    return head(:unauthorized) unless ActiveSupport::SecurityUtils.secure_compare(expected, signature)

    payload = JSON.parse(body)
    WebhookEvent.create!(event_id: payload.fetch("id"), event_type: payload["type"], payload: payload)
    render json: { status: "accepted" }
  rescue ActiveRecord::RecordNotUnique
    render json: { status: "duplicate" }
  rescue JSON::ParserError, KeyError
    head :bad_request
  end
end
