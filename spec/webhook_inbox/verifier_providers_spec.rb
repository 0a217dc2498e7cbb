# frozen_string_literal: true

require "spec_helper"
require_relative "../support/verifier_helpers"
require "json"
require "openssl"
require "base64"
require "uri"
require "zlib"

# The providers added as table entries (ext/webhook_inbox/providers.c): for each, a valid
# delivery, a tampered body, a wrong key, a stale timestamp (where the provider signs one)
# and a replay. Asymmetric vectors come from the providers' SDKs
# (spec/fixtures/vectors/generator, committed as sdk-signatures.json); the HMAC ones are
# signed here the way each provider's docs say.
RSpec.describe WebhookInbox::Verifier do
  vectors_dir = ENV.fetch("WEBHOOK_VECTORS", File.expand_path("../fixtures/vectors", __dir__))
  sdk = JSON.parse(File.read(File.join(vectors_dir, "sdk-signatures.json")))["cases"]
  now = 1_700_000_000

  include VerifierHelpers

  def hmac(alg, key, data) = OpenSSL::HMAC.hexdigest(alg, key, data)

  # A URL-signed case (it names the URL the provider called) is verified as a Rack env
  # whose query string is the URL's, by a verifier configured with the URL's public part.
  def self.public_url_of(c) = c["url"]&.split("?", 2)&.first

  def env_for(c, headers)
    return headers unless c["url"]

    headers.to_h { |k, v| ["HTTP_#{k.upcase.tr("-", "_")}", v] }
           .merge("REQUEST_METHOD" => c["method"], "QUERY_STRING" => c["url"].split("?", 2)[1].to_s)
  end

  describe "SDK vectors" do
    sdk.each do |c|
      context "#{c["provider"]} #{c["name"]} (#{c["source"]})" do
        let(:opts) { c["url"] ? { public_url: self.class.public_url_of(c) } : {} }
        let(:verifier) { described_class.new(c["provider"].to_sym, secrets: [c["secret"]], **opts) }
        let(:tolerance) { described_class::PROVIDERS.fetch(c["provider"].to_sym)[:tolerance] }
        let(:headers) { env_for(c, c["headers"]) }

        it "verifies" do
          ev = verifier.verify(c["body"], headers, now: c["now"])
          expect(ev.provider).to eq(c["provider"].to_sym)
          expect(ev.body).to eq(c["body"])
          expect([ev.event_id, ev.event_type]).to eq(c.values_at("event_id", "event_type")) if c["event_id"]
        end

        it "refuses a tampered body, signature or timestamp" do
          # tamper: a signed value to change where not every byte of the body is signed (Adyen)
          tampered = c["tamper"] ? c["body"].sub(*c["tamper"]) : c["body"].sub(/.\z/m) { |x| x == "}" ? " }" : "#{x}1" }
          expect(tampered).not_to eq(c["body"])
          expect(reason_of { verifier.verify(tampered, headers, now: c["now"]) }).to eq(:signature_mismatch)
          c["headers"].each do |name, value|
            next if name =~ /event-id|content-type/i

            bad = value.dup
            i = bad.rindex(/[0-9A-Za-z]/)
            bad[i] = bad[i].casecmp?("a") ? "b" : "a" # not its other case: hex takes either
            expect(reason_of { verifier.verify(c["body"], env_for(c, c["headers"].merge(name => bad)), now: c["now"]) })
              .not_to be_nil, "#{name} altered still verified"
          end
        end

        it "refuses the delivery under another key#{" or for another URL" if c["url"]}" do
          wrong = described_class.new(c["provider"].to_sym, secrets: [c["wrong_secret"]], **opts)
          expect(reason_of { wrong.verify(c["body"], headers, now: c["now"]) }).to eq(:signature_mismatch)
          if c["url"]
            elsewhere = described_class.new(c["provider"].to_sym, secrets: [c["secret"]], public_url: "#{self.class.public_url_of(c)}/other")
            expect(reason_of { elsewhere.verify(c["body"], headers, now: c["now"]) }).to eq(:signature_mismatch)
          end
        end

        it "refuses it when stale (where the provider signs a time), and a replay keeps its event id" do
          first = verifier.verify(c["body"], headers, now: c["now"])
          expect(verifier.verify(c["body"], headers, now: c["now"] + 1).event_id).to eq(first.event_id)
          if tolerance
            expect(reason_of { verifier.verify(c["body"], headers, now: c["now"] + tolerance + 1) })
              .to eq(:timestamp_out_of_tolerance)
          end
        end
      end
    end

    it "covers the asymmetric schemes and Standard Webhooks v1a" do
      expect(sdk.map { |c| [c["provider"], c["name"]] }).to include(%w[discord ping], %w[sendgrid processed], %w[standard_webhooks v1a])
      expect(sdk.map { |c| c["provider"] }).to include("twilio", "square", "hubspot", "vonage", "plaid")
      # Stripe v2 thin events: the event's id and type, never its related_object's (read first)
      expect(sdk.find { |c| c["name"] == "v2 thin event" }.values_at("event_id", "event_type"))
        .to eq(%w[evt_test_65RCGNFjMQYSqLmKh v1.billing.meter.error_report_triggered])
    end
  end

  describe ":discord" do
    let(:ping) { sdk.find { |c| c["provider"] == "discord" && c["name"] == "ping" } }
    let(:command) { sdk.find { |c| c["provider"] == "discord" && c["name"] == "command" } }
    let(:verifier) { described_class.new(:discord, secrets: [ping["secret"]]) }

    it "answers a signed PING with {\"type\":1} and reads an interaction's id and numeric type" do
      expect(verifier.verify(ping["body"], ping["headers"], now: now).challenge).to eq('{"type":1}')
      ev = verifier.verify(command["body"], command["headers"], now: now)
      expect([ev.challenge, ev.event_id, ev.event_type]).to eq([nil, "1100000000000000002", "2"])
    end

    it "refuses a public key that is not 32 bytes of hex, without quoting it" do
      expect { described_class.new(:discord, secrets: ["zz" * 32]) }
        .to raise_error(WebhookInbox::ConfigurationError, /hex public key/) { |e| expect(e.message).not_to include("zz") }
      expect { described_class.new(:discord, secrets: ["ab" * 31]) }.to raise_error(WebhookInbox::ConfigurationError, /32 bytes/)
    end
  end

  describe ":sendgrid and Standard Webhooks v1a keys" do
    it "refuses a key that is not a P-256 public key, and a whpk_ key that is not Ed25519" do
      rsa = Base64.strict_encode64(OpenSSL::PKey::RSA.new(2048).public_to_der)
      expect { described_class.new(:sendgrid, secrets: [rsa]) }.to raise_error(WebhookInbox::ConfigurationError, /P-256/)
      expect { described_class.new(:standard_webhooks, secrets: ["whpk_#{Base64.strict_encode64("x" * 31)}"]) }
        .to raise_error(WebhookInbox::ConfigurationError, /32 bytes/)
    end

    it "v1 and v1a secrets verify side by side (rotation from HMAC to Ed25519)" do
      c = sdk.find { |x| x["name"] == "v1a" }
      v1 = sdk.find { |x| x["name"] == "v1" }
      both = described_class.new(:standard_webhooks, secrets: [v1["secret"], c["secret"]])
      expect(both.verify(c["body"], c["headers"], now: now).event_id).to eq("msg_2")
      expect(both.verify(v1["body"], v1["headers"], now: now).event_id).to eq("msg_1")
    end
  end

  # JWT-signed providers (ext/webhook_inbox/sig_jwt.c): tokens made here with OpenSSL.
  describe "JWT providers" do
    def b64url(s) = Base64.urlsafe_encode64(s, padding: false)

    def jwt(header, claims, &sign)
      input = "#{b64url(JSON.generate(header))}.#{b64url(claims.is_a?(String) ? claims : JSON.generate(claims))}"
      "#{input}.#{b64url(sign.call(input))}"
    end

    def sha(s) = OpenSSL::Digest::SHA256.hexdigest(s)

    describe ":vonage" do
      let(:secret) { "vonage-signature-secret-0123456789" }
      let(:body) { '{"message_uuid":"m-1","status":"delivered","channel":"sms"}' }
      let(:verifier) { described_class.new(:vonage, secrets: [secret]) }

      def hs256(claims, key: secret, header: { alg: "HS256", typ: "JWT" })
        jwt(header, claims) { |i| OpenSSL::HMAC.digest("SHA256", key, i) }
      end

      def auth(token) = { "Authorization" => "Bearer #{token}" }

      it "verifies a token over the body's SHA-256 and reads the signed body's id and type" do
        ev = verifier.verify(body, auth(hs256({ iat: now, payload_hash: sha(body) })), now: now)
        expect([ev.event_id, ev.event_type, ev.timestamp.to_i]).to eq(["m-1", "delivered", now])
        expect(verifier.verify(body, { "authorization" => "bearer #{hs256({ iat: now, payload_hash: sha(body) })}" }, now: now).event_id)
          .to eq("m-1")
      end

      it "refuses another body, another key, no Bearer, and any alg but HS256 (none included)" do
        good = hs256({ iat: now, payload_hash: sha(body) })
        expect(reason_of { verifier.verify("#{body} ", auth(good), now: now) }).to eq(:signature_mismatch)
        expect(reason_of { verifier.verify(body, auth(hs256({ iat: now, payload_hash: sha(body) }, key: "other")), now: now) })
          .to eq(:signature_mismatch)
        expect(reason_of { verifier.verify(body, { "Authorization" => good }, now: now) }).to eq(:malformed_signature)
        expect(reason_of { verifier.verify(body, {}, now: now) }).to eq(:missing_signature)
        none = "#{good.split(".")[0, 2].join(".").sub(/\A[^.]+/, b64url('{"alg":"none"}'))}."
        expect(reason_of { verifier.verify(body, auth(none), now: now) }).to eq(:malformed_signature)
        hs512 = jwt({ alg: "HS512" }, { iat: now, payload_hash: sha(body) }) { |i| OpenSSL::HMAC.digest("SHA512", secret, i) }
        expect(reason_of { verifier.verify(body, auth(hs512), now: now) }).to eq(:malformed_signature)
      end

      it "refuses a stale or expired token, one without iat, and a duplicated claim" do
        expect(reason_of { verifier.verify(body, auth(hs256({ iat: now - 301, payload_hash: sha(body) })), now: now) })
          .to eq(:timestamp_out_of_tolerance)
        expect(reason_of { verifier.verify(body, auth(hs256({ iat: now, exp: now - 1, payload_hash: sha(body) })), now: now) })
          .to eq(:timestamp_out_of_tolerance)
        expect(reason_of { verifier.verify(body, auth(hs256({ payload_hash: sha(body) })), now: now) }).to eq(:missing_timestamp)
        expect(reason_of { verifier.verify(body, auth(hs256({ iat: "#{now}", payload_hash: sha(body) })), now: now) })
          .to eq(:malformed_timestamp)
        dup = %({"iat":#{now},"payload_hash":"#{sha("{}")}","payload_hash":"#{sha(body)}"})
        expect(reason_of { verifier.verify(body, auth(hs256(dup)), now: now) }).to eq(:duplicate_key)
        expect(reason_of { verifier.verify(body, auth(hs256({ iat: now })), now: now) }).to eq(:malformed_signature)
      end

      it "a replayed delivery is the same event, and the Receiver stores it once per id" do
        token = hs256({ iat: now, payload_hash: sha(body) })
        expect(verifier.verify(body, auth(token), now: now + 60).event_id).to eq(verifier.verify(body, auth(token), now: now).event_id)
        store = recording_store
        r = WebhookInbox::Receiver.new(provider: :vonage, secrets: [secret], source_scope: "vonage:app1", inbox: store)
        fresh = hs256({ iat: Time.now.to_i, payload_hash: sha(body) })
        env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/json", "HTTP_AUTHORIZATION" => "Bearer #{fresh}" }
        expect(r.receive(body, env).http_status).to eq(200)
        expect(store.inserts.map { |i| i[:event_id] }).to eq(["m-1"])
      end
    end

    describe ":plaid" do
      let(:keys) { Array.new(2) { OpenSSL::PKey::EC.generate("prime256v1") } }
      let(:body) { %({\n  "item_id": "it_1",\n  "webhook_code": "DEFAULT_UPDATE",\n  "webhook_type": "TRANSACTIONS"\n}) }

      def jwk(key, kid)
        pt = key.public_key.to_octet_string(:uncompressed)
        JSON.generate(alg: "ES256", crv: "P-256", kid: kid, kty: "EC", use: "sig", x: b64url(pt[1, 32]), y: b64url(pt[33, 32]),
                      created_at: 1_560_466_150, expired_at: nil)
      end

      def es256(key, kid, claims)
        jwt({ alg: "ES256", kid: kid, typ: "JWT" }, claims) do |i|
          OpenSSL::ASN1.decode(key.sign("SHA256", i)).value.map { |n| n.value.to_s(2).rjust(32, "\0") }.join
        end
      end

      def plaid(token) = { "Plaid-Verification" => token }

      it "verifies under the key the token's kid names (several configured for rotation)" do
        v = described_class.new(:plaid, secrets: [jwk(keys[0], "k-old"), jwk(keys[1], "k-new")])
        %w[k-old k-new].each_with_index do |kid, i|
          ev = v.verify(body, plaid(es256(keys[i], kid, { iat: now, request_body_sha256: sha(body) })), now: now)
          expect([ev.event_id, ev.event_type]).to eq([sha(body), "TRANSACTIONS"])
        end
        # signed by the other key under a kid: refused, even though that key is configured
        expect(reason_of { v.verify(body, plaid(es256(keys[1], "k-old", { iat: now, request_body_sha256: sha(body) })), now: now) })
          .to eq(:signature_mismatch)
        expect(reason_of { v.verify(body, plaid(es256(keys[0], "k-other", { iat: now, request_body_sha256: sha(body) })), now: now) })
          .to eq(:signature_mismatch)
      end

      it "refuses another body, a stale iat (5 minutes), and an HS256 token keyed with the public JWK" do
        v = described_class.new(:plaid, secrets: [jwk(keys[0], "k1")])
        good = es256(keys[0], "k1", { iat: now, request_body_sha256: sha(body) })
        expect(reason_of { v.verify(body.sub("DEFAULT", "HISTORICAL"), plaid(good), now: now) }).to eq(:signature_mismatch)
        expect(reason_of { v.verify(body, plaid(good), now: now + 301) }).to eq(:timestamp_out_of_tolerance)
        expect(v.verify(body, plaid(good), now: now + 300).event_id).to eq(sha(body))
        confused = jwt({ alg: "HS256", kid: "k1" }, { iat: now, request_body_sha256: sha(body) }) do |i|
          OpenSSL::HMAC.digest("SHA256", jwk(keys[0], "k1"), i)
        end
        expect(reason_of { v.verify(body, plaid(confused), now: now) }).to eq(:malformed_signature)
      end

      it "refuses keys that are not P-256 JWKs, without quoting them" do
        pt = keys[0].public_key.to_octet_string(:uncompressed)
        off_curve = jwk(keys[0], "k1").sub(b64url(pt[33, 32]), b64url(pt[33, 31] + (pt[64].ord ^ 1).chr))
        ["not json", jwk(keys[0], "k1").sub("P-256", "P-384"), off_curve, b64url(keys[0].public_to_der)].each do |bad|
          expect { described_class.new(:plaid, secrets: [bad]) }
            .to raise_error(WebhookInbox::ConfigurationError, /JWK|P-256/) { |e| expect(e.message).not_to include(b64url(pt[1, 32])) }
        end
      end
    end
  end

  describe ":mailgun (the signature inside the body)" do
    let(:key) { "key-mailgun-signing-0123456789abcdef" }
    let(:verifier) { described_class.new(:mailgun, secrets: [key]) }
    let(:token) { "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0" }
    let(:signed_at) { now }

    # Signed by the testing kit, as Mailgun signs: hex HMAC-SHA256 of timestamp + token.
    def mailgun(ts: signed_at.to_s, token: self.token, key: self.key, event: "delivered")
      data = { "event-data" => { "event" => event, "id" => "CPgfbmQMTCKtHW6uIWtuVe", "timestamp" => 1_521_472_262.908181 } }
      WebhookInbox::Testing::Signing.delivery(:mailgun, data, secret: key, timestamp: ts, token: token).body
    end

    it "verifies HMAC(timestamp + token); the token is the event id, the timestamp its time" do
      ev = verifier.verify(mailgun, {}, now: now)
      expect([ev.event_id, ev.event_type, ev.timestamp.to_i]).to eq([token, "delivered", now])
    end

    it "refuses a changed token, timestamp or signature, and another key" do
      good = JSON.parse(mailgun)
      { "token" => "#{token}0", "timestamp" => (now - 1).to_s, "signature" => "0" * 64 }.each do |field, value|
        body = JSON.generate(good.merge("signature" => good["signature"].merge(field => value)))
        expect(reason_of { verifier.verify(body, {}, now: now) }).to eq(:signature_mismatch), field
      end
      expect(reason_of { described_class.new(:mailgun, secrets: ["other"]).verify(mailgun, {}, now: now) }).to eq(:signature_mismatch)
    end

    it "refuses a stale timestamp; a replay, even with other event-data (which is not signed), is the same event" do
      old = (now - 301).to_s
      expect(reason_of { verifier.verify(mailgun(ts: old), {}, now: now) }).to eq(:timestamp_out_of_tolerance)
      first = verifier.verify(mailgun, {}, now: now)
      forged = verifier.verify(mailgun(event: "failed"), {}, now: now + 10)
      expect([forged.event_id, forged.event_type]).to eq([first.event_id, "failed"])
    end

    it "refuses a body without the signature, with it twice, or with escapes in what is signed" do
      expect(reason_of { verifier.verify('{"event-data":{"event":"delivered"}}', {}, now: now) }).to eq(:missing_signature)
      twice = mailgun.sub(/\A\{/, %({"signature":{"token":"t","timestamp":"1","signature":"#{"0" * 64}"},))
      expect(reason_of { verifier.verify(twice, {}, now: now) }).to eq(:duplicate_key)
      escaped = mailgun.sub(%("token":"a8), %("token":"\\u0061 8))
      expect(reason_of { verifier.verify(escaped, {}, now: now) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(mailgun(ts: "soon"), {}, now: now) }).to eq(:malformed_timestamp)
    end
  end

  describe ":postmark (no signature: HTTP Basic credentials)" do
    let(:verifier) { described_class.new(:postmark, secrets: ["hooks:s3cret-pass", "hooks:next-pass"]) }
    let(:body) { '{"RecordType":"Delivery","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","Recipient":"john@example.com"}' }

    def basic(cred) = { "Authorization" => "Basic #{Base64.strict_encode64(cred)}" }

    it "accepts either configured credential and reads the type; the event id is the body's SHA-256" do
      ev = verifier.verify(body, basic("hooks:next-pass"), now: now)
      expect([ev.event_id, ev.event_type]).to eq([OpenSSL::Digest::SHA256.hexdigest(body), "Delivery"])
      expect(verifier.verify(body, { "authorization" => "basic #{Base64.strict_encode64("hooks:s3cret-pass")}" }, now: now).event_type)
        .to eq("Delivery")
    end

    it "refuses other credentials, none and other schemes, without quoting them" do
      e = verifier.verify(body, basic("hooks:wrong"), now: now)
    rescue WebhookInbox::VerificationError => e
      expect(e.reason).to eq(:signature_mismatch)
      expect(e.message).not_to include("wrong")
      expect(reason_of { verifier.verify(body, basic("hooks:s3cret-pas"), now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(body, {}, now: now) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify(body, { "Authorization" => "Bearer abc" }, now: now) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, { "Authorization" => "Basic !!" }, now: now) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, basic("no-colon"), now: now) }).to eq(:malformed_signature)
      expect { described_class.new(:postmark, secrets: ["no-colon-secret"]) }
        .to raise_error(WebhookInbox::ConfigurationError, /user:password/) { |x| expect(x.message).not_to include("no-colon-secret") }
    end

    it "authenticates the sender, not the body: a changed body is accepted (as another event); a replay is the same event" do
      other = body.sub("Delivery", "Bounce")
      expect(verifier.verify(other, basic("hooks:s3cret-pass"), now: now).event_type).to eq("Bounce")
      expect(verifier.verify(body, basic("hooks:s3cret-pass"), now: now + 86_400).event_id)
        .to eq(verifier.verify(body, basic("hooks:s3cret-pass"), now: now).event_id)
      expect(described_class::PROVIDERS.fetch(:postmark)[:tolerance]).to be_nil # nothing signed, no time to check
    end

    it "the Receiver stores an authenticated delivery and refuses one without the credentials" do
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :postmark, secrets: ["hooks:s3cret-pass"], source_scope: "postmark:s1", inbox: store)
      env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/json",
              "HTTP_AUTHORIZATION" => "Basic #{Base64.strict_encode64("hooks:s3cret-pass")}" }
      expect(r.receive(body, env).http_status).to eq(200)
      expect(r.receive(body, env.merge("HTTP_AUTHORIZATION" => "Basic #{Base64.strict_encode64("hooks:x")}")).http_status).to eq(401)
      expect(store.inserts.size).to eq(1)
    end
  end

  describe ":paddle_classic (RSA over the PHP-serialized form)" do
    let(:rsa) { OpenSSL::PKey::RSA.new(2048) }
    let(:verifier) { described_class.new(:paddle_classic, secrets: [rsa.public_to_pem.strip]) }
    let(:fields) do
      { "alert_name" => "subscription_created", "alert_id" => "1923482061", "passthrough" => "a b&c=é+ü",
        "event_time" => "2023-11-14 22:13:20", "subscription_id" => "8", "status" => "active" }
    end

    # Signed by the testing kit as Paddle's docs sign (ksort, PHP serialize() of the string
    # array, RSA-SHA1, base64); extra: fields sent beside them, unsigned.
    def form(h, key: rsa, extra: {})
      signed = WebhookInbox::Testing::Signing.delivery(:paddle_classic, h, secret: key).body
      extra.empty? ? signed : "#{URI.encode_www_form(extra)}&#{signed}"
    end

    it "verifies the signed form and reads its alert_id and alert_name" do
      ev = verifier.verify(form(fields), {}, now: now)
      expect([ev.event_id, ev.event_type]).to eq(%w[1923482061 subscription_created])
    end

    it "refuses a changed or added field, another key, and no signature" do
      body = form(fields)
      expect(reason_of { verifier.verify(body.sub("status=active", "status=deleted"), {}, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(form(fields, extra: { "coupon" => "FREE" }), {}, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(form(fields, key: OpenSSL::PKey::RSA.new(2048)), {}, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(URI.encode_www_form(fields), {}, now: now) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify("#{body}&p_signature=AAAA", {}, now: now) }).to eq(:malformed_payload)
    end

    it "refuses a field twice or a name PHP would not keep as a string key, and keys that are not RSA >= 2048" do
      expect(reason_of { verifier.verify("#{form(fields)}&status=deleted", {}, now: now) }).to eq(:malformed_payload)
      expect(reason_of { verifier.verify(form(fields.merge("10" => "x")), {}, now: now) }).to eq(:malformed_payload)
      ["not a key", OpenSSL::PKey::RSA.new(1024).public_to_pem.strip, OpenSSL::PKey::EC.generate("prime256v1").public_to_pem.strip].each do |k|
        expect { described_class.new(:paddle_classic, secrets: [k]) }.to raise_error(WebhookInbox::ConfigurationError, /RSA/)
      end
    end

    it "the Receiver takes the form, stores it once by alert_id, and refuses a forged one" do
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :paddle_classic, secrets: [rsa.public_to_pem.strip], source_scope: "paddle:v1", inbox: store)
      env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/x-www-form-urlencoded" }
      expect(r.receive(form(fields), env).http_status).to eq(200)
      expect(r.receive(form(fields).sub("status=active", "status=past_due"), env).http_status).to eq(401)
      expect(store.inserts.map { |i| i[:event_id] }).to eq(["1923482061"])
    end

    it "signs no time (tolerance nil); a replay is the same event by its signed alert_id" do
      expect(described_class::PROVIDERS.fetch(:paddle_classic)[:tolerance]).to be_nil
      expect(verifier.verify(form(fields), {}, now: now + 86_400).event_id).to eq(verifier.verify(form(fields), {}, now: now).event_id)
    end
  end

  describe ":braintree (form bt_signature pairs over bt_payload)" do
    # As Braintree's SDKs sign: "public_key|" + hex HMAC-SHA1 under SHA-1(private key), pairs joined by "&".
    def bt_pair(pub, priv, payload) = "#{pub}|#{OpenSSL::HMAC.hexdigest("SHA1", OpenSSL::Digest::SHA1.digest(priv), payload)}"

    let(:xml) { %(<notification><timestamp type="datetime">2023-11-14T22:13:20Z</timestamp><kind>check</kind><subject><check type="boolean">true</check></subject></notification>) }
    let(:payload) { "#{Base64.encode64(xml)}" } # wrapped at 60 columns, ends in "\n", as Braintree sends it
    let(:verifier) { described_class.new(:braintree, secrets: ["pub_old:priv_old", "pub_new:priv_new"]) }

    def form(sig, pay = payload) = URI.encode_www_form([["bt_signature", sig], ["bt_payload", pay]])

    it "verifies a pair for any configured public key, among pairs for others, and reads the kind" do
      sig = "other|#{"0" * 40}&#{bt_pair("pub_new", "priv_new", payload)}"
      ev = verifier.verify(form(sig), {}, now: now)
      expect([ev.event_id, ev.event_type]).to eq([OpenSSL::Digest::SHA256.hexdigest(payload), "check"])
      # signed with the newline, sent without it (the SDKs try both)
      expect(verifier.verify(form(bt_pair("pub_old", "priv_old", payload), payload.chomp), {}, now: now).event_type).to eq("check")
    end

    it "refuses a pair signed for another public key, a changed payload, another private key" do
      expect(reason_of { verifier.verify(form(bt_pair("pub_new", "priv_old", payload)), {}, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(form(bt_pair("pub_x", "priv_new", payload)), {}, now: now) }).to eq(:signature_mismatch)
      other = Base64.encode64(xml.sub("check", "subscription_canceled"))
      expect(reason_of { verifier.verify(form(bt_pair("pub_new", "priv_new", payload), other), {}, now: now) }).to eq(:signature_mismatch)
    end

    it "refuses no signature, no pair, no or a non-base64 payload, a field twice, and bad secrets" do
      good = bt_pair("pub_new", "priv_new", payload)
      expect(reason_of { verifier.verify(URI.encode_www_form(bt_payload: payload), {}, now: now) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify(form("pub_new:abc"), {}, now: now) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(URI.encode_www_form(bt_signature: good), {}, now: now) }).to eq(:malformed_payload)
      expect(reason_of { verifier.verify(form(good, "#{payload}<x>"), {}, now: now) }).to eq(:malformed_payload)
      expect(reason_of { verifier.verify("#{form(good)}&bt_payload=AAAA", {}, now: now) }).to eq(:malformed_payload)
      expect(reason_of { verifier.verify("#{form(good)}&bt%5Fsignature=x", {}, now: now) }).to eq(:malformed_payload)
      ["no-colon", ":hushhush", "pubk:", "pu|bk:hushhush"].each do |k|
        expect { described_class.new(:braintree, secrets: [k]) }
          .to raise_error(WebhookInbox::ConfigurationError, /public_key:private_key/) { |x| expect(x.message).not_to include(k) }
      end
    end

    it "the Receiver takes the form and stores a replay once, by the payload's SHA-256; a forged one is refused" do
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :braintree, secrets: ["pub_new:priv_new"], source_scope: "bt:m1", inbox: store)
      env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/x-www-form-urlencoded" }
      body = form(bt_pair("pub_new", "priv_new", payload))
      expect(r.receive(body, env).http_status).to eq(200)
      expect(r.receive(form(bt_pair("pub_new", "priv_x", payload)), env).http_status).to eq(401)
      expect(store.inserts.map { |i| [i[:event_id], i[:event_type]] }).to eq([[OpenSSL::Digest::SHA256.hexdigest(payload), "check"]])
      expect(described_class::PROVIDERS.fetch(:braintree)[:tolerance]).to be_nil # retried for hours: no time check
    end
  end

  describe ":adyen (an HMAC per notification item)" do
    let(:key) { "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056" }
    let(:verifier) { described_class.new(:adyen, secrets: ["00" * 32, key]) }

    # As Adyen's docs sign: the eight fields joined by ":" (missing ones empty), HMAC-SHA256 under the hex key, base64.
    def adyen_item(psp, code: "AUTHORISATION", success: "true", value: 1130, ref: "order-1", k: key)
      i = { "pspReference" => psp, "merchantAccountCode" => "TestMerchant", "merchantReference" => ref,
            "amount" => { "value" => value, "currency" => "EUR" }, "eventCode" => code, "success" => success,
            "eventDate" => "2023-11-14T22:13:20+01:00", "reason" => "unsigned" }
      signed = [psp, "", "TestMerchant", ref, value, "EUR", code, success].join(":")
      i["additionalData"] = { "hmacSignature" => Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", [k].pack("H*"), signed)) }
      { "NotificationRequestItem" => i }
    end

    def adyen_body(*items) = JSON.generate("live" => "false", "notificationItems" => items)

    it "verifies one item: id pspReference:eventCode:success, type its eventCode; escapes are signed decoded" do
      ev = verifier.verify(adyen_body(adyen_item("psp1", ref: "ordre-é/1")), {}, now: now)
      expect([ev.event_id, ev.event_type]).to eq(["psp1:AUTHORISATION:true", "AUTHORISATION"])
      escaped = adyen_body(adyen_item("psp1", ref: "ordre-é/1")).sub("ordre-é/1", "ordre-\\u00e9\\/1")
      expect(verifier.verify(escaped, {}, now: now).event_id).to eq("psp1:AUTHORISATION:true")
      # the same payment's failed authorisation is another event
      expect(verifier.verify(adyen_body(adyen_item("psp1", success: "false")), {}, now: now).event_id).to eq("psp1:AUTHORISATION:false")
    end

    it "verifies a batch only when every item does; its id is the body's SHA-256, its type the shared eventCode" do
      body = adyen_body(adyen_item("psp1"), adyen_item("psp2"))
      ev = verifier.verify(body, {}, now: now)
      expect([ev.event_id, ev.event_type]).to eq([OpenSSL::Digest::SHA256.hexdigest(body), "AUTHORISATION"])
      expect(verifier.verify(adyen_body(adyen_item("psp1"), adyen_item("psp2", code: "REFUND")), {}, now: now).event_type).to be_nil
      forged = adyen_body(adyen_item("psp1"), adyen_item("psp2", k: "11" * 32))
      expect(reason_of { verifier.verify(forged, {}, now: now) }).to eq(:signature_mismatch)
    end

    it "refuses a changed signed field, another key; unsigned fields are not covered (documented)" do
      body = adyen_body(adyen_item("psp1"))
      expect(reason_of { verifier.verify(body.sub('"value":1130', '"value":1131'), {}, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(body.sub('"psp1"', '"psp9"'), {}, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { described_class.new(:adyen, secrets: ["22" * 32]).verify(body, {}, now: now) }).to eq(:signature_mismatch)
      expect(verifier.verify(body.sub("unsigned", "changed"), {}, now: now).event_id).to eq("psp1:AUTHORISATION:true")
    end

    it "refuses no items, no signature, a doubled signed key, a malformed array, and a key that is not hex" do
      one = adyen_item("psp1")
      expect(reason_of { verifier.verify(adyen_body, {}, now: now) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify('{"live":"false"}', {}, now: now) }).to eq(:malformed_payload)
      unsigned = { "NotificationRequestItem" => one["NotificationRequestItem"].except("additionalData") }
      expect(reason_of { verifier.verify(adyen_body(unsigned), {}, now: now) }).to eq(:missing_signature)
      doubled = adyen_body(one).sub('"pspReference":"psp1"', '"pspReference":"psp1","pspReference":"psp2"')
      expect(reason_of { verifier.verify(doubled, {}, now: now) }).to eq(:duplicate_key)
      expect(reason_of { verifier.verify(adyen_body(one).sub("}]}", "},]}"), {}, now: now) }).to eq(:malformed_payload)
      expect(reason_of { verifier.verify(adyen_body(one).sub("}]}", "} 1]}"), {}, now: now) }).to eq(:malformed_payload)
      expect(reason_of { verifier.verify(adyen_body(one).sub('"value":1130', '"value":1130,'), {}, now: now) }).to eq(:malformed_payload)
      expect { described_class.new(:adyen, secrets: ["not-hex"]) }.to raise_error(WebhookInbox::ConfigurationError, /hex/)
    end

    it "the Receiver stores a delivery once by its item, signs no time (tolerance nil), and refuses a forged one" do
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :adyen, secrets: [key], source_scope: "adyen:m1", inbox: store)
      env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/json" }
      expect(r.receive(adyen_body(adyen_item("psp1")), env).http_status).to eq(200)
      expect(r.receive(adyen_body(adyen_item("psp1", k: "11" * 32)), env).http_status).to eq(401)
      expect(store.inserts.map { |i| [i[:event_id], i[:event_type]] }).to eq([%w[psp1:AUTHORISATION:true AUTHORISATION]])
      expect(described_class::PROVIDERS.fetch(:adyen)[:tolerance]).to be_nil
    end
  end

  # HMAC providers signed as their docs say: [scheme, secret, body, headers for (body, ts, secret), tolerance or nil]
  hmac_cases = {
    zoom: ["zoom_secret_token", '{"event":"meeting.started","event_ts":1700000000000,"payload":{"object":{"id":"1"}}}',
           ->(b, ts, k) { { "x-zm-signature" => "v0=#{OpenSSL::HMAC.hexdigest("SHA256", k, "v0:#{ts}:#{b}")}", "x-zm-request-timestamp" => ts.to_s } }],
    linear: ["lin_wh_secret", ->(ts) { %({"action":"create","type":"Issue","data":{"id":"i1"},"webhookTimestamp":#{ts * 1000}}) },
             ->(b, _ts, k) { { "Linear-Signature" => OpenSSL::HMAC.hexdigest("SHA256", k, b) } }],
    calendly: ["calendly_signing_key", '{"event":"invitee.created","payload":{"uri":"u"}}',
               ->(b, ts, k) { { "Calendly-Webhook-Signature" => "t=#{ts},v1=#{OpenSSL::HMAC.hexdigest("SHA256", k, "#{ts}.#{b}")}" } }],
    intercom: ["intercom_client_secret", '{"type":"notification_event","id":"notif_1","topic":"conversation.user.created"}',
               ->(b, _ts, k) { { "X-Hub-Signature" => "sha1=#{OpenSSL::HMAC.hexdigest("SHA1", k, b)}" } }],
    razorpay: ["rzp_secret", '{"entity":"event","event":"payment.captured"}',
               ->(b, _ts, k) { { "X-Razorpay-Signature" => OpenSSL::HMAC.hexdigest("SHA256", k, b), "X-Razorpay-Event-Id" => "e1" } }],
    lemonsqueezy: ["ls_secret", '{"meta":{"event_name":"order_created"},"data":{"id":"1"}}',
                   ->(b, _ts, k) { { "X-Signature" => OpenSSL::HMAC.hexdigest("SHA256", k, b), "X-Event-Name" => "order_refunded" } }],
    coinbase_commerce: ["cc_secret", '{"id":"del_1","scheduled_for":"2023-11-14T22:13:20Z","event":{"id":"ev_1","type":"charge:confirmed"}}',
                        ->(b, _ts, k) { { "X-CC-Webhook-Signature" => OpenSSL::HMAC.hexdigest("SHA256", k, b) } }],
    mollie: ["mollie_signing_secret", '{"resource":"event","id":"event_GvJ8WHrp5isUdRub9CJyH","type":"payment-link.paid",' \
                                      '"entityId":"pl_qng5gbbv8NAZ5gpM5ZYgx","createdAt":"2024-12-16T08:30:00.0Z"}',
             ->(b, _ts, k) { { "X-Mollie-Signature" => "sha256=#{OpenSSL::HMAC.hexdigest("SHA256", k, b)}" } }],
    # one header per active Connect key: the first under a key this endpoint does not have
    docusign: ["docusign_connect_key", '{"event":"envelope-completed","apiVersion":"v2.1","retryCount":0,' \
                                       '"generatedDateTime":"2023-11-14T22:13:20.0000000Z","data":{"accountId":"a1","envelopeId":"e1"}}',
               ->(b, _ts, k) { { "X-DocuSign-Signature-1" => Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", "retired-key", b)),
                                 "X-DocuSign-Signature-2" => Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", k, b)) } }],
    github_legacy: ["It's a Secret to Everybody", "Hello, World!",
                    ->(b, _ts, k) { { "X-Hub-Signature" => "sha1=#{OpenSSL::HMAC.hexdigest("SHA1", k, b)}", "X-GitHub-Delivery" => "d1" } }]
  }
  expected = { zoom: [nil, "meeting.started"], linear: [nil, "Issue"], calendly: [nil, "invitee.created"],
               intercom: ["notif_1", "conversation.user.created"], razorpay: [nil, "payment.captured"],
               lemonsqueezy: [nil, "order_created"], coinbase_commerce: ["ev_1", "charge:confirmed"], github_legacy: [nil, nil],
               mollie: ["event_GvJ8WHrp5isUdRub9CJyH", "payment-link.paid"], docusign: [nil, "envelope-completed"] }

  hmac_cases.each do |name, (secret, body, sign)|
    describe ":#{name}" do
      let(:scheme) { name == :github_legacy ? :github : name }
      let(:opts) { name == :github_legacy ? { legacy_sha1: true } : {} }
      let(:verifier) { described_class.new(scheme, secrets: [secret], **opts) }
      let(:entry) { described_class::PROVIDERS.fetch(name == :github_legacy ? :github_sha1 : name) }
      let(:tolerance) { entry[:tolerance] }
      let(:body_at) { ->(ts) { body.respond_to?(:call) ? body.call(ts) : body } }
      let(:b) { body_at.call(now) }
      let(:h) { sign.call(b, now, secret) }

      it "verifies and reads the signed id and type" do
        ev = verifier.verify(b, h, now: now)
        id, type = expected.fetch(name)
        expect(ev.event_id).to eq(id || OpenSSL::Digest::SHA256.hexdigest(b))
        expect(ev.event_type).to eq(type) unless name == :github_legacy
      end

      it "refuses a tampered body and a wrong key" do
        expect(reason_of { verifier.verify("#{b} ", h, now: now) }).to eq(:signature_mismatch)
        expect(reason_of { verifier.verify(b.sub(/[a-z]/) { |x| x.upcase }, h, now: now) }).to eq(:signature_mismatch)
        wrong = described_class.new(scheme, secrets: ["#{secret}-other"], **opts)
        expect(reason_of { wrong.verify(b, h, now: now) }).to eq(:signature_mismatch)
      end

      it "refuses a stale delivery where the provider signs a time, and a replay is the same event" do
        expect(verifier.verify(b, h, now: now + 1).event_id).to eq(verifier.verify(b, h, now: now).event_id)
        if tolerance
          expect(reason_of { verifier.verify(b, h, now: now + tolerance + 1) }).to eq(:timestamp_out_of_tolerance)
          old = body_at.call(now - tolerance - 1)
          expect(reason_of { verifier.verify(old, sign.call(old, now - tolerance - 1, secret), now: now) })
            .to eq(:timestamp_out_of_tolerance)
        else
          expect(tolerance).to be_nil # the provider signs no time: replays are caught by the event id
        end
      end
    end
  end

  it ":linear refuses a body without its signed webhookTimestamp, and a duplicated one" do
    v = described_class.new(:linear, secrets: ["k"])
    body = '{"type":"Issue"}'
    expect(reason_of { v.verify(body, { "Linear-Signature" => hmac("SHA256", "k", body) }, now: now) }).to eq(:missing_timestamp)
    dup = %({"webhookTimestamp":#{now * 1000},"type":"Issue","webhookTimestamp":#{(now - 3600) * 1000}})
    expect(reason_of { v.verify(dup, { "Linear-Signature" => hmac("SHA256", "k", dup) }, now: now) }).to eq(:duplicate_key)
  end

  it ":mollie takes its signature with or without the sha256= prefix, and nothing else around it" do
    v = described_class.new(:mollie, secrets: ["k"])
    body = '{"resource":"event","id":"event_1","type":"payment-link.paid"}'
    expect(v.verify(body, { "X-Mollie-Signature" => hmac("SHA256", "k", body) }, now: now).event_id).to eq("event_1")
    expect(reason_of { v.verify(body, { "X-Mollie-Signature" => "sha1=#{hmac("SHA256", "k", body)}" }, now: now) }).to eq(:malformed_signature)
    expect(reason_of { v.verify(body, {}, now: now) }).to eq(:missing_signature)
  end

  it ":docusign accepts any of its numbered signature headers, skipping malformed ones, and reads the tenth" do
    v = described_class.new(:docusign, secrets: ["k"])
    body = '{"event":"envelope-sent","data":{"envelopeId":"e1"}}'
    good = Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", "k", body))
    expect(v.verify(body, { "X-DocuSign-Signature-1" => "not base64!", "X-DocuSign-Signature-3" => good }, now: now).event_type)
      .to eq("envelope-sent")
    expect(v.verify(body, { "X-DocuSign-Signature-10" => good }, now: now).event_type).to eq("envelope-sent")
    expect(reason_of { v.verify(body, { "X-DocuSign-Signature-1" => "not base64!" }, now: now) }).to eq(:malformed_signature)
    expect(reason_of { v.verify(body, { "X-DocuSign-Signature-11" => good }, now: now) }).to eq(:missing_signature)
    other = Base64.strict_encode64(OpenSSL::HMAC.digest("SHA256", "other", body))
    expect(reason_of { v.verify(body, { "X-DocuSign-Signature-1" => other, "X-DocuSign-Signature-2" => other }, now: now) })
      .to eq(:signature_mismatch)
  end

  it ":lemonsqueezy takes the type from the signed meta.event_name, never the X-Event-Name header" do
    body = '{"meta":{"event_name":"order_created"}}'
    ev = described_class.new(:lemonsqueezy, secrets: ["k"]).verify(body, { "X-Signature" => hmac("SHA256", "k", body), "X-Event-Name" => "x" }, now: now)
    expect(ev.event_type).to eq("order_created")
  end

  describe "challenges" do
    it ":zoom answers endpoint.url_validation with plainToken and its HMAC under the secret token" do
      body = '{"event":"endpoint.url_validation","payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680}'
      h = { "x-zm-signature" => "v0=#{hmac("SHA256", "tok", "v0:#{now}:#{body}")}", "x-zm-request-timestamp" => now.to_s }
      ev = described_class.new(:zoom, secrets: ["tok"]).verify(body, h, now: now)
      expect(JSON.parse(ev.challenge)).to eq("plainToken" => "qgg8vlvZRS6UYooatFL8Aw",
                                             "encryptedToken" => hmac("SHA256", "tok", "qgg8vlvZRS6UYooatFL8Aw"))
      expect(reason_of { described_class.new(:zoom, secrets: ["other"]).verify(body, h, now: now) }).to eq(:signature_mismatch)
    end

    it ":slack answers a signed url_verification with its challenge, and only a signed one" do
      body = '{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}'
      h = { "X-Slack-Signature" => "v0=#{hmac("SHA256", "ss", "v0:#{now}:#{body}")}", "X-Slack-Request-Timestamp" => now.to_s }
      v = described_class.new(:slack, secrets: ["ss"])
      expect(JSON.parse(v.verify(body, h, now: now).challenge)).to eq("challenge" => "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
      expect(reason_of { v.verify(body, h.merge("X-Slack-Signature" => "v0=#{"0" * 64}"), now: now) }).to eq(:signature_mismatch)
      other = '{"type":"event_callback","event_id":"Ev1"}'
      expect(v.verify(other, h.merge("X-Slack-Signature" => "v0=#{hmac("SHA256", "ss", "v0:#{now}:#{other}")}"), now: now).challenge).to be_nil
    end

    it "the Receiver answers a challenge and stores nothing; other deliveries are stored" do
      store = recording_store
      body = '{"token":"t","challenge":"abc","type":"url_verification"}'
      ts = Time.now.to_i
      env = { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/json",
              "HTTP_X_SLACK_SIGNATURE" => "v0=#{hmac("SHA256", "ss", "v0:#{ts}:#{body}")}", "HTTP_X_SLACK_REQUEST_TIMESTAMP" => ts.to_s }
      r = WebhookInbox::Receiver.new(provider: :slack, secrets: ["ss"], source_scope: "slack:T1:live", inbox: store)
      status, headers, out = r.receive(body, env).to_rack
      expect([status, headers["Content-Type"], JSON.parse(out.join)]).to eq([200, "application/json", { "challenge" => "abc" }])
      expect(store.inserts).to be_empty
      event = '{"type":"event_callback","event_id":"Ev1"}'
      env2 = env.merge("HTTP_X_SLACK_SIGNATURE" => "v0=#{hmac("SHA256", "ss", "v0:#{ts}:#{event}")}")
      expect(r.receive(event, env2).http_status).to eq(200)
      expect(store.inserts.map { |i| i[:event_id] }).to eq(["Ev1"])
      bad = env.merge("HTTP_X_SLACK_SIGNATURE" => "v0=#{"0" * 64}")
      expect(r.receive(body, bad).http_status).to eq(401)
    end
  end

  describe ":paypal (RSA-SHA256 by a configured certificate over id|time|webhook id|crc32)" do
    # As PayPal signs (docs: "verify webhook signature", self-verification): transmission id,
    # transmission time, the endpoint's webhook id and the body's CRC-32 in decimal, joined by
    # "|", RSA-SHA256 by the certificate PAYPAL-CERT-URL names, base64.
    let(:rsa) { OpenSSL::PKey::RSA.new(2048) }
    let(:cert_id) { "CERT-360caa42-fca2a594-a5cafa77" }
    let(:webhook_id) { "8PT597110X687430LKGECATA" }
    let(:body) { JSON.generate("id" => "WH-2WR32451HC0233532-67976317FL4543714", "event_type" => "PAYMENT.CAPTURE.COMPLETED",
                               "create_time" => "2023-11-14T22:13:20.000Z", "resource" => { "id" => "42311647XV020574X" }) }
    let(:verifier) { described_class.new(:paypal, secrets: [secret]) }

    let(:t0) { now } # 2023-11-14T22:13:20Z

    def cert(key) = paypal_secret(key, from: t0 - 86_400, to: t0 + 365 * 86_400).split(":", 3).last

    def secret(key: rsa, id: webhook_id, cid: cert_id, from: t0 - 86_400, to: t0 + 365 * 86_400)
      paypal_secret(key, from: from, to: to, webhook_id: id, cert_id: cid)
    end

    def headers(b = body, time: "2023-11-14T22:13:20Z", key: rsa, hook: webhook_id, url: nil, tid: "b2384410-f8d2-11ed-8b8f-3f1cf3ed7d15")
      paypal_headers(b, key: key, time: time, hook: hook, tid: tid,
                        url: url || "https://api.sandbox.paypal.com/v1/notifications/certs/#{cert_id}")
    end

    # The committed vector (spec/fixtures/vectors/generator/paypal.sh: OpenSSL CLI, gzip's CRC-32)
    JSON.parse(File.read(File.join(vectors_dir, "paypal-signatures.json")))["cases"].each do |c|
      it "verifies the OpenSSL-signed vector #{c["name"]} and refuses it tampered, under another certificate, or stale" do
        v = described_class.new(:paypal, secrets: [c["secret"]])
        expect(Zlib.crc32(c["body"])).to eq(c["crc32"])
        ev = v.verify(c["body"], c["headers"], now: c["now"])
        expect([ev.event_id, ev.event_type]).to eq(c.values_at("event_id", "event_type"))
        expect(reason_of { v.verify(c["body"].sub("30.00", "31.00"), c["headers"], now: c["now"]) }).to eq(:signature_mismatch)
        expect(reason_of { v.verify(c["body"], c["headers"].merge("PAYPAL-TRANSMISSION-ID" => c["headers"]["PAYPAL-TRANSMISSION-ID"].tr("b", "c")), now: c["now"]) })
          .to eq(:signature_mismatch)
        expect(reason_of { described_class.new(:paypal, secrets: [c["wrong_secret"]]).verify(c["body"], c["headers"], now: c["now"]) })
          .to eq(:signature_mismatch)
        expect(reason_of { v.verify(c["body"], c["headers"], now: c["now"] + 301) }).to eq(:timestamp_out_of_tolerance)
      end
    end

    it "verifies, reads the body's id and event_type and the signed transmission time" do
      ev = verifier.verify(body, headers, now: now)
      expect([ev.event_id, ev.event_type]).to eq(%w[WH-2WR32451HC0233532-67976317FL4543714 PAYMENT.CAPTURE.COMPLETED])
      expect(verifier.verify(body, headers(url: "https://api.paypal.com/v1/notifications/certs/#{cert_id}"), now: now).event_id).to eq(ev.event_id)
      expect(verifier.verify(body, headers(time: "2023-11-14T23:13:20+01:00"), now: now).event_type).to eq(ev.event_type)
    end

    it "refuses a tampered body, transmission id or time, another key, and another webhook id" do
      h = headers
      expect(reason_of { verifier.verify(body.sub("COMPLETED", "REFUNDED"), h, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(body, h.merge("PAYPAL-TRANSMISSION-ID" => "x#{h["PAYPAL-TRANSMISSION-ID"]}"), now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(body, h.merge("PAYPAL-TRANSMISSION-TIME" => "2023-11-14T22:13:21Z"), now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(body, headers(key: OpenSSL::PKey::RSA.new(2048)), now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(body, headers(hook: "OTHERWEBHOOK1"), now: now) }).to eq(:signature_mismatch)
      expect(reason_of { described_class.new(:paypal, secrets: [secret(id: "OTHERWEBHOOK1")]).verify(body, h, now: now) }).to eq(:signature_mismatch)
    end

    it "refuses a certificate URL off PayPal's hosts or paths, and a certificate it does not have (naming its id)" do
      ["http://api.paypal.com/v1/notifications/certs/#{cert_id}", "https://api.paypal.com.evil.example/v1/notifications/certs/#{cert_id}",
       "https://evil.example/v1/notifications/certs/#{cert_id}", "https://api.paypal.com/v2/other/#{cert_id}",
       "https://api.paypal.com/v1/notifications/certs/#{cert_id}?x=1", "https://api.paypal.com/v1/notifications/certs/../#{cert_id}",
       "https://user@api.paypal.com/v1/notifications/certs/#{cert_id}"].each do |url|
        expect(reason_of { verifier.verify(body, headers(url: url), now: now) }).to eq(:malformed_signature), url
      end
      unknown = headers(url: "https://api.paypal.com/v1/notifications/certs/CERT-new-one")
      expect { verifier.verify(body, unknown, now: now) }.to raise_error(WebhookInbox::VerificationError, /CERT-new-one/) { |e|
        expect(e.reason).to eq(:unknown_key) # 401, and kept by keep_refused for reverify once it is added
        expect(e.message).not_to include(webhook_id, "BEGIN")
      }
    end

    it "refuses a certificate outside its validity period, and a stale or future transmission time" do
      expired = described_class.new(:paypal, secrets: [secret(from: now - 7200, to: now - 3600)])
      expect { expired.verify(body, headers, now: now) }.to raise_error(WebhookInbox::VerificationError, /not valid now/)
      early = described_class.new(:paypal, secrets: [secret(from: now + 3600, to: now + 7200)])
      expect(reason_of { early.verify(body, headers, now: now) }).to eq(:signature_mismatch)
      expect(reason_of { verifier.verify(body, headers, now: now + 301) }).to eq(:timestamp_out_of_tolerance)
      expect(reason_of { verifier.verify(body, headers, now: now - 301) }).to eq(:timestamp_out_of_tolerance)
      expect(described_class.new(:paypal, secrets: [secret], tolerance: 600).verify(body, headers, now: now + 500).event_id).to start_with("WH-")
    end

    it "refuses missing headers, another algorithm, a malformed time or signature, and bad secrets" do
      h = headers
      expect(reason_of { verifier.verify(body, h.except("PAYPAL-TRANSMISSION-SIG"), now: now) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify(body, h.except("PAYPAL-TRANSMISSION-ID"), now: now) }).to eq(:missing_id)
      expect(reason_of { verifier.verify(body, h.except("PAYPAL-TRANSMISSION-TIME"), now: now) }).to eq(:missing_timestamp)
      expect(reason_of { verifier.verify(body, h.except("PAYPAL-CERT-URL"), now: now) }).to eq(:malformed_signature)
      # unsigned, and RSA-SHA256 is the only algorithm tried: absent (as in a kept delivery) is SHA256withRSA
      expect(verifier.verify(body, h.except("PAYPAL-AUTH-ALGO"), now: now).event_id).to start_with("WH-")
      expect(reason_of { verifier.verify(body, h.merge("PAYPAL-AUTH-ALGO" => "SHA1withRSA"), now: now) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, h.merge("PAYPAL-TRANSMISSION-SIG" => "AAAA"), now: now) }).to eq(:malformed_signature)
      doubled = body.sub('"id":"WH-', '"id":"WH-other","id":"WH-') # jsonb would keep the second id
      expect(reason_of { verifier.verify(doubled, headers(doubled), now: now) }).to eq(:duplicate_key)
      ["1700000000", "2023-11-14 22:13:20Z", "2023-02-30T22:13:20Z", "2023-11-14T22:13:20"].each do |t|
        expect(reason_of { verifier.verify(body, headers(time: t), now: now) }).to eq(:malformed_timestamp), t
      end
      pem = cert(rsa)
      ["#{webhook_id}:#{pem}", "#{webhook_id}:#{cert_id}:not a pem", ":#{cert_id}:#{pem}", "#{webhook_id}:#{cert_id}:#{rsa.public_to_pem.strip}",
       "#{webhook_id}:#{cert_id}:#{cert(OpenSSL::PKey::RSA.new(1024))}"].each do |k|
        expect { described_class.new(:paypal, secrets: [k]) }
          .to raise_error(WebhookInbox::ConfigurationError, /WEBHOOK_ID:CERT_ID|certificate/) { |x| expect(x.message).not_to include(webhook_id) }
      end
    end

    it "takes several certificates (rotation) and webhook ids; a retry reaches the Receiver under the body's id, which the inbox dedupes on" do
      new_key = OpenSSL::PKey::RSA.new(2048)
      both = [secret, secret(key: new_key, cid: "CERT-next")]
      v = described_class.new(:paypal, secrets: both)
      expect(v.verify(body, headers(key: new_key, url: "https://api-m.paypal.com/v1/notifications/certs/CERT-next"), now: now).event_id).to start_with("WH-")
      # the Receiver checks against the clock: a certificate and transmission times around it
      wall = Time.now.to_i
      store = recording_store
      r = WebhookInbox::Receiver.new(provider: :paypal, secrets: [secret(from: wall - 86_400, to: wall + 86_400)],
                                     source_scope: "paypal:live", inbox: store)
      env_of = ->(h) { h.to_h { |k, val| ["HTTP_#{k.tr("-", "_")}", val] }.merge("REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/json") }
      first, again = [[wall - 60, "t1"], [wall, "t2"]].map { |t, tid| env_of.call(headers(time: Time.at(t).utc.iso8601, tid: tid)) }
      expect(r.receive(body, first).http_status).to eq(200)
      expect(r.receive(body, again).http_status).to eq(200) # PayPal's retry: a new transmission, the same event
      expect(r.receive(body.sub("COMPLETED", "DENIED"), again).http_status).to eq(401)
      unknown = env_of.call(headers(time: Time.at(wall).utc.iso8601, url: "https://api.paypal.com/v1/notifications/certs/CERT-next2"))
      expect(r.receive(body, unknown).http_status).to eq(401)
      expect(store.inserts.map { |i| i[:event_id] }).to eq(["WH-2WR32451HC0233532-67976317FL4543714"] * 2)
    end
  end
end
