# frozen_string_literal: true

require "spec_helper"
require "json"
require_relative "../support/receiver_helpers"

# The delivery's request headers kept with the event (request_headers, schema v5): what is
# kept and left out, both insert paths of the native store, and a table that lacks the
# column (a gem upgraded before its migration ran): receipts go on, without headers.
RSpec.describe WebhookInbox::RequestHeaders do
  include ReceiverHelpers

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("headers") }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }

  def stored_headers(pg, scope, id, db: pg.dbname)
    out = pg.psql("SELECT coalesce(request_headers::text, 'NULL') FROM webhook_inbox " \
                  "WHERE source_scope = '#{scope}' AND event_id = '#{id}'", db: db).strip
    out == "NULL" ? nil : JSON.parse(out)
  end

  describe ".from_env" do
    def kept(env) = JSON.parse(described_class.from_env(env) || "null")

    it "keeps headers by their lower-case names, with Content-Type and Content-Length, and nothing else from env" do
      env = { "HTTP_STRIPE_SIGNATURE" => "t=1,v1=ab", "HTTP_X_GITHUB_DELIVERY" => "d-1", "HTTP_USER_AGENT" => "Stripe/1.0",
              "CONTENT_TYPE" => "application/json", "CONTENT_LENGTH" => "12", "HTTP_VERSION" => "HTTP/1.1",
              "REQUEST_METHOD" => "POST", "rack.input" => StringIO.new("x"), "HTTP_X_NUMBER" => 5, :HTTP_X_SYMBOL => "s" }
      expect(kept(env)).to eq("stripe-signature" => "t=1,v1=ab", "x-github-delivery" => "d-1", "user-agent" => "Stripe/1.0",
                              "content-type" => "application/json", "content-length" => "12")
      expect(described_class.from_env("REQUEST_METHOD" => "POST")).to be_nil
      expect { described_class.from_env([]) }.to raise_error(TypeError)
    end

    it "leaves credentials out: authorization, cookies, and names with token, secret, password, api key or session" do
      env = %w[HTTP_AUTHORIZATION HTTP_PROXY_AUTHORIZATION HTTP_COOKIE HTTP_X_AUTH_TOKEN HTTP_X_SHOPIFY_ACCESS_TOKEN
               HTTP_X_WEBHOOK_SECRET HTTP_X_PASSWORD HTTP_X_API_KEY HTTP_APIKEY HTTP_X_API_KEY_ID HTTP_X_SESSION_ID]
            .to_h { |k| [k, "s3cr3t"] }.merge("HTTP_X_REQUEST_ID" => "r-1", "HTTP_X_APIARY" => "not a key")
      expect(kept(env)).to eq("x-request-id" => "r-1", "x-apiary" => "not a key")
      expect(described_class.from_env(env)).not_to include("s3cr3t")
    end

    # Issue 16 item 4: these were kept in plain text (and shown on the event page) while
    # the page said credentials are never stored.
    it "leaves out every name holding auth, key, token, secret, pass, jwt, assertion, cookie, session or credential" do
      names = %w[HTTP_X_AUTH_KEY HTTP_X_WEBHOOK_KEY HTTP_OCP_APIM_SUBSCRIPTION_KEY HTTP_X_FUNCTIONS_KEY
                 HTTP_CF_ACCESS_JWT_ASSERTION HTTP_X_GOOG_IAP_JWT_ASSERTION HTTP_X_WEBHOOK_PASSPHRASE HTTP_X_ACCESS_KEY
                 HTTP_X_SIGNING_KEY HTTP_X_CREDENTIALS HTTP_X_SAML_ASSERTION]
      signatures = { "HTTP_STRIPE_SIGNATURE" => "t=1,v1=ab", "HTTP_X_HUB_SIGNATURE_256" => "sha256=ab",
                     "HTTP_WEBHOOK_SIGNATURE" => "v1,ab=", "HTTP_X_SHOPIFY_HMAC_SHA256" => "ab=", "HTTP_X_GITHUB_DELIVERY" => "d" }
      text = described_class.from_env(names.to_h { |k| [k, "s3cr3t"] }.merge(signatures))
      expect(JSON.parse(text).keys).to eq(%w[stripe-signature x-hub-signature-256 webhook-signature x-shopify-hmac-sha256
                                             x-github-delivery]) # the signatures a delivery is told apart by stay
      expect(text).not_to include("s3cr3t")
      expect(names.map { |k| described_class.credential?(k.delete_prefix("HTTP_").downcase.tr("_", "-")) }.uniq).to eq([true])
      expect(described_class.credential?("Stripe-Signature")).to be(false)
    end

    it "leaves out a credential by its value whatever the name: an HTTP auth scheme, or a JWT" do
      jwt = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
      env = { "HTTP_X_FORWARDED_USER" => "Bearer abc", "HTTP_X_ORIG" => "Basic dXNlcjpwdw==", "HTTP_X_AMZN_OIDC_DATA" => jwt,
              "HTTP_X_NOTE" => "eyJ alone is no JWT", "HTTP_X_WORD" => "Bearer" }
      expect(kept(env)).to eq("x-note" => "eyJ alone is no JWT", "x-word" => "Bearer")
      expect(described_class.credential?("x-upstream", "token abc")).to be(true)
    end

    it "looks for api?key only within the name, also at the longest name kept (256 bytes)" do
      longest = "HTTP_#{'A' * 249}_API_KE" # 256 bytes after HTTP_: "api-ke" at its very end
      env = { "HTTP_X_API_KE" => "1", longest => "2", "HTTP_#{'A' * 248}_API_KEY" => "s3cr3t" }
      expect(kept(env)).to eq("x-api-ke" => "1", longest.delete_prefix("HTTP_").downcase.tr("_", "-") => "2")
    end

    it "bounds what it keeps: 64 headers, values cut to 1024 bytes, bytes that are not UTF-8 replaced, NUL dropped" do
      many = (1..100).to_h { |i| ["HTTP_X_H#{i}", "v"] }
      expect(kept(many).size).to eq(64)
      expect(kept("HTTP_#{'N' * 300}" => "long name", "HTTP_X" => "y")).to eq("x" => "y")
      got = kept("HTTP_X_LONG" => "a" * 5000, "HTTP_X_BYTES" => "ok\xFF\xFE".b, "HTTP_X_NUL" => "a\0b",
                 "HTTP_X_CUT" => "#{'a' * 1023}\u00e9", "HTTP_X_UTF8" => "caf\u00e9 \u{1F600}".b)
      expect(got["x-long"].bytesize).to eq(1024)
      expect(got["x-bytes"]).to eq("ok\uFFFD\uFFFD")
      expect(got["x-nul"]).to eq("ab")
      expect(got["x-cut"]).to eq("#{'a' * 1023}\uFFFD") # a character cut in two is not kept half
      expect(got["x-utf8"]).to eq("caf\u00e9 \u{1F600}")
    end

    it "escapes what JSON must: quotes, backslashes and control characters (jsonb takes every result)" do
      env = { "HTTP_X_Q" => %(a"b\\c), "HTTP_X_CTL" => "t\tn\nr\re\e", "HTTP_X_OVERLONG" => "\xC0\xAF\xED\xA0\x80".b }
      text = described_class.from_env(env)
      expect(JSON.parse(text)).to eq("x-q" => %(a"b\\c), "x-ctl" => "t\tn\nr\re\e", "x-overlong" => "\uFFFD" * 5)
      expect(pg.psql("SELECT ($$#{text}$$::jsonb)->>'x-q'").chomp).to eq(%(a"b\\c))
    end
  end

  describe ".encode" do
    it "is nil for nothing, and for what jsonb or JSON cannot take (a NUL, bytes that are not UTF-8)" do
      expect([described_class.encode(nil), described_class.encode({}), described_class.encode("")]).to eq([nil, nil, nil])
      expect(described_class.encode(%({"a": "b"}))).to eq(%({"a": "b"})) # from_env's text passes as it is
      expect(described_class.encode(%({"a": "\\u0000"}), check: true)).to be_nil
      expect(described_class.encode("[1]", check: true)).to be_nil
      expect(described_class.encode("{bad", check: true)).to be_nil
      expect(described_class.encode({ "a" => "x\0y" })).to be_nil
      expect(described_class.encode({ "a" => "\xFF".b })).to be_nil
      expect(JSON.parse(described_class.encode({ "a" => "b\u0001" }))).to eq("a" => "b\u0001")
    end

    it "leaves a caller's credentials out as from_env does (nil when nothing else is left)" do
      given = { "x-auth-key" => "s3cr3t", "X-Forwarded-User" => "Bearer s3cr3t", "user-agent" => "curl/8" }
      expect(JSON.parse(described_class.encode(given))).to eq("user-agent" => "curl/8")
      expect(described_class.encode({ "authorization" => "s3cr3t" })).to be_nil
    end
  end

  describe "stored by WebhookInbox::Inbox" do
    let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url, pool_size: 2) }
    after { inbox.close }

    it "stores them with the row (single insert), and keeps the first delivery's on a duplicate" do
      first = { "stripe-signature" => "t=1,v1=aa", "user-agent" => "Stripe/1.0" }
      expect(inbox.insert(source_scope: scope, event_id: "evt_h1", payload: "{}", headers: first).status).to eq(:accepted)
      expect(inbox.insert(source_scope: scope, event_id: "evt_h1", payload: "{}", headers: { "x" => "y" }).status).to eq(:duplicate)
      expect(stored_headers(pg, scope, "evt_h1")).to eq(first)
      expect(inbox.insert(source_scope: scope, event_id: "evt_h0", payload: "{}").status).to eq(:accepted)
      expect(stored_headers(pg, scope, "evt_h0")).to be_nil
    end

    it "stores each row's own headers in a group-commit batch (one statement)" do
      rows = Array.new(3) do |i|
        [scope, "evt_b#{i}", "t", "{}", false, false, nil, i == 1 ? nil : JSON.generate("x-n" => i.to_s)]
      end
      codes = inbox.with_connection { |conn| conn.insert_batch(rows) }
      expect(codes).to eq([1, 1, 1])
      expect(Array.new(3) { |i| stored_headers(pg, scope, "evt_b#{i}") }).to eq([{ "x-n" => "0" }, nil, { "x-n" => "2" }])
    end

    it "never refuses an event for its headers: headers jsonb would refuse are left out, the event is stored as usual" do
      bad = %({"x-a": "\\u0000"}) # what only a caller bypassing encode could send
      code = inbox.with_connection { |conn| conn.insert(scope, "evt_bad_h", "t", %({"id":1}), false, false, nil, bad) }
      expect(code).to eq(1) # accepted, not raw, not quarantined
      expect(stored_headers(pg, scope, "evt_bad_h")).to be_nil
      expect(inbox_rows(pg, scope).find { |r| r[:event_id] == "evt_bad_h" }).to include(status: "pending", payload: %({"id": 1}))
      codes = inbox.with_connection do |conn|
        conn.insert_batch([[scope, "evt_bad_b", "t", "{}", false, false, nil, bad], [scope, "evt_ok_b", "t", "{}", false, false, nil, "{}"]])
      end
      expect(codes).to eq([1, 1])
      expect(inbox_rows(pg, scope).select { |r| r[:event_id].end_with?("_b") }.map { |r| r[:status] }).to eq(%w[pending pending])
    end
  end

  # A database whose inbox lacks the column: the gem was upgraded and the migration has not
  # run yet. Receipts must go on (a 503 here would be an outage caused by a deploy's order).
  it "inserts without headers into an inbox that lacks the column, single and batch" do
    db = "headers_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{db}", db: "postgres")
    # The schema as it was before request_headers came (v5); later versions build on the
    # column (a trigger of v10 reads it), so dropping it from a current schema is no such inbox.
    WebhookInbox::Schema.migrations(to: 4).each { |_name, sql| pg.psql(sql, db: db) }
    old = WebhookInbox::Inbox.new(database_url: pg.url(db), pool_size: 1)
    expect(old.insert(source_scope: scope, event_id: "evt_old", payload: "{}", headers: { "a" => "b" }).status).to eq(:accepted)
    expect(old.with_connection { |c| c.insert_batch([[scope, "evt_o1", "t", "{}", false, false, nil, "{}"]] * 2) }).to eq([1, 0])
    expect(pg.psql("SELECT count(*) FROM webhook_inbox", db: db).to_i).to eq(2)
  ensure
    old&.close
  end
end
