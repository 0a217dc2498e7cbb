# frozen_string_literal: true

require "spec_helper"
require_relative "../support/verifier_helpers"
require "json"
require "openssl"
require "base64"
require "uri"
require "securerandom"

# Identity from signed content, per provider (issue 27): two requests that verify with the same
# signed content are one event whatever their unsigned bytes; a challenge answer never verifies
# as a delivery; signatures only in the encoding the provider's SDK accepts; SharedKey Twilio.
RSpec.describe WebhookInbox::Verifier do
  include VerifierHelpers

  now = 1_700_000_000

  def sha256(s) = OpenSSL::Digest::SHA256.hexdigest(s)

  # Every byte as %XX: the same decoded form value, other bytes on the wire.
  def escape_all(s) = s.bytes.map { |b| format("%%%02X", b) }.join

  describe ":paddle_classic: the decoded alert_id, else the hash of the serialized signed fields" do
    let(:rsa) { OpenSSL::PKey::RSA.new(2048) }
    let(:verifier) { described_class.new(:paddle_classic, secrets: [rsa.public_to_pem.strip]) }
    let(:fields) do
      { "alert_name" => "subscription_created", "alert_id" => "112345", "passthrough" => "a b&c=é+ü", "status" => "active" }
    end

    def php_serialize(h) = "a:#{h.size}:{#{h.sort.map { |k, v| %(s:#{k.bytesize}:"#{k}";s:#{v.bytesize}:"#{v}";) }.join}}"
    def signature(h) = Base64.strict_encode64(rsa.sign("SHA1", php_serialize(h)))

    # The pairs in the order given, each "name=value" already encoded, then p_signature.
    def wire(h, pairs) = (pairs + ["p_signature=#{URI.encode_www_form_component(signature(h))}"]).join("&")

    def encoded(h) = h.map { |k, v| "#{k}=#{URI.encode_www_form_component(v)}" }

    it "is the decoded alert_id however the form escapes or orders it (alert_id=%3112345 is alert 112345)" do
      plain = wire(fields, encoded(fields))
      escaped = wire(fields, encoded(fields).map { |p| p.sub("alert_id=112345", "alert_id=%3112345") })
      reordered = wire(fields, encoded(fields).reverse.map { |p| p.sub("alert_name=subscription_created", "alert%5Fname=subscription%5Fcreated") })
      spaced = wire(fields, encoded(fields).map { |p| p.start_with?("passthrough=") ? "passthrough=#{escape_all(fields["passthrough"])}" : p })
      events = [plain, escaped, reordered, spaced].map { |b| verifier.verify(b, {}, now: now) }
      expect(events.map { |e| [e.event_id, e.event_type] }.uniq).to eq([%w[112345 subscription_created]])
    end

    it "without an alert_id, is the SHA-256 of the serialized signed fields, not of the raw form" do
      f = fields.except("alert_id")
      plain = wire(f, encoded(f))
      reordered = wire(f, encoded(f).reverse.map { |p| p.sub("status=active", "status=%61ctive") })
      ids = [plain, reordered].map { |b| verifier.verify(b, {}, now: now).event_id }
      expect(ids).to eq([sha256(php_serialize(f))] * 2)
      expect(ids.first).not_to eq(sha256(plain))
    end

    it "the Receiver stores one alert sent three ways once" do
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :paddle_classic, secrets: [rsa.public_to_pem.strip], source_scope: "paddle:v1", inbox: store)
      env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/x-www-form-urlencoded" }
      [encoded(fields), encoded(fields).reverse, encoded(fields).map { |p| p.sub("alert_id=1", "alert_id=%31") }].each do |pairs|
        expect(r.receive(wire(fields, pairs), env).http_status).to eq(200)
      end
      expect(store.inserts.map { |i| i[:event_id] }.uniq).to eq(["112345"])
    end

    it "refuses an alert_id too long to be an id rather than hashing it" do
      long = fields.merge("alert_id" => "1" * 200)
      expect(reason_of { verifier.verify(wire(long, encoded(long)), {}, now: now) }).to eq(:malformed_payload)
    end
  end

  describe ":braintree" do
    let(:xml) { %(<notification><timestamp type="datetime">2023-11-14T22:13:20Z</timestamp><kind>check</kind><subject><check type="boolean">true</check></subject></notification>) }
    let(:payload) { Base64.encode64(xml) } # ends in "\n", as Braintree sends it
    let(:verifier) { described_class.new(:braintree, secrets: ["pub_new:priv_new"]) }

    def bt_pair(payload) = "pub_new|#{OpenSSL::HMAC.hexdigest("SHA1", OpenSSL::Digest::SHA1.digest("priv_new"), payload)}"
    def form(sig, pay) = URI.encode_www_form([["bt_signature", sig], ["bt_payload", pay]])

    it "is one event with or without the trailing newline the signature tolerates, and however the form escapes it" do
      sig = bt_pair(payload)
      bodies = [form(sig, payload), form(sig, payload.chomp), "bt_signature=#{escape_all(sig)}&bt_payload=#{escape_all(payload)}"]
      ids = bodies.map { |b| verifier.verify(b, {}, now: now).event_id }
      expect(ids).to eq([sha256(payload)] * 3)
    end

    it "signed without the newline: the id is of what was signed" do
      bare = payload.delete("\n")
      expect(verifier.verify(form(bt_pair(bare), bare), {}, now: now).event_id).to eq(sha256(bare))
    end

    it "never takes a bt_challenge answer as a delivery signature (the answer is an HMAC under the same key)" do
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :braintree, secrets: ["pub_new:priv_new"], source_scope: "bt:m1", inbox: store)
      env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/x-www-form-urlencoded" }
      (20..32).each do |len|
        challenge = SecureRandom.hex(16)[0, len]
        answer = verifier.braintree_challenge(challenge)
        expect(answer).to eq(bt_pair(challenge)) # the oracle: a valid pair over the challenge
        expect(reason_of { verifier.verify(form(answer, challenge), {}, now: now) }).to eq(:malformed_payload)
        expect(r.receive(form(answer, challenge), env).http_status).to eq(400)
      end
      expect(store.inserts).to be_empty
    end

    it "refuses a signed payload that is not a <notification> document" do
      other = Base64.encode64("<other><kind>check</kind></other>")
      expect(reason_of { verifier.verify(form(bt_pair(other), other), {}, now: now) }).to eq(:malformed_payload)
      declared = Base64.encode64(%(<?xml version="1.0" encoding="UTF-8"?>\n#{xml}))
      expect(verifier.verify(form(bt_pair(declared), declared), {}, now: now).event_type).to eq("check")
    end

    it "computes one HMAC per secret however many pairs name it (a 1 MiB form of 9k pairs took 5 s CPU)" do
      body = form(([bt_pair(payload).sub(/\|.*/, "|#{"0" * 40}")] * 9000).join("&"), Base64.encode64("<notification>#{"x" * 300_000}</notification>"))
      big = described_class.new(:braintree, secrets: ["pub_new:priv_new"], max_body_bytes: 1 << 20)
      t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
      expect(reason_of { big.verify(body, {}, now: now) }).to eq(:signature_mismatch)
      expect(Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0).to be < 0.5
    end

    it "refuses an upper-case hex pair (the SDKs compare the lowercase string)" do
      pub, hex = bt_pair(payload).split("|")
      expect(reason_of { verifier.verify(form("#{pub}|#{hex.upcase}", payload), {}, now: now) }).to eq(:signature_mismatch)
    end
  end

  describe ":coinbase_commerce" do
    let(:verifier) { described_class.new(:coinbase_commerce, secrets: ["cc_secret"]) }

    def delivery(id, attempt)
      %({"attempt_number":#{attempt},"event":{"id":"f8c3ee2b","resource":"event","type":"charge:confirmed","data":{"code":"AB"}},"id":"#{id}","scheduled_for":"2023-11-14T22:13:20Z"})
    end

    it "keys by event.id: two deliveries (attempts) of one event are one event" do
      ids = [delivery("del_1", 1), delivery("del_2", 2)].map do |b|
        verifier.verify(b, { "X-CC-Webhook-Signature" => OpenSSL::HMAC.hexdigest("SHA256", "cc_secret", b) }, now: now)
      end
      expect(ids.map { |e| [e.event_id, e.event_type] }.uniq).to eq([%w[f8c3ee2b charge:confirmed]])
    end
  end

  describe "signature encoding as the SDKs accept it" do
    it "refuses upper-case hex where the SDK compares the lowercase string; Discord (hex-decoded) takes either" do
      body = '{"id":"evt_1","type":"x"}'
      mac = OpenSSL::HMAC.hexdigest("SHA256", "k", "#{now}.#{body}")
      stripe = described_class.new(:stripe, secrets: ["k"])
      expect(stripe.verify(body, { "Stripe-Signature" => "t=#{now},v1=#{mac}" }, now: now).event_id).to eq("evt_1")
      expect(reason_of { stripe.verify(body, { "Stripe-Signature" => "t=#{now},v1=#{mac.upcase}" }, now: now) })
        .to eq(:malformed_signature)
      { paddle: ["Paddle-Signature", ->(m) { "ts=#{now};h1=#{m}" }, "#{now}:#{body}"],
        slack: ["X-Slack-Signature", ->(m) { "v0=#{m}" }, "v0:#{now}:#{body}"],
        razorpay: ["X-Razorpay-Signature", ->(m) { m }, body],
        coinbase_commerce: ["X-CC-Webhook-Signature", ->(m) { m }, body] }.each do |name, (header, shape, signed)|
        v = described_class.new(name, secrets: ["k"])
        m = OpenSSL::HMAC.hexdigest("SHA256", "k", signed)
        h = { header => shape.call(m), "X-Slack-Request-Timestamp" => now.to_s }
        expect(reason_of { v.verify(body, h, now: now) }).to be_nil, name.to_s
        expect(reason_of { v.verify(body, h.merge(header => shape.call(m.upcase)), now: now) }).to eq(:malformed_signature), name.to_s
      end
      key = OpenSSL::PKey.generate_key("ED25519")
      pub = key.public_to_der[-32..].unpack1("H*")
      sig = key.sign(nil, "#{now}#{body}").unpack1("H*")
      discord = described_class.new(:discord, secrets: [pub])
      %w[downcase upcase].each do |c|
        h = { "X-Signature-Ed25519" => sig.public_send(c), "X-Signature-Timestamp" => now.to_s }
        expect(reason_of { discord.verify(body, h, now: now) }).to be_nil
      end
    end
  end

  describe ":twilio SharedKey (X-Twilio-Webhooks-Signature-Settings names the algorithm)" do
    vectors = JSON.parse(File.read(File.expand_path("../fixtures/vectors/sdk-signatures.json", __dir__)))["cases"]
    shared = vectors.select { |c| c["name"].start_with?("SharedKey") }
    form = shared.find { |c| c["headers"]["Content-Type"].include?("form") }
    token_case = vectors.find { |c| c["provider"] == "twilio" && c["name"] == "form" }
    let(:public_url) { form["url"].split("?", 2).first }
    let(:verifier) { described_class.new(:twilio, secrets: [form["secret"]], public_url: public_url) }

    def env(c, headers) = headers.to_h { |k, v| ["HTTP_#{k.upcase.tr("-", "_")}", v] }
                                 .merge("REQUEST_METHOD" => "POST", "QUERY_STRING" => c["url"].split("?", 2)[1].to_s)

    it "has the twilio SDK's vectors" do
      expect(shared.size).to eq(2)
    end

    it "verifies the SDK's HMAC_SHA256 signature with the shared key configured as a secret, and with the auth token beside it" do
      expect(reason_of { verifier.verify(form["body"], env(form, form["headers"]), now: now) }).to be_nil
      both = described_class.new(:twilio, secrets: [token_case["secret"], form["secret"]], public_url: public_url)
      expect(reason_of { both.verify(form["body"], env(form, form["headers"]), now: now) }).to be_nil
      expect(reason_of { both.verify(token_case["body"], env(token_case, token_case["headers"]), now: now) }).to be_nil
      lower = form["headers"].merge("X-Twilio-Webhooks-Signature-Settings" => "algorithm = hmac_sha256 ,key=x")
      expect(reason_of { verifier.verify(form["body"], env(form, lower), now: now) }).to be_nil # the SDK upper-cases it
    end

    it "refuses the signature under another algorithm than the header names, an unknown one, or without the header" do
      h = form["headers"]
      { "key=k,algorithm=HMAC_SHA1" => :malformed_signature, "key=k,algorithm=HMAC_SHA512" => :malformed_signature,
        "key=k" => :malformed_signature, "" => :malformed_signature }.each do |settings, reason|
        expect(reason_of { verifier.verify(form["body"], env(form, h.merge("X-Twilio-Webhooks-Signature-Settings" => settings)), now: now) })
          .to eq(reason), settings.inspect
      end
      expect(reason_of { verifier.verify(form["body"], env(form, h.except("X-Twilio-Webhooks-Signature-Settings")), now: now) })
        .to eq(:malformed_signature)
      # an HMAC-SHA1 under the shared key, sent as HMAC_SHA256: refused
      sha1 = Base64.strict_encode64(OpenSSL::HMAC.digest("SHA1", form["secret"], "x"))
      expect(reason_of { verifier.verify(form["body"], env(form, h.merge("X-Twilio-Signature" => sha1)), now: now) })
        .to eq(:malformed_signature)
    end

    it "the auth token's HMAC_SHA1 signature is refused when the header claims HMAC_SHA256" do
      v = described_class.new(:twilio, secrets: [token_case["secret"]], public_url: token_case["url"].split("?", 2).first)
      h = token_case["headers"].merge("X-Twilio-Webhooks-Signature-Settings" => "key=k,algorithm=HMAC_SHA256")
      expect(reason_of { v.verify(token_case["body"], env(token_case, h), now: now) }).to eq(:malformed_signature)
    end

    it "counts each configured secret once" do
      expect(described_class.new(:twilio, secrets: %w[a b]).secret_count).to eq(2)
    end
  end

  describe "signed forms of more than 4096 fields (Rack's params_limit)" do
    it "are refused before any sort, for Twilio and Paddle Classic" do
      tw = described_class.new(:twilio, secrets: ["t"], public_url: "https://example.com/t")
      env = { "REQUEST_METHOD" => "POST", "HTTP_X_TWILIO_SIGNATURE" => Base64.strict_encode64("\0" * 20) }
      expect(reason_of { tw.verify("a=&" * 4096, env, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { tw.verify("a=&" * 4097, env, now: now) }).to eq(:malformed_payload)
      pc = described_class.new(:paddle_classic, secrets: [OpenSSL::PKey::RSA.new(2048).public_to_pem.strip])
      fields = (0..4096).map { |i| "f#{i}=" }.join("&")
      expect(reason_of { pc.verify("#{fields}&p_signature=#{Base64.strict_encode64("\0" * 256)}", {}, now: now) })
        .to eq(:malformed_payload)
    end
  end

  describe "default tolerances equal the SDKs'" do
    it "Paddle 5 s (WebhooksValidator), Stripe 300, Linear 60 (LinearWebhookClient), HubSpot 300" do
      t = described_class::PROVIDERS.transform_values { |e| e[:tolerance] }
      expect(t.values_at(:paddle, :stripe, :linear, :hubspot)).to eq([5, 300, 60, 300])
      expect(described_class.new(:paddle, secrets: ["k"]).tolerance).to eq(5)
    end
  end
end
