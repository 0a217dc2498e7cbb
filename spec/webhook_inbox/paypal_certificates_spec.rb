# frozen_string_literal: true

require "spec_helper"
require_relative "../support/verifier_helpers"
require_relative "../support/paypal_cert_server"
require "json"
require "securerandom"
require "timeout"

# :paypal with fetch_certificates: an unknown certificate is fetched from PAYPAL-CERT-URL (a
# local HTTPS server with a test CA stands in for PayPal: PaypalCertServer), verified and cached.
RSpec.describe WebhookInbox::PaypalCertificates do
  include VerifierHelpers

  before(:all) { @server = PaypalCertServer.new }
  after(:all) { @server.stop }

  let(:server) { @server }
  let(:cid) { "CERT-#{SecureRandom.hex(6)}" }
  let(:path) { "/v1/notifications/certs/#{cid}" }
  let(:url) { "https://api.paypal.com#{path}" }
  let(:chain) { server.chain }
  # A burst large enough for the examples that fetch many ids; the bounds have their own examples.
  let(:store) { described_class.new(ca_file: server.ca_file, connect_to: server.connect_to, timeout: 2, fetch_burst: 100) }
  let(:hook) { "8PT597110X687430LKGECATA" }
  let(:verifier) { WebhookInbox::Verifier.new(:paypal, secrets: [hook], fetch_certificates: store) }
  let(:wall) { Time.now.to_i }
  let(:body) { JSON.generate("id" => "WH-#{SecureRandom.hex(8)}", "event_type" => "PAYMENT.CAPTURE.COMPLETED") }

  def signed(b = body, key: chain.key, at: wall, u: url, id: hook)
    paypal_headers(b, key: key, time: Time.at(at).utc.strftime("%Y-%m-%dT%H:%M:%SZ"), hook: id, url: u)
  end

  def serve(status = 200, text = chain.pem, headers = nil, delay = nil, at: path)
    server.routes[at] = [status, text, headers, delay]
  end

  def asked = server.paths.count(path)

  it "fetches an unknown certificate once, verifies with it, and refuses it tampered, stale or for another webhook id" do
    serve
    ev = verifier.verify(body, signed, now: wall)
    expect([ev.event_id, ev.event_type]).to eq([JSON.parse(body)["id"], "PAYMENT.CAPTURE.COMPLETED"])
    expect(verifier.verify(body, signed, now: wall).event_id).to eq(ev.event_id)
    expect(reason_of { verifier.verify(body.sub("CAPTURE", "CAPTURF"), signed, now: wall) }).to eq(:signature_mismatch)
    expect(reason_of { verifier.verify(body, signed(id: "OTHERHOOK"), now: wall) }).to eq(:signature_mismatch)
    expect(reason_of { verifier.verify(body, signed(at: wall - 400), now: wall) }).to eq(:timestamp_out_of_tolerance)
    expect(asked).to eq(1) # cached: the key was parsed once
    expect(store.fetches).to eq(1)
  end

  it "refuses a delivery signed by another key than the fetched certificate's" do
    serve
    expect(reason_of { verifier.verify(body, signed(key: OpenSSL::PKey::RSA.new(2048)), now: wall) }).to eq(:signature_mismatch)
  end

  it "keeps configured certificates first: a known id is never fetched" do
    secret = "#{hook}:#{cid}:#{chain.leaf.to_pem.strip}"
    v = WebhookInbox::Verifier.new(:paypal, secrets: [secret], fetch_certificates: store)
    expect(v.verify(body, signed, now: wall).event_type).to eq("PAYMENT.CAPTURE.COMPLETED")
    expect(asked).to eq(0)
  end

  it "takes a configured PEM chain's first certificate as the key (pinned; the rest are not read)" do
    pinned = ->(pem) { WebhookInbox::Verifier.new(:paypal, secrets: ["#{hook}:#{cid}:#{pem.strip}"]) }
    expect(pinned.call(chain.pem).verify(body, signed, now: wall).event_type).to eq("PAYMENT.CAPTURE.COMPLETED")
    other_first = server.chain.leaf.to_pem + chain.pem
    expect(reason_of { pinned.call(other_first).verify(body, signed, now: wall) }).to eq(:signature_mismatch)
    expect(asked).to eq(0)
  end

  it "fetches one URL once for concurrent deliveries" do
    serve(200, chain.pem, nil, 0.5)
    ids = Array.new(6) { Thread.new { verifier.verify(body, signed, now: wall).event_id } }.map(&:value)
    expect(ids.uniq).to eq([JSON.parse(body)["id"]])
    expect(asked).to eq(1)
  end

  it "settles a fetch whose thread was killed: the next caller is answered, not left waiting" do
    serve(200, chain.pem, nil, 2)
    fetcher = Thread.new { store.leaf_pem(url) }
    sleep 0.01 until asked == 1
    fetcher.kill.join
    expect(reason_of { Timeout.timeout(20) { store.leaf_pem(url) } }).to eq(:certificate_unavailable) # before: waited forever
    expect(asked).to eq(1)
  end

  it "never fetches a URL off PayPal's certificate endpoint" do
    before = server.paths.size
    ["https://127.0.0.1:#{server.port}#{path}", "https://api.paypal.com.evil.example#{path}", "http://api.paypal.com#{path}",
     "https://api.paypal.com:#{server.port}#{path}", "https://u@api.paypal.com#{path}", "https://api.paypal.com/v1/notifications/certs/..",
     "https://api.paypal.com#{path}?x=1"].each do |u|
      expect(reason_of { verifier.verify(body, signed(u: u), now: wall) }).to eq(:malformed_signature), u
      expect(reason_of { store.leaf_pem(u) }).to eq(:malformed_signature), u
    end
    expect(server.paths.size).to eq(before)
    expect(store.fetches).to eq(0)
  end

  it "answers PayPal's 404 as unknown_key, other answers as certificate_unavailable, remembered for a while" do
    expect(reason_of { verifier.verify(body, signed, now: wall) }).to eq(:unknown_key) # no route: 404
    %w[500 302].each_with_index do |status, i|
      p = "/v1/notifications/certs/CERT-#{status}-#{cid}"
      server.routes[p] = [status.to_i, "", { "Location" => "https://api.paypal.com#{path}" }]
      expect(reason_of { verifier.verify(body, signed(u: "https://api.paypal.com#{p}"), now: wall) }).to eq(:certificate_unavailable)
      expect(reason_of { verifier.verify(body, signed(u: "https://api.paypal.com#{p}"), now: wall) }).to eq(:certificate_unavailable)
      expect(server.paths.count(p)).to eq(1), status # the failure is cached
      expect(store.fetches).to eq(2 + i)
    end
    expect(asked).to eq(1) # the 302's Location was not followed
  end

  it "refuses an answer that is not a trusted PayPal chain: self-signed, another subject, a root missing, too large, not PEM" do
    {
      "self-signed" => server.chain(self_signed: true).pem,
      "subject" => server.chain(cn: "messageverificationcerts.paypal.com.evil.example").pem,
      "leaf only" => chain.leaf.to_pem, # the intermediate is not sent
      "large" => chain.pem + ("#" * (described_class::MAX_BYTES + 1)),
      "not pem" => "hello",
      "EC key" => server.chain.tap { |c| c.leaf = PaypalCertServer.cert(OpenSSL::PKey::EC.generate("prime256v1"),
                                                                        "/CN=messageverificationcerts.paypal.com",
                                                                        c.intermediate_key, c.intermediate) }.pem
    }.each do |name, text|
      p = "/v1/notifications/certs/CERT-#{name.tr(" ", "-")}-#{cid}"
      server.routes[p] = [200, text]
      expect(reason_of { verifier.verify(body, signed(u: "https://api.paypal.com#{p}"), now: wall) }).to eq(:certificate_unavailable), name
    end
  end

  it "refuses a server its trust store does not trust (the system store knows no test CA), and one too slow" do
    serve
    system = described_class.new(connect_to: server.connect_to, timeout: 2)
    v = WebhookInbox::Verifier.new(:paypal, secrets: [hook], fetch_certificates: system)
    expect(reason_of { v.verify(body, signed, now: wall) }).to eq(:certificate_unavailable)
    slow_path = "/v1/notifications/certs/CERT-slow-#{cid}"
    server.routes[slow_path] = [200, chain.pem, nil, 3]
    quick = described_class.new(ca_file: server.ca_file, connect_to: server.connect_to, timeout: 1)
    v = WebhookInbox::Verifier.new(:paypal, secrets: [hook], fetch_certificates: quick)
    expect(reason_of { v.verify(body, signed(u: "https://api.paypal.com#{slow_path}"), now: wall) }).to eq(:certificate_unavailable)
  end

  # Issue 27 item 4: every unauthenticated delivery naming a new certificate id opened an
  # outbound HTTPS connection, even one whose transmission time alone refuses it.
  it "checks everything that needs no certificate before any fetch: time, header shapes, the URL's host" do
    serve
    stale = signed(at: wall - 400)
    checks = {
      "stale" => [stale, :timestamp_out_of_tolerance], "future" => [signed(at: wall + 400), :timestamp_out_of_tolerance],
      "no id" => [signed.reject { |k, _| k.casecmp?("PAYPAL-TRANSMISSION-ID") }, :missing_id],
      "bad time" => [signed.merge("PAYPAL-TRANSMISSION-TIME" => "yesterday"), :malformed_timestamp],
      "algo" => [signed.merge("PAYPAL-AUTH-ALGO" => "SHA1withRSA"), :malformed_signature],
      "short sig" => [signed.merge("PAYPAL-TRANSMISSION-SIG" => "c2ln"), :malformed_signature],
      "host" => [signed(u: "https://api.paypal.com.evil.example#{path}"), :malformed_signature]
    }
    checks.each { |name, (headers, reason)| expect([name, reason_of { verifier.verify(body, headers, now: wall) }]).to eq([name, reason]) }
    expect([asked, store.fetches]).to eq([0, 0])
    expect(verifier.verify(body, signed, now: wall).event_type).to eq("PAYMENT.CAPTURE.COMPLETED") # the same, fresh: fetched
    expect(asked).to eq(1)
  end

  it "bounds first-time fetches across certificate ids: a burst, then a rate; over it, refused at once without a request" do
    bounded = described_class.new(ca_file: server.ca_file, connect_to: server.connect_to, timeout: 2) # defaults
    v = WebhookInbox::Verifier.new(:paypal, secrets: [hook], fetch_certificates: bounded)
    urls = Array.new(20) { |i| "https://api.paypal.com/v1/notifications/certs/CERT-flood#{i}-#{cid}" } # unknown: 404
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    reasons = urls.map { |u| reason_of { v.verify(body, signed(u: u), now: wall) } }
    expect(reasons.tally).to eq(unknown_key: described_class::FETCH_BURST, certificate_unavailable: 20 - described_class::FETCH_BURST)
    expect(bounded.fetches).to eq(described_class::FETCH_BURST)
    expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).to be < 5
    expect { v.verify(body, signed(u: urls.last), now: wall) }.to raise_error(WebhookInbox::VerificationError, /rate limited/)
  end

  it "bounds fetches in flight across certificate ids: the others are answered at once, not queued" do
    paths = Array.new(6) { |i| "/v1/notifications/certs/CERT-slow#{i}-#{cid}" }
    paths.each { |p| server.routes[p] = [200, chain.pem, nil, 1.5] }
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    reasons = paths.map { |p| Thread.new { reason_of { verifier.verify(body, signed(u: "https://api.paypal.com#{p}"), now: wall) } } }.map(&:value)
    expect(reasons.tally).to eq(nil => described_class::MAX_FETCHING, certificate_unavailable: 6 - described_class::MAX_FETCHING)
    expect(paths.sum { |p| server.paths.count(p) }).to eq(described_class::MAX_FETCHING)
    expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).to be < 3.5
  end

  it "remembers a failed certificate by its id, whichever of PayPal's hosts the next delivery names" do
    server.routes[path] = [500, ""]
    expect(reason_of { verifier.verify(body, signed, now: wall) }).to eq(:certificate_unavailable)
    serve # PayPal answers now, but the failure stands for FAILURE_TTL
    expect(reason_of { verifier.verify(body, signed(u: "https://api-m.paypal.com#{path}"), now: wall) }).to eq(:certificate_unavailable)
    expect([asked, store.fetches]).to eq([1, 1])
  end

  it "bounds the cache by max_entries, least recently used first" do
    small = described_class.new(ca_file: server.ca_file, connect_to: server.connect_to, max_entries: 2)
    urls = Array.new(3) { |i| "https://api-m.paypal.com/v1/notifications/certs/CERT-lru#{i}-#{cid}" }
    urls.each { |u| server.routes[URI(u).path] = [200, chain.pem] }
    small.leaf_pem(urls[0])
    small.leaf_pem(urls[1])
    small.leaf_pem(urls[0]) # used again: urls[1] is now the oldest
    small.leaf_pem(urls[2])
    expect(small.size).to eq(2)
    small.leaf_pem(urls[0])
    expect(small.fetches).to eq(3)
    small.leaf_pem(urls[1])
    expect(small.fetches).to eq(4)
  end

  it "is configured only in code: bare webhook ids need fetch_certificates, which only :paypal takes" do
    expect { WebhookInbox::Verifier.new(:paypal, secrets: [hook]) }.to raise_error(WebhookInbox::ConfigurationError, /bare webhook id/)
    expect { WebhookInbox::Verifier.new(:stripe, secrets: ["whsec_x"], fetch_certificates: true) }
      .to raise_error(WebhookInbox::ConfigurationError, /:paypal only/)
    expect { WebhookInbox::Verifier.new(:paypal, secrets: [hook], fetch_certificates: "yes") }
      .to raise_error(WebhookInbox::ConfigurationError, /true, false/)
    expect(WebhookInbox::Verifier.new(:paypal, secrets: [hook], fetch_certificates: true).inspect).not_to include(hook)
    expect(described_class.default).to equal(described_class.default)
  end

  describe "through the Receiver" do
    let(:kept) { [] }
    let(:keeper) { Struct.new(:rows) { def keep(**kw) = rows << kw }.new(kept) }
    let(:receiver) do
      WebhookInbox::Receiver.new(provider: :paypal, secrets: [hook], fetch_certificates: store, source_scope: "paypal:live",
                                 inbox: recording_store, keep_refused: true, refused: keeper, retry_after: 7)
    end

    def env(headers)
      { "REQUEST_METHOD" => "POST", "CONTENT_TYPE" => "application/json" }
        .merge(headers.to_h { |k, v| ["HTTP_#{k.upcase.tr("-", "_")}", v] })
    end

    it "answers a failed fetch 503 with Retry-After and keeps it as certificate_unavailable; reverify admits it once PayPal answers" do
      serve(500, "")
      e = env(signed)
      result = receiver.receive(body, e)
      expect([result.http_status, result.reason, result.headers]).to eq([503, :certificate_unavailable, { "Retry-After" => "7" }])
      expect(result.to_rack[2].join).to eq('{"status":"rejected","reason":"certificate_unavailable"}')
      expect(kept.map { |k| k[:reason] }).to eq([:certificate_unavailable]) # the keeper maps it on a schema before v20
      expect(receiver.reverify(body, e, received_at: Time.at(wall)).http_status).to eq(503) # still failing (cached)
      %i[@entries @failed_ids].each { |iv| store.instance_variable_get(iv).clear } # the failure's 30 s are over
      serve
      expect(receiver.reverify(body, e, received_at: Time.at(wall)).http_status).to eq(200)
      expect(receiver.inbox.inserts.map { |i| i[:event_id] }).to eq([JSON.parse(body)["id"]])
    end
  end
end
