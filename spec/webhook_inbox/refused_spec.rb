# frozen_string_literal: true

require "spec_helper"
require "pg"
require "openssl"
require "webhook_inbox/testing"
require "base64"
require "rack/mock"
require "securerandom"
require "active_support"
require "active_support/notifications"
require_relative "../support/receiver_helpers"
require_relative "../support/verifier_helpers"

# Issue 20 item 2: deliveries refused for a signature or secret mismatch are kept aside
# (keep_refused), bounded, never processed, and admitted by reverify once the secret is fixed,
# the signed timestamp checked against the receipt time.
RSpec.describe WebhookInbox::Refused do
  include ReceiverHelpers
  include VerifierHelpers

  let(:pg) { TestDatabase.cluster }
  let(:conn) { PG.connect(pg.url) }
  let(:conn_lock) { Mutex.new } # the keeper's thread and the spec share one connection
  let(:exec) { ->(sql, params) { conn_lock.synchronize { conn.exec_params(sql, params).to_a } } }
  let(:keeper) { described_class.new(exec: exec, flush_interval: 0.01) }
  let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url, pool_size: 2) }
  let(:endpoint) { "stripe_#{SecureRandom.hex(4)}" }
  let(:scope) { unique_scope("refused") }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }
  after do
    configurations.each(&:reset!)
    inbox.close
    conn.close
  end

  def receiver(secret, keep: true, **opts)
    WebhookInbox::Receiver.new(provider: :stripe, secrets: [secret], source_scope: scope, inbox: inbox,
                               endpoint: endpoint, keep_refused: keep, refused: keeper, **opts)
  end

  def delivery(id, secret, at: Time.now.to_i, signature: nil)
    body = JSON.generate(id: id, type: "charge.succeeded", data: { object: { id: "ch_#{id}" } })
    headers = WebhookInbox::Testing::Signing.headers(:stripe, body, secret: secret, timestamp: at)
    rack_request("/hooks/stripe", body, signature ? headers.merge("Stripe-Signature" => signature) : headers)
  end

  def kept_rows
    pg.psql("SELECT body::text <> '', reason FROM webhook_inbox_refused WHERE endpoint = '#{endpoint}' ORDER BY id")
      .split("\n")
  end

  def kept_count
    pg.psql("SELECT count(*) FROM webhook_inbox_refused WHERE endpoint = '#{endpoint}'").to_i
  end

  # Waits until the keeper has written or dropped n deliveries (a deadline only, no time
  # asserted); returns the rows kept for the endpoint.
  def settle(n)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    sleep 0.01 until keeper.kept + keeper.dropped >= n || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    kept_count
  end

  def configuration(secret)
    WebhookInbox::Configuration.new.tap do |c|
      c.endpoint(endpoint.to_sym, provider: :stripe, secrets: [secret], scope: scope, keep_refused: true)
      c.database_url = pg.url
      configurations << c
    end
  end

  let(:configurations) { [] }

  it "admits a rotated secret's 20 refused deliveries on reverify, and nothing else" do
    old = receiver("whsec_old")
    ids = Array.new(20) { |i| "evt_rot_#{i}" }
    ids.each { |id| expect(old.call(delivery(id, "whsec_new")).http_status).to eq(401) }
    # A forged one (no secret signs it) and one whose timestamp was stale when it arrived,
    # both refused as signature_mismatch by the old secret, are kept too...
    expect(old.call(delivery("evt_forged", "whsec_attacker")).reason).to eq(:signature_mismatch)
    expect(old.call(delivery("evt_stale", "whsec_new", at: Time.now.to_i - 3600)).reason).to eq(:signature_mismatch)
    # ...but neither a delivery without a signature nor a stale one the old secret signs.
    expect(old.call(delivery("evt_nosig", "x", signature: "")).http_status).to eq(401)
    expect(old.call(delivery("evt_old_ok", "whsec_old", at: Time.now.to_i - 3600)).reason).to eq(:timestamp_out_of_tolerance)
    expect(settle(22)).to eq(22)
    expect(kept_rows.uniq).to eq(["t|signature_mismatch"])
    expect(inbox_count(pg, scope)).to eq(0) # never processed: not in the inbox

    # Reverify with the old secret still configured admits nothing.
    result = WebhookInbox::Refused::Reverify.new(exec: exec, configuration: configuration("whsec_old"))
                                            .call(endpoint, actor: "ops@test")
    expect(result).to include(admitted: 0, still_refused: 22)

    fixed = configuration("whsec_new")
    published = []
    sub = ActiveSupport::Notifications.subscribe("reverify.webhook_inbox") { |*, payload| published << payload }
    begin
      result = WebhookInbox::Refused::Reverify.new(exec: exec, configuration: fixed).call(endpoint, actor: "ops@test")
    ensure
      ActiveSupport::Notifications.unsubscribe(sub)
    end
    expect(result).to include(admitted: 20, still_refused: 2, expired: 0)
    # reverify.webhook_inbox: exactly its documented keys (counts and names, no body or header).
    expect(published).to eq([{ endpoint: endpoint, admitted: 20, still_refused: 2, expired: 0, action_id: result[:action_id],
                               actor: "ops@test" }])
    expect(published.first.keys).to eq(WebhookInbox::Instrumentation::KEYS["reverify.webhook_inbox"])
    expect(inbox_rows(pg, scope).map { |r| [r[:event_id], r[:event_type], r[:status]] })
      .to eq(ids.sort.map { |id| [id, "charge.succeeded", "pending"] })
    expect(pg.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{scope}' " \
                   "AND request_headers ? 'stripe-signature'").to_i).to eq(20)
    left = pg.psql("SELECT convert_from(body, 'UTF8')::jsonb->>'id' FROM webhook_inbox_refused " \
                   "WHERE endpoint = '#{endpoint}' ORDER BY 1").split("\n")
    expect(left).to eq(%w[evt_forged evt_stale])
    expect(pg.psql("SELECT actor, action, filter->>'endpoint', filter->>'still_refused', count FROM webhook_inbox_actions " \
                   "WHERE id = #{result[:action_id]}").strip).to eq("ops@test|reverify|#{endpoint}|2|20")

    # The same key as a delivery: the provider's own retry, now verified, is a duplicate.
    expect(fixed.receiver(endpoint.to_sym).call(delivery("evt_rot_3", "whsec_new")).status).to eq(:duplicate)
    # Again: nothing more is admitted; the forged and the stale stay refused.
    again = WebhookInbox::Refused::Reverify.new(exec: exec, configuration: fixed).call(endpoint, actor: "ops@test")
    expect(again).to include(admitted: 0, still_refused: 2)
    expect(inbox_count(pg, scope)).to eq(20)
  end

  it "admits a URL-signed delivery with the request line it arrived on (Square, URL from the Rack env)" do
    body = '{"merchant_id":"M1","type":"payment.updated","event_id":"ev-url-1","data":{}}'
    url = "https://hooks.example.com/square/in?tenant=7"
    sign = ->(key) { WebhookInbox::Testing::Signing.headers(:square, body, secret: key, url: url)["X-Square-Hmacsha256-Signature"] }
    env = ->(key) { Rack::MockRequest.env_for(url, method: "POST", input: body, "CONTENT_TYPE" => "application/json",
                                                   "HTTP_X_SQUARE_HMACSHA256_SIGNATURE" => sign.call(key)) }
    square = WebhookInbox::Receiver.new(provider: :square, secrets: ["sq_old"], source_scope: scope, inbox: inbox,
                                        endpoint: endpoint, keep_refused: true, refused: keeper)
    expect(square.call(env.call("sq_new")).reason).to eq(:signature_mismatch)
    expect(settle(1)).to eq(1)
    fixed = WebhookInbox::Configuration.new.tap do |c|
      c.endpoint(endpoint.to_sym, provider: :square, secrets: ["sq_new"], scope: scope)
      c.database_url = pg.url
      configurations << c
    end
    expect(WebhookInbox::Refused::Reverify.new(exec: exec, configuration: fixed).call(endpoint, actor: "ops"))
      .to include(admitted: 1, still_refused: 0)
    expect(inbox_rows(pg, scope).map { |r| [r[:event_id], r[:event_type]] }).to eq([%w[ev-url-1 payment.updated]])
  end

  # Audit 3: a JWT provider's signature travels in a header that looks like a credential
  # (Authorization: Bearer, Plaid-Verification), which request_headers never keeps; the row
  # keeps it aside, reverify admits with it, and nothing shows it.
  describe "JWT-signed providers" do
    def b64url(s) = Base64.urlsafe_encode64(s, padding: false)

    def jwt(header, claims)
      input = "#{b64url(JSON.generate(header))}.#{b64url(JSON.generate(claims))}"
      "#{input}.#{b64url(yield(input))}"
    end

    def jwt_configuration(provider, secret)
      WebhookInbox::Configuration.new.tap do |c|
        c.endpoint(endpoint.to_sym, provider: provider, secrets: [secret], scope: scope)
        c.database_url = pg.url
        configurations << c
      end
    end

    # Refuses the delivery under old_secret, keeps it, then reverifies under new_secret.
    def refuse_then_admit(provider, body, header, old_secret, new_secret)
      env = rack_request("/hooks/#{provider}", body, { "Content-Type" => "application/json" }.merge(header))
      r = WebhookInbox::Receiver.new(provider: provider, secrets: [old_secret], source_scope: scope, inbox: inbox,
                                     endpoint: endpoint, keep_refused: true, refused: keeper)
      expect(r.call(env).reason).to eq(:signature_mismatch)
      expect(settle(1)).to eq(1)
      token = header.values.first.split.last
      shown = pg.psql("SELECT request_headers::text FROM webhook_inbox_refused WHERE endpoint = '#{endpoint}'")
      expect(shown).not_to include(token) # never in what the dashboard shows
      result = WebhookInbox::Refused::Reverify.new(exec: exec, configuration: jwt_configuration(provider, new_secret))
                                              .call(endpoint, actor: "ops")
      expect(result).to include(admitted: 1, still_refused: 0)
      expect(kept_count).to eq(0) # the token went with its row
      expect(pg.psql("SELECT count(*) FROM webhook_inbox WHERE source_scope = '#{scope}' " \
                     "AND coalesce(request_headers::text, '') LIKE '%#{token[-20..]}%'").to_i).to eq(0)
    end

    it "admits a :vonage delivery refused for its secret, with the Bearer token kept aside" do
      body = '{"message_uuid":"m-refused-1","status":"delivered"}'
      token = jwt({ alg: "HS256", typ: "JWT" }, { iat: Time.now.to_i, payload_hash: OpenSSL::Digest::SHA256.hexdigest(body) }) do |i|
        OpenSSL::HMAC.digest("SHA256", "vonage-new-secret", i)
      end
      refuse_then_admit(:vonage, body, { "Authorization" => "Bearer #{token}" }, "vonage-old-secret", "vonage-new-secret")
      expect(inbox_rows(pg, scope).map { |r| [r[:event_id], r[:event_type]] }).to eq([%w[m-refused-1 delivered]])
    end

    it "admits a :plaid delivery signed by a key not yet configured, with Plaid-Verification kept aside" do
      keys = Array.new(2) { OpenSSL::PKey::EC.generate("prime256v1") }
      jwk = lambda do |key|
        pt = key.public_key.to_octet_string(:uncompressed)
        JSON.generate(alg: "ES256", crv: "P-256", kid: "k1", kty: "EC", use: "sig", x: b64url(pt[1, 32]), y: b64url(pt[33, 32]))
      end
      body = '{"item_id":"it_1","webhook_code":"DEFAULT_UPDATE","webhook_type":"TRANSACTIONS"}'
      token = jwt({ alg: "ES256", kid: "k1", typ: "JWT" },
                  { iat: Time.now.to_i, request_body_sha256: OpenSSL::Digest::SHA256.hexdigest(body) }) do |i|
        OpenSSL::ASN1.decode(keys[1].sign("SHA256", i)).value.map { |n| n.value.to_s(2).rjust(32, "\0") }.join
      end
      refuse_then_admit(:plaid, body, { "Plaid-Verification" => token }, jwk.call(keys[0]), jwk.call(keys[1]))
      expect(inbox_rows(pg, scope).map { |r| r[:event_type] }).to eq(["TRANSACTIONS"])
    end
  end

  it "keeps a PayPal delivery naming a certificate not yet configured (unknown_key) and admits it once it is" do
    old_key, new_key = OpenSSL::PKey::RSA.new(2048), OpenSSL::PKey::RSA.new(2048)
    wall = Time.now.to_i
    old_secret = paypal_secret(old_key, from: wall - 86_400, to: wall + 86_400, cert_id: "CERT-old")
    new_secret = paypal_secret(new_key, from: wall - 86_400, to: wall + 86_400, cert_id: "CERT-new")
    body = '{"id":"WH-rotated-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"42311647XV020574X"}}'
    headers = paypal_headers(body, key: new_key, time: Time.at(wall).utc.iso8601,
                                   url: "https://api.paypal.com/v1/notifications/certs/CERT-new")
    env = Rack::MockRequest.env_for("/hooks/paypal", method: "POST", input: body, "CONTENT_TYPE" => "application/json",
                                    **headers.to_h { |k, v| ["HTTP_#{k.tr("-", "_")}", v] })
    paypal = WebhookInbox::Receiver.new(provider: :paypal, secrets: [old_secret], source_scope: scope, inbox: inbox,
                                        endpoint: endpoint, keep_refused: true, refused: keeper)
    expect(paypal.call(env).reason).to eq(:unknown_key)
    expect(settle(1)).to eq(1)
    fixed = WebhookInbox::Configuration.new.tap do |c|
      c.endpoint(endpoint.to_sym, provider: :paypal, secrets: [old_secret, new_secret], scope: scope)
      c.database_url = pg.url
      configurations << c
    end
    expect(WebhookInbox::Refused::Reverify.new(exec: exec, configuration: fixed).call(endpoint, actor: "ops"))
      .to include(admitted: 1, still_refused: 0)
    expect(inbox_rows(pg, scope).map { |r| [r[:event_id], r[:event_type]] }).to eq([%w[WH-rotated-1 PAYMENT.CAPTURE.COMPLETED]])
  end

  # PayPal's certificate fetch failing (certificate_unavailable, answered 503): the true reason
  # from schema v20 (db/020 widened the CHECK), unknown_key on an older schema, which the
  # gem keeps working with.
  it "keeps certificate_unavailable as itself at schema v20, and as unknown_key on a v18 database" do
    keep = lambda do |keeper_of, ep|
      keeper_of.keep(endpoint: ep, source_scope: scope, provider: :paypal, reason: :certificate_unavailable, body: "{}",
                     env: delivery("evt_cert", "whsec_new"), received_at: Time.now, bounds: described_class::DEFAULT_BOUNDS)
      keeper_of.flush
    end
    expect(keep.(keeper, endpoint)).to eq(1)
    expect([keeper.kept, keeper.dropped]).to eq([1, 0])
    expect(kept_rows).to eq(["t|certificate_unavailable"])

    old_db = "refused_v18_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{old_db}", db: "postgres")
    # The gem builds only its own version: v18's tables (the CHECK before db/020), today's
    # functions, the version v18 reported.
    WebhookInbox::Schema.migrations(to: 18).each { |_name, sql| pg.psql(sql, db: old_db) }
    WebhookInbox::Schema.functions.each { |_name, sql| pg.psql(sql, db: old_db) }
    pg.psql("CREATE OR REPLACE FUNCTION webhook_inbox_schema_version() RETURNS integer LANGUAGE sql STABLE AS $$ SELECT 18 $$",
            db: old_db)
    old_conn = PG.connect(pg.url(old_db))
    old = described_class.new(exec: ->(sql, params) { old_conn.exec_params(sql, params).to_a }, flush_interval: 0.01)
    expect(keep.(old, endpoint)).to eq(1)
    expect([old.kept, old.dropped]).to eq([1, 0])
    expect(pg.psql("SELECT webhook_inbox_schema_version() || ' ' || reason FROM webhook_inbox_refused", db: old_db).strip)
      .to eq("18 unknown_key")
  ensure
    old_conn&.close
    pg.psql("DROP DATABASE IF EXISTS #{old_db}", db: "postgres") if old_db
  end

  # db/020 on a table that already holds rows (and without 019, another change): widened in
  # place, NOT VALID (no scan under the ALTER's lock), and left alone when the chain is
  # applied again (011 and every later file).
  it "db/020 widens the reason CHECK once, NOT VALID, keeps the rows, and changes nothing when applied again" do
    db = "refused_020_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{db}", db: "postgres")
    files = ReceiverHelpers.schema_files
    files.select { |f| File.basename(f).to_i <= 18 }.each { |f| pg.psql(File.read(f), db: db) }
    row = ->(reason) { "INSERT INTO webhook_inbox_refused (endpoint, source_scope, provider, reason, body, received_at) " \
                       "VALUES ('e', 's', 'paypal', '#{reason}', '\\x7b7d', now())" }
    pg.psql(row.("unknown_key"), db: db)
    expect { pg.psql(row.("certificate_unavailable"), db: db) }.to raise_error(/webhook_inbox_refused_reason_check/)
    check = "SELECT oid || ' ' || convalidated || ' ' || pg_get_constraintdef(oid) FROM pg_constraint " \
            "WHERE conrelid = 'webhook_inbox_refused'::regclass AND conname = 'webhook_inbox_refused_reason_check'"

    files.select { |f| File.basename(f).to_i >= 19 }.each { |f| pg.psql(File.read(f), db: db) }
    widened = pg.psql(check, db: db).strip
    expect(widened).to match(/\A\d+ false CHECK .*'unknown_key'.*'certificate_unavailable'.* NOT VALID\z/)
    pg.psql(row.("certificate_unavailable"), db: db)
    expect { pg.psql(row.("forged"), db: db) }.to raise_error(/webhook_inbox_refused_reason_check/)

    files.select { |f| File.basename(f).to_i >= 11 }.each { |f| pg.psql(File.read(f), db: db) }
    expect(pg.psql(check, db: db).strip).to eq(widened) # the same constraint: not dropped and added again
    expect(pg.psql("SELECT string_agg(reason, ',' ORDER BY id) FROM webhook_inbox_refused", db: db).strip)
      .to eq("unknown_key,certificate_unavailable")
    expect(pg.psql("SELECT webhook_inbox_schema_version()", db: db).strip).to eq(WebhookInbox::Schema::VERSION.to_s)
  ensure
    pg.psql("DROP DATABASE IF EXISTS #{db}", db: "postgres") if db
  end

  it "keeps nothing unless the endpoint asks (off by default)" do
    expect(receiver("whsec_old", keep: false).call(delivery("evt_off", "whsec_new")).http_status).to eq(401)
    expect(WebhookInbox::Receiver.new(provider: :stripe, secrets: ["whsec_old"], source_scope: scope, inbox: inbox)
                                 .keep_refused).to be_nil
    expect(keeper.queued + keeper.kept + keeper.dropped).to eq(0)
    expect(kept_count).to eq(0)
  end

  it "keeps the oldest past the count bound: new ones are not kept" do
    r = receiver("whsec_old", keep: { count: 3 })
    5.times { |i| r.call(delivery("evt_c#{i}", "whsec_new")) }
    expect(settle(5)).to eq(3)
    ids = pg.psql("SELECT convert_from(body, 'UTF8')::jsonb->>'id' FROM webhook_inbox_refused " \
                  "WHERE endpoint = '#{endpoint}' ORDER BY id").split("\n")
    expect(ids).to eq(%w[evt_c0 evt_c1 evt_c2])
    expect(keeper.dropped).to eq(2)
    # Found full, the endpoint is paused: the next refusal is dropped in memory, never queued.
    r.call(delivery("evt_c5", "whsec_new"))
    expect([keeper.queued, keeper.dropped]).to eq([0, 3])
  end

  it "keeps within the bytes bound and deletes rows past the age bound" do
    one = delivery("evt_b0", "whsec_new")["rack.input"].read.bytesize
    keeper.full_pause = 0 # an endpoint found full is not paused here
    r = receiver("whsec_old", keep: { bytes: one + 10, age: 86_400 })
    r.call(delivery("evt_b0", "whsec_new"))
    expect(settle(1)).to eq(1)
    r.call(delivery("evt_b1", "whsec_new"))
    expect(settle(2)).to eq(1) # the second does not fit
    expect(keeper.dropped).to eq(1)
    pg.psql("UPDATE webhook_inbox_refused SET received_at = received_at - interval '2 days' WHERE endpoint = '#{endpoint}'")
    r.call(delivery("evt_b2", "whsec_new"))
    expect(settle(3)).to eq(1)
    expect(pg.psql("SELECT convert_from(body, 'UTF8')::jsonb->>'id' FROM webhook_inbox_refused " \
                   "WHERE endpoint = '#{endpoint}'").strip).to eq("evt_b2")
  end

  it "never lets more than its share of MAX_QUEUED wait in memory per endpoint while the database is slow" do
    gate = Queue.new
    taken = Queue.new # the size of each batch the writer took (it then waits at the gate)
    slow = described_class.new(exec: lambda { |sql, params|
      next [{ "v" => "20" }] if sql == WebhookInbox::Schema::VERSION_SQL

      taken << JSON.parse(params[0]).size
      gate.pop
      []
    })
    env = delivery("evt_q", "whsec_new")
    keep = ->(ep) { slow.keep(endpoint: ep, source_scope: scope, provider: :stripe, reason: :signature_mismatch, body: "{}",
                              env: env, received_at: Time.now, bounds: described_class::DEFAULT_BOUNDS) }
    sent = described_class::MAX_QUEUED + 50
    sent.times { keep.call(endpoint) }
    first = taken.pop # the writer's first batch, stuck in the database
    # Each delivery was taken by that batch, waits, or was dropped; the batch in flight
    # counts against the endpoint's share, so the rest of the flood was dropped.
    expect(first + slow.queued + slow.dropped).to eq(sent)
    expect(first + slow.queued).to be <= described_class::MAX_QUEUED_PER_ENDPOINT
    expect(slow.dropped).to be >= sent - described_class::MAX_QUEUED_PER_ENDPOINT
    # The flood fills its own endpoint's share only: another endpoint's refusal is still queued.
    expect(keep.call("other")).to be(true)
  ensure
    5.times { gate << true }
  end

  it "holds at most MAX_QUEUED_BYTES of bodies, the batch in flight included, and writes them in FLUSH_BYTES batches" do
    gate = Queue.new
    taken = Queue.new
    slow = described_class.new(exec: lambda { |sql, params|
      next [{ "v" => "20" }] if sql == WebhookInbox::Schema::VERSION_SQL

      taken << JSON.parse(params[0]).size
      gate.pop
      []
    })
    body = JSON.generate(id: "evt_big", pad: "x" * (300 * 1024))
    env = delivery("evt_big", "whsec_new")
    per_endpoint = described_class::MAX_QUEUED_BYTES / body.bytesize / 4 # stay under the per-endpoint row share
    sent = 0
    %w[a b c d e f g h].each do |ep|
      per_endpoint.times do
        slow.keep(endpoint: "#{endpoint}_#{ep}", source_scope: scope, provider: :stripe, reason: :signature_mismatch,
                  body: body, env: env, received_at: Time.now, bounds: described_class::DEFAULT_BOUNDS)
        sent += 1
      end
    end
    first = taken.pop # stuck in the database
    expect(first).to eq(described_class::FLUSH_BYTES / body.bytesize)
    expect(sent * body.bytesize).to be > 1.5 * described_class::MAX_QUEUED_BYTES
    expect((first + slow.queued) * body.bytesize).to be <= described_class::MAX_QUEUED_BYTES
    expect(first + slow.queued + slow.dropped).to eq(sent)
  ensure
    50.times { gate << true }
  end

  it "refuses keep_refused options it cannot use" do
    expect { receiver("whsec_old", keep: { count: 0 }) }.to raise_error(WebhookInbox::ConfigurationError, /count/)
    expect { receiver("whsec_old", keep: { rows: 5 }) }.to raise_error(WebhookInbox::ConfigurationError, /unknown bound/)
    expect { receiver("whsec_old", keep: "yes") }.to raise_error(WebhookInbox::ConfigurationError, /keep_refused/)
    expect(receiver("whsec_old", keep: { age: 60 }).keep_refused).to eq(described_class::DEFAULT_BOUNDS.merge(age: 60))
  end

  it "refuses to reverify an endpoint that is not configured" do
    expect { WebhookInbox::Refused::Reverify.new(exec: exec, configuration: configuration("x")).call("nope", actor: "a") }
      .to raise_error(WebhookInbox::ConfigurationError, /no endpoint/)
  end
end
