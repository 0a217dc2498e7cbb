# frozen_string_literal: true

require "spec_helper"
require_relative "../support/verifier_helpers"
require_relative "../support/receiver_helpers"
require "json"
require "openssl"
require "base64"

# URL-signed providers (:twilio, :square, :hubspot; :hmac with {url}/{method}): where the
# URL comes from (public_url:, else the Rack env, never X-Forwarded-*), Twilio's sorted form
# and bodySHA256, HubSpot's unescaped URI. The SDK vectors of each provider are checked in
# verifier_providers_spec.rb (valid, tampered, wrong key, stale, replay).
RSpec.describe WebhookInbox::Verifier do
  include VerifierHelpers
  include ReceiverHelpers

  now = 1_700_000_000
  token = "twilio_auth_token"

  # Twilio's signature as its helpers compute it: URL, then each name+value sorted by name.
  def twilio_sig(token, url, params)
    Base64.strict_encode64(OpenSSL::HMAC.digest("SHA1", token, url + params.sort.map { |k, v| "#{k}#{v}" }.join))
  end

  let(:params) { { "CallSid" => "CA1", "From" => "+14158675310", "To" => "+18005551212", "Body" => "a+b & c=d 100%" } }
  let(:url) { "https://example.com/twilio/sms?tenant=7" }
  let(:body) { URI.encode_www_form(params) }
  let(:sig) { twilio_sig(token, url, params) }
  let(:form) { { "Content-Type" => "application/x-www-form-urlencoded", "X-Twilio-Signature" => sig } }

  describe ":twilio" do
    let(:v) { described_class.new(:twilio, secrets: [token]) }

    it "rebuilds the URL from the Rack env (scheme, host, path, query) when public_url: is not given" do
      ev = v.verify(body, rack_request(url, body, form), now: now)
      expect([ev.event_type, ev.timestamp]).to eq([nil, nil])
      expect(reason_of { v.verify(body, rack_request("https://example.com/twilio/voice?tenant=7", body, form), now: now) })
        .to eq(:signature_mismatch)
      expect(reason_of { v.verify(body, rack_request("https://example.com/twilio/sms?tenant=8", body, form), now: now) })
        .to eq(:signature_mismatch)
    end

    it "behind a TLS proxy verifies with public_url:, and never trusts X-Forwarded-* for the URL" do
      proxied = rack_request("http://app.internal:3000/twilio/sms?tenant=7", body, form)
      expect(reason_of { v.verify(body, proxied, now: now) }).to eq(:signature_mismatch)
      forwarded = proxied.merge("HTTP_X_FORWARDED_PROTO" => "https", "HTTP_X_FORWARDED_HOST" => "example.com")
      expect(reason_of { v.verify(body, forwarded, now: now) }).to eq(:signature_mismatch)
      behind = described_class.new(:twilio, secrets: [token], public_url: "https://example.com/twilio/sms")
      expect(behind.verify(body, proxied, now: now).provider).to eq(:twilio)
    end

    it "a replay with the pairs reordered or re-encoded verifies as the same event; a changed value does not verify" do
      first = v.verify(body, rack_request(url, body, form), now: now)
      reordered = params.to_a.reverse.map { |k, val| "#{k}=#{ERB::Util.url_encode(val)}" }.join("&")
      expect(reordered).not_to eq(body)
      expect(v.verify(reordered, rack_request(url, reordered, form), now: now).event_id).to eq(first.event_id)
      changed = URI.encode_www_form(params.merge("To" => "+18005551213"))
      expect(reason_of { v.verify(changed, rack_request(url, changed, form), now: now) }).to eq(:signature_mismatch)
    end

    it "a repeated name counts each value once, sorted (as Twilio's helpers do)" do
      pairs = [%w[b 2], %w[a 9], %w[a 1], %w[a 1]]
      raw = URI.encode_www_form(pairs)
      s = Base64.strict_encode64(OpenSSL::HMAC.digest("SHA1", token, "#{url}a1a9b2"))
      expect(v.verify(raw, rack_request(url, raw, form.merge("X-Twilio-Signature" => s)), now: now).provider).to eq(:twilio)
    end

    it "refuses a form with a malformed %-escape, and a plain Hash without public_url: (no URL to check)" do
      bad = "#{body}&x=%zz"
      expect(reason_of { v.verify(bad, rack_request(url, bad, form), now: now) }).to eq(:malformed_payload)
      expect { v.verify(body, form, now: now) }.to raise_error(WebhookInbox::ConfigurationError, /public_url/)
    end

    it "a JSON body is signed through the URL's bodySHA256: another body under the same URL is refused" do
      json = '{"Sid":"SM1"}'
      signed_url = "https://example.com/twilio/events?bodySHA256=#{OpenSSL::Digest::SHA256.hexdigest(json)}"
      h = { "Content-Type" => "application/json", "X-Twilio-Signature" => twilio_sig(token, signed_url, {}) }
      expect(v.verify(json, rack_request(signed_url, json, h), now: now).event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(json))
      expect(reason_of { v.verify('{"Sid":"SM2"}', rack_request(signed_url, '{"Sid":"SM2"}', h), now: now) })
        .to eq(:signature_mismatch)
    end

    it "validates public_url:" do
      expect { described_class.new(:twilio, secrets: [token], public_url: "example.com/x") }.to raise_error(WebhookInbox::ConfigurationError)
      expect { described_class.new(:twilio, secrets: [token], public_url: "https://example.com/x?y=1") }
        .to raise_error(WebhookInbox::ConfigurationError, /without query/)
      expect { described_class.new(:stripe, secrets: ["whsec_x"], public_url: "https://example.com/x") }
        .to raise_error(WebhookInbox::ConfigurationError, /sign the URL/)
    end

    it "the Receiver accepts a Twilio form delivery and stores it raw" do
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :twilio, secrets: [token], source_scope: "twilio:AC1:live", inbox: store,
                                     public_url: "https://example.com/twilio/sms")
      env = rack_request("http://127.0.0.1:3000/twilio/sms?tenant=7", body, form)
      expect(r.receive(body, env).http_status).to eq(200)
      expect(store.inserts.map { |i| [i[:payload], i[:raw]] }).to eq([[body, true]])
      expect(r.receive(body, env.merge("HTTP_X_TWILIO_SIGNATURE" => twilio_sig("other", url, params))).http_status).to eq(401)
    end
  end

  describe ":hubspot" do
    it "signs the method too, and refuses a timestamp outside 5 minutes either way" do
      secret = "hs_client_secret"
      b = '[{"eventId":1,"subscriptionType":"contact.creation"}]'
      ts = (now * 1000).to_s
      sign = ->(method, t) { Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", secret, "#{method}https://example.com/hs#{b}#{t}")) }
      v = described_class.new(:hubspot, secrets: [secret], public_url: "https://example.com/hs")
      env = ->(method, t) { { "REQUEST_METHOD" => method, "HTTP_X_HUBSPOT_SIGNATURE_V3" => sign.call(method, t), "HTTP_X_HUBSPOT_REQUEST_TIMESTAMP" => t } }
      expect(v.verify(b, env.call("POST", ts), now: now).timestamp).to eq(now)
      expect(reason_of { v.verify(b, env.call("POST", ts).merge("REQUEST_METHOD" => "PUT"), now: now) }).to eq(:signature_mismatch)
      early = ((now + 301) * 1000).to_s
      expect(reason_of { v.verify(b, env.call("POST", early), now: now) }).to eq(:timestamp_out_of_tolerance)
      expect(reason_of { v.verify(b, env.call("POST", ts).merge("HTTP_X_HUBSPOT_REQUEST_TIMESTAMP" => "soon"), now: now) })
        .to eq(:malformed_timestamp)
    end
  end

  describe ":square" do
    it "reads the signed event_id and type; the same body for another notification URL does not verify" do
      key = "sq_signature_key"
      b = '{"merchant_id":"M1","type":"payment.updated","event_id":"ev-1","data":{}}'
      h = { "REQUEST_METHOD" => "POST",
            "HTTP_X_SQUARE_HMACSHA256_SIGNATURE" => Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", key, "https://example.com/sq#{b}")) }
      ev = described_class.new(:square, secrets: [key], public_url: "https://example.com/sq").verify(b, h, now: now)
      expect([ev.event_id, ev.event_type]).to eq(%w[ev-1 payment.updated])
      expect(reason_of { described_class.new(:square, secrets: [key], public_url: "https://example.com/sq2").verify(b, h, now: now) })
        .to eq(:signature_mismatch)
    end
  end

  it ":hmac takes {method} and {url} in its template" do
    v = described_class.new(:hmac, secrets: ["k"], signature_header: "X-Sig", template: "{method} {url}\n{body}",
                                   public_url: "https://example.com/in")
    b = '{"id":"e1"}'
    h = { "REQUEST_METHOD" => "POST", "QUERY_STRING" => "a=1", "HTTP_X_SIG" => OpenSSL::HMAC.hexdigest("SHA256", "k", "POST https://example.com/in?a=1\n#{b}") }
    expect(v.verify(b, h, now: now).event_id).to eq("e1")
    expect(reason_of { v.verify(b, h.merge("QUERY_STRING" => "a=2"), now: now) }).to eq(:signature_mismatch)
  end
end
