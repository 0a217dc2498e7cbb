# frozen_string_literal: true

# VerifierHelpers - shared by the verifier specs: the reason a verification fails, or nil, and a
# recording store for the Receiver.
require "webhook_inbox/testing"

module VerifierHelpers
  def reason_of
    yield
    nil
  rescue WebhookInbox::VerificationError => e
    e.reason
  end

  # A PayPal secret "WEBHOOK_ID:CERT_ID:<PEM>" for a self-signed certificate of key valid
  # from..to (unix seconds), made by the testing kit.
  def paypal_secret(key, from:, to:, webhook_id: "8PT597110X687430LKGECATA", cert_id: "CERT-360caa42-fca2a594-a5cafa77")
    WebhookInbox::Testing::Signing::Keys.paypal_secret(WebhookInbox::Testing::Signing::PaypalKey.new(key, webhook_id, cert_id),
                                                      not_before: Time.at(from), not_after: Time.at(to))
  end

  # PayPal's headers for body, signed by the testing kit as PayPal signs: id|time|webhook id|CRC-32 of the body.
  def paypal_headers(body, key:, time:, hook: "8PT597110X687430LKGECATA", tid: "b2384410-f8d2-11ed-8b8f-3f1cf3ed7d15",
                     url: "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77")
    signing = WebhookInbox::Testing::Signing::PaypalKey.new(key, hook, url.split("/").last)
    WebhookInbox::Testing::Signing.delivery(:paypal, body, secret: signing, transmission_id: tid, transmission_time: time,
                                                           cert_url: url).headers.except("Content-Type")
  end

  # A store for Receiver specs that records each insert (keywords) and accepts it.
  def recording_store
    Class.new do
      attr_reader :inserts

      def initialize = @inserts = []

      def insert(**kw)
        @inserts << kw
        Struct.new(:status, :quarantined).new(:accepted, false)
      end
    end.new
  end
end
