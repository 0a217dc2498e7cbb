# frozen_string_literal: true

require "spec_helper"
require_relative "../support/verifier_helpers"
require "json"
require "openssl"
require "base64"
require "securerandom"

VECTORS_DIR = ENV.fetch("WEBHOOK_VECTORS", File.expand_path("../fixtures/vectors", __dir__))

RSpec.describe WebhookInbox::Verifier do
  def hmac_hex(key, data, alg = "SHA256") = OpenSSL::HMAC.hexdigest(alg, key, data)
  def hmac_b64(key, data, alg = "SHA256") = Base64.strict_encode64(OpenSSL::HMAC.digest(alg, key, data))

  include VerifierHelpers

  # Flips one bit of byte i of s.
  def flip(s, i)
    b = s.b.dup
    b.setbyte(i, b.getbyte(i) ^ 0x01)
    b
  end

  NOW = 1_700_000_000

  describe "public vectors" do
    provider_vectors = JSON.parse(File.read(File.join(VECTORS_DIR, "provider-signatures.json")))["cases"]

    provider_vectors.each do |c|
      context "#{c["provider"]} (#{c["source"]})" do
        let(:verifier) { described_class.new(c["provider"].to_sym, secrets: [c["secret"]]) }
        let(:now) { c["now"] || NOW }

        it "verifies" do
          event = verifier.verify(c["body"], c["headers"], now: now)
          expect(event.provider).to eq(c["provider"].to_sym)
          expect(event.event_id).to be_a(String).and(satisfy { |s| !s.empty? })
          expect(event.body).to eq(c["body"])
        end

        it "fails when any byte of the body is flipped" do
          c["body"].bytesize.times do |i|
            expect(reason_of { verifier.verify(flip(c["body"], i), c["headers"], now: now) })
              .not_to be_nil, "byte #{i} flipped still verified"
          end
        end

        it "fails when any byte of a signature or timestamp header is flipped" do
          c["headers"].each do |name, value|
            next if name =~ /topic|webhook-id\z|delivery/i && c["provider"] != "standard_webhooks"

            value.bytesize.times do |i|
              headers = c["headers"].merge(name => flip(value, i))
              expect(reason_of { verifier.verify(c["body"], headers, now: now) })
                .not_to be_nil, "#{name} byte #{i} flipped still verified"
            end
          end
        end
      end
    end

    it "reports the event id and type each provider sends" do
      by = provider_vectors.to_h { |c| [c["provider"], c] }
      ev = lambda do |p|
        c = by.fetch(p)
        described_class.new(p.to_sym, secrets: c["secret"]).verify(c["body"], c["headers"], now: c["now"] || NOW)
      end
      expect(ev.("stripe").event_id).to eq("evt_test_webhook")
      expect(ev.("stripe").timestamp).to eq(1_700_000_000)
      expect(ev.("paddle").event_id).to eq("evt_01h")
      expect(ev.("paddle").event_type).to eq("transaction.completed")
      expect(ev.("standard_webhooks").event_id).to eq("msg_p5jXN8AQM9LWM0D4loKWxJek")
      expect(ev.("shopify").event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(by.fetch("shopify")["body"])) # issue 16 item 10
      expect(ev.("shopify").event_type).to eq("orders/create")
      expect(ev.("github").event_id).to eq(OpenSSL::Digest::SHA256.hexdigest("Hello, World!"))
      expect(ev.("github").timestamp).to be_nil
      expect(ev.("slack").timestamp).to eq(1_531_420_618)
    end

    context "Didit fixtures" do
      didit = JSON.parse(File.read(File.join(VECTORS_DIR, "didit-webhook-signatures.json")))
      header = { "raw" => "X-Signature", "v2" => "X-Signature-V2", "simple" => "X-Signature-Simple" }
      let(:verifier) { described_class.new(:didit, secrets: [didit["secret"]], allow_simple: true) }

      didit["cases"].each do |name, c|
        %w[raw v2 simple].each do |kind|
          it "#{name}: #{kind} verifies" do
            event = verifier.verify(c["body"], { header[kind] => c["signatures"][kind] }, now: didit["timestamp"])
            if kind == "simple" # the id comes from the four fields Simple signs, never the body's event_id
              o = JSON.parse(c["body"])
              signed = o.values_at("timestamp", "session_id", "status", "webhook_type").join(":")
              expect(event.event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(signed))
              expect(event.body_signed).to be(false)
            else
              expect(event.event_id).to eq("9c0c8b8a-1111-4222-9333-444444444444")
              expect([event.body, event.body_signed]).to eq([c["body"], true])
            end
            expect(event.event_type).to eq("status.updated")
            expect(event.timestamp).to eq(didit["timestamp"])
          end

          it "#{name}: #{kind} fails when any signature byte is flipped" do
            sig = c["signatures"][kind]
            sig.bytesize.times do |i|
              expect(reason_of { verifier.verify(c["body"], { header[kind] => flip(sig, i) }, now: didit["timestamp"]) })
                .not_to be_nil
            end
          end
        end

        it "#{name}: raw and v2 fail when any body byte is flipped" do
          body = c["body"]
          (0...body.bytesize).step(3) do |i|
            %w[raw v2].each do |kind|
              r = reason_of { verifier.verify(flip(body, i), { header[kind] => c["signatures"][kind] }, now: didit["timestamp"]) }
              expect(r).not_to be_nil, "#{kind}: byte #{i} flipped still verified"
            end
          end
        end

        it "#{name}: v2 survives re-serialization, raw does not" do
          reserialized = JSON.pretty_generate(JSON.parse(c["body"]).to_a.reverse.to_h)
          expect(verifier.verify(reserialized, { "X-Signature-V2" => c["signatures"]["v2"] }, now: didit["timestamp"]).event_id)
            .to eq("9c0c8b8a-1111-4222-9333-444444444444")
          expect(reason_of { verifier.verify(reserialized, { "X-Signature" => c["signatures"]["raw"] }, now: didit["timestamp"]) })
            .to eq(:signature_mismatch)
        end
      end

      it "rejects X-Signature-Simple unless allow_simple is set" do
        c = didit["cases"]["basic_approved"]
        strict = described_class.new(:didit, secrets: [didit["secret"]])
        expect(reason_of { strict.verify(c["body"], { "X-Signature-Simple" => c["signatures"]["simple"] }, now: didit["timestamp"]) })
          .to eq(:missing_signature)
      end

      it "Simple authenticates its four fields: changing status fails" do
        c = didit["cases"]["basic_approved"]
        body = c["body"].sub('"status":"Approved","timestamp"', '"status":"Declined","timestamp"')
        expect(body).not_to eq(c["body"])
        expect(reason_of { verifier.verify(body, { "X-Signature-Simple" => c["signatures"]["simple"] }, now: didit["timestamp"]) })
          .to eq(:signature_mismatch)
      end

      it "checks the body timestamp against the tolerance" do
        c = didit["cases"]["basic_approved"]
        h = { "X-Signature" => c["signatures"]["raw"] }
        expect(reason_of { verifier.verify(c["body"], h, now: didit["timestamp"] + 301) }).to eq(:timestamp_out_of_tolerance)
        expect(reason_of { verifier.verify(c["body"], h, now: didit["timestamp"] - 301) }).to eq(:timestamp_out_of_tolerance)
        expect(verifier.verify(c["body"], h, now: didit["timestamp"] + 300).timestamp).to eq(didit["timestamp"])
      end

      # issue 9 item 2: the time checked is the signed one. "\u0031774970000" is the string
      # "1774970000" to Simple's signed string and to V2's canonical form; it must not make
      # the verifier fall back to the unsigned X-Timestamp header.
      it "replays a captured Simple signature with an escaped timestamp and a fresh X-Timestamp: refused" do
        c = didit["cases"]["basic_approved"]
        later = didit["timestamp"] + 86_400
        forged = JSON.parse(c["body"]).merge("event_id" => "replayed-1", "timestamp" => "TS").then { |o| JSON.generate(o) }
                     .sub('"TS"', %("\\u0031#{didit["timestamp"].to_s[1..]}"))
        expect(forged).to include('"timestamp":"\u0031774970000"')
        h = { "X-Signature-Simple" => c["signatures"]["simple"], "X-Timestamp" => later.to_s }
        expect(reason_of { verifier.verify(forged, h, now: later) }).to eq(:timestamp_out_of_tolerance)
        expect(verifier.verify(forged, h, now: didit["timestamp"]).timestamp).to eq(didit["timestamp"])
      end

      it "matches Didit's canonical form byte for byte (ensure_ascii=False)" do
        c = didit["cases"]["unicode_names"]
        canon = described_class.didit_canonical_json(c["body"])
        expect(canon).to include("José", "北京")
        expect(hmac_hex(didit["secret"], canon)).to eq(c["signatures"]["v2"])
      end
    end
  end

  describe ":didit" do
    let(:secret) { "didit_secret" }
    let(:verifier) { described_class.new(:didit, secrets: secret) }

    # issue 16 item 8: X-Timestamp is covered by no Didit signature. The body used to fall
    # back to it, so a captured delivery verified again a year later with a fresh header.
    it "never takes the time from X-Timestamp: a body without a timestamp is :missing_timestamp" do
      body = '{"event_id":"e1","webhook_type":"status.updated"}'
      year_later = NOW + (365 * 86_400)
      h = { "X-Signature" => hmac_hex(secret, body), "X-Timestamp" => year_later.to_s }
      expect(reason_of { verifier.verify(body, h, now: year_later) }).to eq(:missing_timestamp)
      expect(reason_of { verifier.verify(body, h.except("X-Timestamp"), now: NOW) }).to eq(:missing_timestamp)
      v2 = { "X-Signature-V2" => hmac_hex(secret, described_class.didit_canonical_json(body)), "X-Timestamp" => year_later.to_s }
      expect(reason_of { verifier.verify(body, v2, now: year_later) }).to eq(:missing_timestamp)
      simple = described_class.new(:didit, secrets: secret, allow_simple: true)
      sh = { "X-Signature-Simple" => hmac_hex(secret, ":::status.updated"), "X-Timestamp" => year_later.to_s }
      expect(reason_of { simple.verify(body, sh, now: year_later) }).to eq(:missing_timestamp)
      # with the time check off (tolerance: nil) it is accepted, and no unsigned time is reported
      unchecked = described_class.new(:didit, secrets: secret, tolerance: nil).verify(body, h, now: year_later)
      expect([unchecked.event_id, unchecked.timestamp]).to eq(["e1", nil])
      expect(verifier.header_names).not_to include("x-timestamp")
    end

    it "reports :malformed_payload when V2 is the only signature and the body is not JSON" do
      body = '{"event_id":"e1", "timestamp":'
      expect(reason_of { verifier.verify(body, { "X-Signature-V2" => hmac_hex(secret, body) }, now: NOW) }).to eq(:malformed_payload)
    end

    it "verifies V2 over bodies whose canonical form differs (floats, escapes, key order)" do
      body = %({"timestamp":#{NOW},"z":100.0,"a":[1.50,-0.0,1E-7,"\\u00e9\\/"],"event_id":"e\\u0031"})
      canon = %({"a":[1.5,0,1e-07,"é/"],"event_id":"e1","timestamp":#{NOW},"z":100})
      expect(described_class.didit_canonical_json(body)).to eq(canon)
      event = verifier.verify(body, { "X-Signature-V2" => hmac_hex(secret, canon) }, now: NOW)
      expect(event.event_id).to eq("e1")
    end

    it "reports :missing_signature with no signature header" do
      expect(reason_of { verifier.verify("{}", {}, now: NOW) }).to eq(:missing_signature)
    end

    # issue 9 item 2, V2: a string timestamp signed by V2, replayed with an escape.
    it "checks V2's signed string timestamp even when the replay escapes it" do
      old = NOW - 3600
      signed = %({"event_id":"e1","timestamp":"#{old}","webhook_type":"status.updated"})
      h = { "X-Signature-V2" => hmac_hex(secret, described_class.didit_canonical_json(signed)), "X-Timestamp" => NOW.to_s }
      forged = signed.sub(%("#{old}"), %("\\u00#{old.to_s[0].ord.to_s(16)}#{old.to_s[1..]}"))
      expect(forged).not_to eq(signed)
      expect(described_class.didit_canonical_json(forged)).to eq(described_class.didit_canonical_json(signed))
      expect(reason_of { verifier.verify(forged, h, now: NOW) }).to eq(:timestamp_out_of_tolerance)
      expect(verifier.verify(forged, h, now: old).timestamp).to eq(old)
      [%({"event_id":"e1","timestamp":null}), %({"event_id":"e1","timestamp":{"t":#{NOW}}}), %({"event_id":"e1","timestamp":"x#{NOW}"})].each do |b|
        r = reason_of { verifier.verify(b, { "X-Signature" => hmac_hex(secret, b), "X-Timestamp" => NOW.to_s }, now: NOW) }
        expect(r).to eq(:malformed_timestamp), b
      end
    end

    # issue 9 item 5: without an event_id the id is the SHA-256 of what the signature covers.
    it "derives V2's fallback id from the canonical form, so a re-spaced replay is the same event" do
      body = %({"timestamp":#{NOW},"webhook_type":"status.updated","n":1.50})
      h = { "X-Signature-V2" => hmac_hex(secret, described_class.didit_canonical_json(body)) }
      first = verifier.verify(body, h, now: NOW).event_id
      expect(first).to eq(OpenSSL::Digest::SHA256.hexdigest(described_class.didit_canonical_json(body)))
      expect(verifier.verify(body.sub(",", ", "), h, now: NOW).event_id).to eq(first)
      expect(verifier.verify(" #{body}\n", h, now: NOW).event_id).to eq(first)
      raw = { "X-Signature" => hmac_hex(secret, body) }
      expect(verifier.verify(body, raw, now: NOW).event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(body))
      simple = described_class.new(:didit, secrets: secret, allow_simple: true)
      signed = "#{NOW}:s:Approved:status.updated"
      sb = %({"session_id":"s","status":"Approved","timestamp":#{NOW},"webhook_type":"status.updated","x":1})
      sh = { "X-Signature-Simple" => hmac_hex(secret, signed) }
      expect(simple.verify(sb, sh, now: NOW).event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(signed))
      expect(simple.verify(sb.sub('"x":1', '"x":2'), sh, now: NOW).event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(signed))
    end

    # issue 9 item 1: V2 is tried before any key is involved, so its cost is bounded.
    it "refuses a V2 body whose canonical form would exceed 2x its size + 4 KiB, before any key check" do
      big = "[#{Array.new(20_000, "1e308").join(",")}]"
      h = { "X-Signature-V2" => "0" * 64 }
      e = begin
        verifier.verify(big, h, now: NOW)
      rescue WebhookInbox::VerificationError => err
        err
      end
      expect(e.reason).to eq(:payload_too_large)
      expect(e.message).to match(/canonical JSON .* would exceed #{2 * big.bytesize + 4096} bytes/)
      expect(e.message).not_to include("1e308")
      expect(reason_of { verifier.verify(big, h.merge("X-Signature" => "1" * 64), now: NOW) }).to eq(:payload_too_large)
      expect { described_class.didit_canonical_json(big) }
        .to raise_error(WebhookInbox::VerificationError) { |x| expect(x.reason).to eq(:payload_too_large) }
      # a raw signature that matches is checked first and never canonicalizes
      ok = %({"event_id":"e","timestamp":#{NOW},"a":[#{Array.new(2000, "1e308").join(",")}]})
      expect(verifier.verify(ok, { "X-Signature" => hmac_hex(secret, ok), "X-Signature-V2" => "0" * 64 }, now: NOW).event_id).to eq("e")
      # up to the bound the output is exact, and never larger than the bound
      edge = "[#{Array.new(12, "1e308").join(",")}]"
      expect(described_class.didit_canonical_json(edge).bytesize).to eq(12 * 309 + 13)
      expect(12 * 309 + 13).to be <= 2 * edge.bytesize + 4096
      floats = "[#{Array.new(5000) { |i| format("%.17g", (i + 0.5) / 7.0) }.join(",")}]"
      expect(described_class.didit_canonical_json(floats).bytesize).to be <= floats.bytesize
    end

    # V2 signs the canonical form, where the last of duplicate keys wins and key escapes
    # are decoded: a replayed body must not carry other id/type/timestamp values than
    # the ones the signature covers.
    it "takes V2's event id, type and timestamp only from what the signature covers" do
      old = NOW - 3600
      signed = %({"event_id":"e1","timestamp":#{old},"webhook_type":"status.updated"})
      h = { "X-Signature-V2" => hmac_hex(secret, described_class.didit_canonical_json(signed)) }
      expect(reason_of { verifier.verify(signed, h, now: NOW) }).to eq(:timestamp_out_of_tolerance)
      [%({"timestamp":#{NOW},#{signed[1..]}),                                   # fresh duplicate first
       %({"event_id":"e1","time\\u0073tamp":#{old},"webhook_type":"status.updated"})].each do |forged|
        expect(described_class.didit_canonical_json(forged)).to eq(described_class.didit_canonical_json(signed))
        r = reason_of { verifier.verify(forged, h.merge("X-Timestamp" => NOW.to_s), now: NOW) }
        expect(r).not_to be_nil, forged
      end
      fresh = %({"event_id":"e1","timestamp":#{NOW},"webhook_type":"status.updated"})
      h2 = { "X-Signature-V2" => hmac_hex(secret, described_class.didit_canonical_json(fresh)) }
      [%({"event_id":"e2",#{fresh[1..]}), %({"webhook_type":"x",#{fresh[1..]}),
       %({"event_id":"e2","event\\u005fid":"e1","timestamp":#{NOW},"webhook_type":"status.updated"})].each do |forged|
        r = reason_of { verifier.verify(forged, h2, now: NOW) }
        expect(r).to eq(:duplicate_key), forged # issue 16 item 12
      end
      # an escaped key alone is the key it decodes to (for the scan as for jsonb): the signed id
      escaped = %({"event\\u005fid":"e1","timestamp":#{NOW},"webhook_type":"status.updated"})
      expect(verifier.verify(escaped, h2, now: NOW).event_id).to eq("e1")
      expect(verifier.verify(fresh, h2, now: NOW).event_id).to eq("e1")
    end
  end

  describe ":stripe" do
    let(:secret) { "whsec_stripe_#{SecureRandom.hex(8)}" }
    let(:body) { %({"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","type":"x"}}}) }
    let(:verifier) { described_class.new(:stripe, secrets: [secret]) }

    def header(t, *sigs) = (["t=#{t}"] + sigs.map { |s| "v1=#{s}" }).join(",")
    def sign(key, t, b) = hmac_hex(key, "#{t}.#{b}")

    it "verifies and extracts id and type" do
      e = verifier.verify(body, { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }, now: NOW)
      expect([e.provider, e.event_id, e.event_type, e.timestamp]).to eq([:stripe, "evt_1", "payment_intent.succeeded", NOW])
    end

    it "returns an Event equal to one built with Event.new, every member set (it is filled member by member)" do
      e = verifier.verify(body, { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }, now: NOW)
      expect(e).to be_an_instance_of(WebhookInbox::Event)
      expect(e).to eq(WebhookInbox::Event.new(:stripe, "evt_1", "payment_intent.succeeded", NOW, body, true, nil))
      expect(e.body).to equal(body)
      expect([e.event_id.frozen?, e.event_type.frozen?, e.frozen?]).to eq([false, false, false])
      expect(e.event_type.encoding).to eq(Encoding::UTF_8)
    end

    it "accepts any of several v1 signatures and ignores v0" do
      h = "t=#{NOW},v0=#{"0" * 64},v1=#{"a" * 64},v1=#{sign(secret, NOW, body)}"
      expect(verifier.verify(body, { "Stripe-Signature" => h }, now: NOW).event_id).to eq("evt_1")
    end

    it "accepts any configured secret (rotation)" do
      v = described_class.new(:stripe, secrets: ["whsec_old", secret])
      expect(v.verify(body, { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }, now: NOW).event_id).to eq("evt_1")
      v2 = described_class.new(:stripe, secrets: ["whsec_old", "whsec_other"])
      expect(reason_of { v2.verify(body, { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }, now: NOW) })
        .to eq(:signature_mismatch)
    end

    it "enforces the tolerance in both directions, at the boundary" do
      h = { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }
      expect(verifier.verify(body, h, now: NOW + 300).timestamp).to eq(NOW)
      expect(verifier.verify(body, h, now: NOW - 300).timestamp).to eq(NOW)
      expect(reason_of { verifier.verify(body, h, now: NOW + 301) }).to eq(:timestamp_out_of_tolerance)
      expect(reason_of { verifier.verify(body, h, now: NOW - 301) }).to eq(:timestamp_out_of_tolerance)
      expect(verifier.verify(body, h, now: Time.at(NOW + 10)).event_id).to eq("evt_1")
    end

    it "uses the current time when now: is omitted" do
      t = Time.now.to_i
      expect(verifier.verify(body, { "Stripe-Signature" => header(t, sign(secret, t, body)) }).timestamp).to eq(t)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }) })
        .to eq(:timestamp_out_of_tolerance)
    end

    it "skips the time check with tolerance: nil" do
      v = described_class.new(:stripe, secrets: [secret], tolerance: nil)
      expect(v.verify(body, { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }, now: 0).event_id).to eq("evt_1")
    end

    it "names what is wrong with a bad header" do
      good = sign(secret, NOW, body)
      expect(reason_of { verifier.verify(body, {}, now: NOW) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "" }, now: NOW) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "v1=#{good}" }, now: NOW) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "t=abc,v1=#{good}" }, now: NOW) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "t=#{NOW}" }, now: NOW) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "t=#{NOW},v1=#{good[0..-3]}" }, now: NOW) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "t=#{NOW},v1=#{good}00" }, now: NOW) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "t=#{NOW},v1=#{"z" * 64}" }, now: NOW) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, { "Stripe-Signature" => "t=#{NOW + 1},v1=#{good}" }, now: NOW) }).to eq(:signature_mismatch)
    end

    it "fails on a body that was parsed and re-serialized" do
      h = { "Stripe-Signature" => header(NOW, sign(secret, NOW, body)) }
      expect(reason_of { verifier.verify(JSON.generate(JSON.parse(body)).sub("{", "{ "), h, now: NOW) }).to eq(:signature_mismatch)
    end

    it "accepts every header spelling, a Rack env, and ActionDispatch-like objects" do
      sig = header(NOW, sign(secret, NOW, body))
      ["Stripe-Signature", "stripe-signature", "STRIPE-SIGNATURE", "stripe_signature", "HTTP_STRIPE_SIGNATURE",
       "sTrIpE-sIgNaTuRe", :stripe_signature, "Http-Stripe-Signature"].each do |k|
        expect(verifier.verify(body, { k => sig }, now: NOW).event_id).to eq("evt_1"), k.inspect
      end
      env = { "REQUEST_METHOD" => "POST", "HTTP_STRIPE_SIGNATURE" => sig, "rack.input" => StringIO.new(body) }
      expect(verifier.verify(body, env, now: NOW).event_id).to eq("evt_1")
      expect(verifier.verify(body, { "Stripe-Signature" => [sig] }, now: NOW).event_id).to eq("evt_1")
      headers = Struct.new(:env).new(env)
      expect(verifier.verify(body, headers, now: NOW).event_id).to eq("evt_1")
    end

    it "falls back to the body's SHA-256 for the id when the body has none" do
      b = "not json at all"
      e = verifier.verify(b, { "Stripe-Signature" => header(NOW, sign(secret, NOW, b)) }, now: NOW)
      expect(e.event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(b))
      expect(e.event_type).to be_nil
    end

    it "decodes JSON escapes in the extracted id" do
      b = %({"id":"evt_\\u00e9\\n","type":"a\\/b"})
      e = verifier.verify(b, { "Stripe-Signature" => header(NOW, sign(secret, NOW, b)) }, now: NOW)
      expect([e.event_id, e.event_type]).to eq(["evt_é\n", "a/b"])
      expect(e.event_id.encoding).to eq(Encoding::UTF_8)
    end

    it "verifies non-UTF-8 bodies byte for byte" do
      b = "\xff\xfe{\x00binary".b
      e = verifier.verify(b, { "Stripe-Signature" => header(NOW, sign(secret, NOW, b)) }, now: NOW)
      expect(e.event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(b))
    end
  end

  describe ":standard_webhooks" do
    let(:key) { SecureRandom.random_bytes(24) }
    let(:secret) { "whsec_#{Base64.strict_encode64(key)}" }
    let(:body) { %({"type":"user.created","data":{}}) }
    let(:verifier) { described_class.new(:standard_webhooks, secrets: secret) }
    def sig(k, id, t, b) = "v1,#{hmac_b64(k, "#{id}.#{t}.#{b}")}"

    it "verifies webhook-* and svix-* headers and a list of signatures" do
      s = sig(key, "msg_1", NOW, body)
      e = verifier.verify(body, { "webhook-id" => "msg_1", "webhook-timestamp" => NOW.to_s, "webhook-signature" => s }, now: NOW)
      expect([e.event_id, e.event_type, e.timestamp]).to eq(["msg_1", "user.created", NOW])
      e = verifier.verify(body, { "svix-id" => "msg_1", "svix-timestamp" => NOW.to_s, "svix-signature" => "v1a,#{"A" * 86} v1,#{"A" * 44} #{s}" }, now: NOW)
      expect(e.event_id).to eq("msg_1")
      expect(described_class.new(:svix, secrets: secret).verify(body, { "svix-id" => "msg_1", "svix-timestamp" => NOW.to_s, "svix-signature" => s }, now: NOW).provider)
        .to eq(:standard_webhooks)
    end

    it "signs the id and timestamp too" do
      s = sig(key, "msg_1", NOW, body)
      h = { "webhook-id" => "msg_2", "webhook-timestamp" => NOW.to_s, "webhook-signature" => s }
      expect(reason_of { verifier.verify(body, h, now: NOW) }).to eq(:signature_mismatch)
      h = { "webhook-id" => "msg_1", "webhook-timestamp" => (NOW + 1).to_s, "webhook-signature" => s }
      expect(reason_of { verifier.verify(body, h, now: NOW) }).to eq(:signature_mismatch)
    end

    it "names missing parts" do
      s = sig(key, "msg_1", NOW, body)
      expect(reason_of { verifier.verify(body, { "webhook-timestamp" => NOW.to_s, "webhook-signature" => s }, now: NOW) }).to eq(:missing_id)
      expect(reason_of { verifier.verify(body, { "webhook-id" => "msg_1", "webhook-signature" => s }, now: NOW) }).to eq(:missing_timestamp)
      expect(reason_of { verifier.verify(body, { "webhook-id" => "msg_1", "webhook-timestamp" => "12x", "webhook-signature" => s }, now: NOW) }).to eq(:malformed_timestamp)
      expect(reason_of { verifier.verify(body, { "webhook-id" => "msg_1", "webhook-timestamp" => NOW.to_s }, now: NOW) }).to eq(:missing_signature)
      expect(reason_of { verifier.verify(body, { "webhook-id" => "msg_1", "webhook-timestamp" => NOW.to_s, "webhook-signature" => "v1a,abc" }, now: NOW) }).to eq(:malformed_signature)
      expect(reason_of { verifier.verify(body, { "webhook-id" => "msg_1", "webhook-timestamp" => (NOW - 301).to_s, "webhook-signature" => sig(key, "msg_1", NOW - 301, body) }, now: NOW) })
        .to eq(:timestamp_out_of_tolerance)
    end

    it "rejects a secret that is not base64 after whsec_" do
      expect { described_class.new(:standard_webhooks, secrets: "whsec_***") }
        .to raise_error(WebhookInbox::ConfigurationError, /base64/) { |e| expect(e.message).not_to include("***") }
    end
  end

  describe ":github, :shopify, :slack, :paddle" do
    let(:secret) { "s3cr3t-#{SecureRandom.hex(4)}" }

    it ":github needs the sha256= prefix and (event_id: :provider) takes id/type from headers" do
      v = described_class.new(:github, secrets: ["old", secret], event_id: :provider)
      body = '{"action":"opened"}'
      h = { "X-Hub-Signature-256" => "sha256=#{hmac_hex(secret, body)}", "X-GitHub-Delivery" => "d-1", "X-GitHub-Event" => "pull_request" }
      e = v.verify(body, h, now: NOW)
      expect([e.event_id, e.event_type, e.timestamp]).to eq(["d-1", "pull_request", nil])
      # octokit's verify compares the lowercase hex string: an upper-case one is refused
      expect(reason_of { v.verify(body, h.merge("X-Hub-Signature-256" => "sha256=#{hmac_hex(secret, body).upcase}"), now: NOW) })
        .to eq(:malformed_signature)
      expect(reason_of { v.verify(body, h.merge("X-Hub-Signature-256" => hmac_hex(secret, body)), now: NOW) }).to eq(:malformed_signature)
      expect(reason_of { v.verify(body, h.merge("X-Hub-Signature-256" => "sha1=#{hmac_hex(secret, body, "SHA1")}"), now: NOW) }).to eq(:malformed_signature)
    end

    # The inbox refuses text that is not UTF-8 or holds NUL (ArgumentError, a 500 from the
    # endpoint): a verified delivery with such an id or type is a malformed request instead.
    it "rejects an event id or type that is not UTF-8 or holds NUL (headers and JSON bodies)" do
      v = described_class.new(:github, secrets: secret, event_id: :provider)
      body = '{"action":"opened"}'
      h = { "X-Hub-Signature-256" => "sha256=#{hmac_hex(secret, body)}", "X-GitHub-Delivery" => "d-1", "X-GitHub-Event" => "push" }
      [{ "X-GitHub-Delivery" => "d-\xff".b }, { "X-GitHub-Delivery" => "d\0-1" }, { "X-GitHub-Event" => "p\xc3".b },
       { "X-GitHub-Event" => "p\0" }].each do |bad|
        expect(reason_of { v.verify(body, h.merge(bad), now: NOW) }).to eq(:malformed_payload), bad.inspect
      end
      expect(v.verify(body, h.merge("X-GitHub-Delivery" => "d-é".b), now: NOW).event_id).to eq("d-é")
      p = described_class.new(:paddle, secrets: secret)
      ['{"event_id":"e\\u0000"}', '{"event_id":"e\\ud800"}', '{"event_id":"e","event_type":"t\\u0000"}'].each do |b|
        ph = { "Paddle-Signature" => "ts=#{NOW};h1=#{hmac_hex(secret, "#{NOW}:#{b}")}" }
        expect(reason_of { p.verify(b, ph, now: NOW) }).to eq(:malformed_payload), b
      end
    end

    it ":shopify uses base64 and (event_id: :provider) X-Shopify-Event-Id as a fallback id" do
      v = described_class.new(:shopify, secrets: secret, event_id: :provider)
      body = '{"id":820982911946154508}'
      h = { "X-Shopify-Hmac-Sha256" => hmac_b64(secret, body), "X-Shopify-Event-Id" => "ev-9", "X-Shopify-Topic" => "orders/paid" }
      e = v.verify(body, h, now: NOW)
      expect([e.event_id, e.event_type]).to eq(["ev-9", "orders/paid"])
      expect(reason_of { v.verify(body, h.merge("X-Shopify-Hmac-Sha256" => hmac_hex(secret, body)), now: NOW) }).to eq(:malformed_signature)
    end

    # issue 9 item 8: GitHub and Shopify ids come from headers the signature does not cover.
    it "event_id: :body_sha256 deduplicates GitHub and Shopify replays that bring a new id header" do
      body = '{"action":"opened","number":7}'
      digest = OpenSSL::Digest::SHA256.hexdigest(body)
      gh = described_class.new(:github, secrets: secret, event_id: :body_sha256)
      h = { "X-Hub-Signature-256" => "sha256=#{hmac_hex(secret, body)}", "X-GitHub-Delivery" => "d-1", "X-GitHub-Event" => "pull_request" }
      expect(described_class.new(:github, secrets: secret, event_id: :provider).verify(body, h.merge("X-GitHub-Delivery" => "d-2"), now: NOW).event_id).to eq("d-2")
      %w[d-1 d-2].each do |delivery|
        e = gh.verify(body, h.merge("X-GitHub-Delivery" => delivery), now: NOW)
        expect([e.event_id, e.event_type]).to eq([digest, "pull_request"])
      end
      sh = described_class.new(:shopify, secrets: secret, event_id: :body_sha256)
      hs = { "X-Shopify-Hmac-Sha256" => hmac_b64(secret, body), "X-Shopify-Webhook-Id" => "w-1", "X-Shopify-Topic" => "orders/paid" }
      expect(sh.verify(body, hs, now: NOW).event_id).to eq(digest)
      expect(sh.verify(body, hs.merge("X-Shopify-Webhook-Id" => "w-2"), now: NOW).event_id).to eq(digest)
      expect(sh.event_id).to eq(:body_sha256)
      expect { described_class.new(:github, secrets: secret, event_id: :delivery) }
        .to raise_error(WebhookInbox::ConfigurationError, /event_id/)
    end

    it ":slack signs v0:<ts>:<body> and checks the timestamp" do
      v = described_class.new(:slack, secrets: secret)
      body = "token=x&team_id=T1"
      h = { "X-Slack-Request-Timestamp" => NOW.to_s, "X-Slack-Signature" => "v0=#{hmac_hex(secret, "v0:#{NOW}:#{body}")}" }
      expect(v.verify(body, h, now: NOW).timestamp).to eq(NOW)
      expect(reason_of { v.verify(body, h, now: NOW + 301) }).to eq(:timestamp_out_of_tolerance)
      expect(reason_of { v.verify(body, h.except("X-Slack-Request-Timestamp"), now: NOW) }).to eq(:missing_timestamp)
    end

    it ":paddle accepts any of several h1 (not only the last), 5 s by default (Paddle's SDK), a configurable tolerance" do
      v = described_class.new(:paddle, secrets: secret)
      body = '{"event_id":"evt_1","event_type":"transaction.paid"}'
      good = hmac_hex(secret, "#{NOW}:#{body}")
      h = { "Paddle-Signature" => "ts=#{NOW};h1=#{good};h1=#{"0" * 64}" }
      e = v.verify(body, h, now: NOW + 5)
      expect([e.event_id, e.event_type, e.timestamp]).to eq(["evt_1", "transaction.paid", NOW])
      expect(reason_of { v.verify(body, h, now: NOW + 6) }).to eq(:timestamp_out_of_tolerance)
      expect(v.tolerance).to eq(5)
      expect(described_class.new(:paddle, secrets: secret, tolerance: 300).verify(body, h, now: NOW + 300).event_id).to eq("evt_1")
      expect(reason_of { v.verify(body, { "Paddle-Signature" => "h1=#{good}" }, now: NOW) }).to eq(:malformed_signature)
    end
  end

  describe ":hmac (generic)" do
    it "covers Twitch-style id+timestamp+body with a prefix" do
      v = described_class.new(:hmac, secrets: "k", signature_header: "Twitch-Eventsub-Message-Signature", prefix: "sha256=",
                                     timestamp_header: "Twitch-Eventsub-Message-Timestamp", id_header: "Twitch-Eventsub-Message-Id",
                                     template: "{id}{timestamp}{body}")
      body = '{"subscription":{"type":"channel.follow"}}'
      h = { "Twitch-Eventsub-Message-Id" => "m1", "Twitch-Eventsub-Message-Timestamp" => NOW.to_s,
            "Twitch-Eventsub-Message-Signature" => "sha256=#{hmac_hex("k", "m1#{NOW}#{body}")}" }
      e = v.verify(body, h, now: NOW)
      expect([e.provider, e.event_id, e.timestamp]).to eq([:hmac, "m1", NOW])
      expect(reason_of { v.verify(body, h.except("Twitch-Eventsub-Message-Id"), now: NOW) }).to eq(:missing_id)
    end

    it "supports sha1/sha512 and base64, and Slack-like templates" do
      body = "a=1&b=2"
      v1 = described_class.new(:hmac, secrets: "k", algorithm: :sha1, encoding: :base64, signature_header: "X-Sig")
      expect(v1.verify(body, { "X-Sig" => hmac_b64("k", body, "SHA1") }, now: NOW).event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(body))
      v5 = described_class.new(:hmac, secrets: "k", algorithm: :sha512, signature_header: "X-Sig", timestamp_header: "X-Ts",
                                      template: "v0:{timestamp}:{body}", prefix: "v0=")
      h = { "X-Sig" => "v0=#{hmac_hex("k", "v0:#{NOW}:#{body}", "SHA512")}", "X-Ts" => NOW.to_s }
      expect(v5.verify(body, h, now: NOW).timestamp).to eq(NOW)
      expect(reason_of { v5.verify(body, h, now: NOW + 301) }).to eq(:timestamp_out_of_tolerance)
      expect(reason_of { v5.verify(body, h.merge("X-Sig" => "v0=#{hmac_hex("k", "v0:#{NOW}:#{body}")}"), now: NOW) }).to eq(:malformed_signature)
    end

    it "rejects templates that do not sign the body or name unknown parts" do
      expect { described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", template: "{timestamp}") }
        .to raise_error(WebhookInbox::ConfigurationError, /body/)
      expect { described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", template: "{ts}.{body}") }
        .to raise_error(WebhookInbox::ConfigurationError, /placeholder/)
      expect { described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", template: "{timestamp}.{body}") }
        .to raise_error(WebhookInbox::ConfigurationError, /timestamp header/)
      expect { described_class.new(:hmac, secrets: "k") }.to raise_error(WebhookInbox::ConfigurationError, /signature header/)
      # issue 9 item 8: a time check on a header the template does not sign stops no replay
      expect { described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", timestamp_header: "X-Ts") }
        .to raise_error(WebhookInbox::ConfigurationError, /does not sign \{timestamp\}/)
      expect { described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", timestamp_header: "X-Ts", id_header: "X-Id", template: "{id}.{body}") }
        .to raise_error(WebhookInbox::ConfigurationError, /does not sign \{timestamp\}/)
      # an unsigned id header stays allowed (GitHub-style); event_id: :body_sha256 dedupes on the body instead
      v = described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", id_header: "X-Id", event_id: :body_sha256)
      expect(v.verify("b", { "X-Sig" => hmac_hex("k", "b"), "X-Id" => "i-1" }, now: NOW).event_id).to eq(OpenSSL::Digest::SHA256.hexdigest("b"))
      # id_signed? (the receiver's bound for a long id): false only for an id header no signature covers
      expect(v.id_signed?).to be(true)
      expect(described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", id_header: "X-Id", event_id: :provider).id_signed?)
        .to be(false)
      expect(described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", id_header: "X-Id", template: "{id}.{body}")
        .id_signed?).to be(true)
      expect(%i[stripe standard_webhooks github].map { |p| described_class.new(p, secrets: []).id_signed? }).to eq([true, true, true])
      expect(described_class.new(:github, secrets: [], event_id: :provider).id_signed?).to be(false)
      expect { described_class.new(:stripe, secrets: "k", template: "{body}") }.to raise_error(WebhookInbox::ConfigurationError)
      expect { described_class.new(:nope, secrets: "k") }.to raise_error(WebhookInbox::ConfigurationError, /unknown scheme/)
    end
  end

  describe "rules" do
    let(:secret) { "whsec_rules_secret_value" }

    it "checks the body size first, before headers or secrets, even for 100 MB" do
      v = described_class.new(:stripe, secrets: [])
      big = "x" * (100 << 20)
      t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      expect(reason_of { v.verify(big, {}, now: NOW) }).to eq(:payload_too_large)
      expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t).to be < 0.05
      small = described_class.new(:github, secrets: "k", max_body_bytes: 10)
      expect(reason_of { small.verify("x" * 11, { "X-Hub-Signature-256" => "sha256=#{hmac_hex("k", "x" * 11)}" }) }).to eq(:payload_too_large)
      expect(small.verify("x" * 10, { "X-Hub-Signature-256" => "sha256=#{hmac_hex("k", "x" * 10)}" }).body).to eq("x" * 10)
    end

    it "verifies large bodies without the GVL, from several threads at once" do
      v = described_class.new(:stripe, secrets: [secret])
      body = %({"id":"evt_big","data":"#{"x" * (512 << 10)}","type":"big.one"})
      h = { "Stripe-Signature" => "t=#{NOW},v1=#{hmac_hex(secret, "#{NOW}.#{body}")}" }
      bad = { "Stripe-Signature" => "t=#{NOW},v1=#{"0" * 64}" }
      results = Array.new(4) do |i|
        Thread.new { Array.new(5) { i.even? ? v.verify(body, h, now: NOW).event_type : reason_of { v.verify(body, bad, now: NOW) } } }
      end.map(&:value)
      expect(results).to eq([["big.one"] * 5, [:signature_mismatch] * 5] * 2)
      expect(v.verify(body, h, now: NOW).body).to equal(body)
    end

    it "raises :no_secret when built with secrets: []" do
      v = described_class.new(:github, secrets: [])
      expect(reason_of { v.verify("{}", { "X-Hub-Signature-256" => "sha256=#{"0" * 64}" }) }).to eq(:no_secret)
    end

    it "rejects empty secrets and secrets with surrounding whitespace without printing them" do
      expect { described_class.new(:github, secrets: [""]) }.to raise_error(WebhookInbox::ConfigurationError, /empty/)
      ["#{secret}\n", " #{secret}", "#{secret}\t", "#{secret}\r\n"].each do |s|
        expect { described_class.new(:github, secrets: ["ok", s]) }
          .to raise_error(WebhookInbox::ConfigurationError, /whitespace/) { |e| expect(e.message).not_to include(secret) }
      end
      expect { described_class.new(:github, secrets: [42]) }.to raise_error(WebhookInbox::ConfigurationError)
      expect { described_class.new(:github, secrets: "k", tolerance: -1) }.to raise_error(WebhookInbox::ConfigurationError)
      expect { described_class.new(:github, secrets: "k", max_body_bytes: 0) }.to raise_error(WebhookInbox::ConfigurationError)
    end

    it "never shows secrets in inspect, to_s or error messages" do
      v = described_class.new(:stripe, secrets: [secret, "whsec_second_one"])
      expect(v.inspect).not_to include(secret)
      expect(v.inspect).not_to include("whsec_second_one")
      expect(v.inspect).to include("secrets=2")
      expect(v.to_s).not_to include(secret)
      event = described_class.new(:github, secrets: "k").verify("card=4242424242424242", { "X-Hub-Signature-256" => "sha256=#{hmac_hex("k", "card=4242424242424242")}" })
      expect(event.inspect).not_to include("4242")
      expect(event.inspect).to include("21 bytes")
      expect(v.instance_variables.map { |iv| v.instance_variable_get(iv).to_s }.join).not_to include(secret)
      body = %({"id":"evt_payload_marker"})
      begin
        v.verify(body, { "Stripe-Signature" => "t=#{NOW},v1=#{"ab" * 32}" }, now: NOW)
        raise "verified"
      rescue WebhookInbox::VerificationError => e
        expect(e.reason).to eq(:signature_mismatch)
        expect(e.message).not_to include(secret)
        expect(e.message).not_to include("evt_payload_marker")
        expect(e.message).not_to include("ab" * 32)
      end
    end

    it "never crashes on garbage headers, truncated or oversized signatures" do
      rng = Random.new(1234)
      %i[stripe standard_webhooks github shopify slack paddle didit].each do |scheme|
        s = scheme == :standard_webhooks ? "whsec_#{Base64.strict_encode64("k" * 24)}" : "k"
        v = described_class.new(scheme, secrets: s, allow_simple: true)
        v.header_names.each do |name|
          200.times do
            value = rng.bytes(rng.rand(0..300))
            value = (["t=#{NOW}", "v1=#{value}", "ts=#{NOW}", "h1=", "sha256=", "v0=", "v1,", ";", ",", " "].sample(random: rng) + value) if rng.rand < 0.5
            h = v.header_names.to_h { |n| [n, rng.rand < 0.5 ? value : rng.bytes(rng.rand(0..80))] }
            h[name] = value
            expect(reason_of { v.verify(rng.bytes(rng.rand(0..200)), h, now: NOW) }).to be_a(Symbol)
          end
          expect(reason_of { v.verify("{}", { name => "x" * 100_000 }, now: NOW) }).to be_a(Symbol)
        end
      end
    end

    it "rejects non-String bodies, non-Hash headers, bad now: values and copies" do
      v = described_class.new(:github, secrets: "k")
      expect { v.verify("{}", {}, now: "1700000000") }.to raise_error(TypeError)
      s = described_class.new(:stripe, secrets: "whsec_k")
      h = { "Stripe-Signature" => "t=#{NOW},v1=#{hmac_hex("whsec_k", "#{NOW}.{}")}" }
      expect { s.verify("{}", h, now: Float::NAN) }.to raise_error(ArgumentError, /NaN/)
      expect(s.verify("{}", h, now: NOW.to_f + 0.5).timestamp).to eq(NOW)
      [Float::INFINITY, -Float::INFINITY, 1e300, -1e300].each do |f|
        expect(reason_of { s.verify("{}", h, now: f) }).to eq(:timestamp_out_of_tolerance), f.to_s
      end
      expect { v.dup }.to raise_error(TypeError)
      expect { Marshal.dump(v) }.to raise_error(TypeError)
      expect { v.verify(nil, {}) }.to raise_error(TypeError)
      expect { v.verify("{}", "X-Hub-Signature-256: x") }.to raise_error(TypeError)
    end

    it "tells whether a body is jsonb-safe" do
      expect(described_class.jsonb_safe?('{"a":[1,2.5,"é",{"b":null}]}')).to be(true)
      expect(described_class.jsonb_safe?('{"a":"\\u0000"}')).to be(false)
      expect(described_class.jsonb_safe?('{"a":"\\ud800"}')).to be(false)
      expect(described_class.jsonb_safe?('{"a":"\\ud83d\\ude00"}')).to be(true)
      expect(described_class.jsonb_safe?("{\"a\":\"\xff\"}".b)).to be(false)
      expect(described_class.jsonb_safe?('{"a":1}x')).to be(false)
      expect(described_class.jsonb_safe?('{"a":1e999999}')).to be(false)
      expect(described_class.jsonb_safe?("")).to be(false)
    end
  end

  # Issue 16: what the signature does not cover never decides an event's identity, type or time.
  describe "unsigned data" do
    let(:secret) { "unsigned_data_secret" }

    # item 2: X-Signature-Simple signs timestamp, session_id, status and webhook_type only.
    it "Didit Simple: a body re-sent with a new event_id and another decision is the same event, and only the signed fields are exposed" do
      v = described_class.new(:didit, secrets: secret, allow_simple: true)
      signed = "#{NOW}:sess_1:Approved:status.updated"
      h = { "X-Signature-Simple" => hmac_hex(secret, signed) }
      original = %({"decision":{"status":"Approved"},"event_id":"e1","session_id":"sess_1","status":"Approved","timestamp":#{NOW},"webhook_type":"status.updated"})
      forged = original.sub('"event_id":"e1"', '"event_id":"e2"').sub('{"status":"Approved"}', '{"status":"Declined"}')
      first = v.verify(original, h, now: NOW)
      again = v.verify(forged, h, now: NOW)
      expect(first.event_id).to eq(OpenSSL::Digest::SHA256.hexdigest(signed))
      expect(again.event_id).to eq(first.event_id)
      expect(first.event_type).to eq("status.updated")
      expect(again.body).to eq(%({"session_id":"sess_1","status":"Approved","timestamp":#{NOW},"webhook_type":"status.updated"}))
      expect(again.body).to eq(first.body)
      expect(again.body_signed).to be(false)
      expect(JSON.parse(again.body)).not_to have_key("decision")
      # the raw signature still covers the whole body: its id and body are the body's own
      raw = v.verify(original, { "X-Signature" => hmac_hex(secret, original) }, now: NOW)
      expect([raw.event_id, raw.body, raw.body_signed]).to eq(["e1", original, true])
      # escaped values and a string timestamp are kept as the body wrote them (valid JSON)
      esc = %({"session_id":"s\u00e9","status":"A","timestamp":"#{NOW}","webhook_type":"t"})
      e = v.verify(esc, { "X-Signature-Simple" => hmac_hex(secret, "#{NOW}:sé:A:t") }, now: NOW)
      expect(JSON.parse(e.body)).to eq("session_id" => "sé", "status" => "A", "timestamp" => NOW.to_s, "webhook_type" => "t")
    end

    # item 10: GitHub's and Shopify's id and type come from headers no signature covers.
    it "GitHub and Shopify by default: a captured body re-sent with a new delivery id and another type is a duplicate" do
      body = '{"action":"opened","number":7}'
      digest = OpenSSL::Digest::SHA256.hexdigest(body)
      gh = described_class.new(:github, secrets: secret)
      expect(gh.event_id).to eq(:body_sha256)
      h = { "X-Hub-Signature-256" => "sha256=#{hmac_hex(secret, body)}", "X-GitHub-Delivery" => "d-1", "X-GitHub-Event" => "pull_request" }
      replay = h.merge("X-GitHub-Delivery" => "d-2", "X-GitHub-Event" => "issues")
      expect(gh.verify(body, h, now: NOW).event_id).to eq(digest)
      expect(gh.verify(body, replay, now: NOW).event_id).to eq(digest)
      expect(gh.verify(body, replay, now: NOW).event_type).to eq("issues") # a hint, never proof
      sh = described_class.new(:shopify, secrets: secret)
      expect(sh.event_id).to eq(:body_sha256)
      hs = { "X-Shopify-Hmac-Sha256" => hmac_b64(secret, body), "X-Shopify-Webhook-Id" => "w-1", "X-Shopify-Topic" => "orders/paid" }
      expect(sh.verify(body, hs.merge("X-Shopify-Webhook-Id" => "w-2", "X-Shopify-Topic" => "orders/cancelled"), now: NOW).event_id).to eq(digest)
      # :hmac with an id header its template does not sign: the same default
      hm = described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", id_header: "X-Id")
      expect(hm.event_id).to eq(:body_sha256)
      expect(hm.verify("b", { "X-Sig" => hmac_hex("k", "b"), "X-Id" => "i-2" }, now: NOW).event_id).to eq(OpenSSL::Digest::SHA256.hexdigest("b"))
      # a signed id header, or ids from the signed body, stay the provider's
      signed_id = described_class.new(:hmac, secrets: "k", signature_header: "X-Sig", id_header: "X-Id", template: "{id}.{body}")
      expect(signed_id.event_id).to eq(:provider)
      expect(signed_id.verify("b", { "X-Sig" => hmac_hex("k", "i-1.b"), "X-Id" => "i-1" }, now: NOW).event_id).to eq("i-1")
      expect(described_class.new(:hmac, secrets: "k", signature_header: "X-Sig").event_id).to eq(:provider)
      expect(described_class.new(:stripe, secrets: "k").event_id).to eq(:provider)
    end

    # item 12: jsonb keeps the last of duplicate keys; the scan read the first.
    it "refuses a signed body whose id, type or timestamp key occurs twice at the top level (:duplicate_key)" do
      stripe = described_class.new(:stripe, secrets: secret)
      sign = ->(b) { { "Stripe-Signature" => "t=#{NOW},v1=#{hmac_hex(secret, "#{NOW}.#{b}")}" } }
      ['{"id":"evt_A","type":"charge.succeeded","data":{},"id":"evt_B"}',
       '{"id":"evt_A","\\u0069d":"evt_B","type":"charge.succeeded"}',
       '{"id":"evt_A","type":"charge.succeeded","type":"charge.refunded"}'].each do |b|
        expect(reason_of { stripe.verify(b, sign.(b), now: NOW) }).to eq(:duplicate_key), b
      end
      # nested duplicates and other keys are jsonb's business: the event's metadata agrees with it
      ok = '{"id":"evt_A","type":"t","data":{"id":"x","id":"y"},"note":1,"note":2}'
      expect(stripe.verify(ok, sign.(ok), now: NOW).event_id).to eq("evt_A")
      # an escaped key alone is the key it decodes to, as for jsonb
      esc = '{"\\u0069d":"evt_C","type":"t"}'
      expect(stripe.verify(esc, sign.(esc), now: NOW).event_id).to eq("evt_C")
      # unsigned: the signature is checked first
      expect(reason_of { stripe.verify('{"id":"a","id":"b"}', sign.("{}"), now: NOW) }).to eq(:signature_mismatch)
      didit = described_class.new(:didit, secrets: secret)
      d = %({"event_id":"e1","timestamp":#{NOW},"event_id":"e2"})
      expect(reason_of { didit.verify(d, { "X-Signature" => hmac_hex(secret, d) }, now: NOW) }).to eq(:duplicate_key)
      dt = %({"event_id":"e1","timestamp":#{NOW - 86_400},"timestamp":#{NOW}})
      expect(reason_of { didit.verify(dt, { "X-Signature" => hmac_hex(secret, dt) }, now: NOW) }).to eq(:duplicate_key)
      paddle = described_class.new(:paddle, secrets: secret)
      pb = '{"event_id":"a","event_type":"x","event_id":"b"}'
      expect(reason_of { paddle.verify(pb, { "Paddle-Signature" => "ts=#{NOW};h1=#{hmac_hex(secret, "#{NOW}:#{pb}")}" }, now: NOW) })
        .to eq(:duplicate_key)
    end
  end

  it "raises ConfigurationError (never crashes) when used after a setup that raised midway" do
    v = WebhookInbox::Verifier.allocate
    expect { v.send(:_setup, :hmac, "hmac", 300, 1 << 20, false, 1, 0, nil, "x" * 300, nil, nil, nil, ["k"], false) }
      .to raise_error(WebhookInbox::ConfigurationError)
    expect { v.verify("{}", {}) }.to raise_error(WebhookInbox::ConfigurationError, /not set up/)
  end
end
