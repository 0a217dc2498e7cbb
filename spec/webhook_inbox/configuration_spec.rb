# frozen_string_literal: true

require "spec_helper"

RSpec.describe WebhookInbox::Configuration do
  # Nothing listens there: building an Inbox only parses the URL, it does not connect.
  let(:config) { described_class.new.tap { |c| c.database_url = "host=127.0.0.1 port=1 dbname=x" } }

  def receiver_for(scope, **options)
    config.receiver(:stripe, scope: scope, secrets: ["whsec_#{scope}"], **options)
  end

  it "builds the shared Inbox with the group-commit settings (group_leaders capped at pool_size)" do
    expect(config.inbox).to have_attributes(group_commit?: true, group_leaders: 2, pool_size: 5)
    other = described_class.new.tap do |c|
      c.database_url = config.database_url
      c.group_leaders = 3
      c.pool_size = 2
    end
    expect(other.inbox).to have_attributes(group_leaders: 2, pool_size: 2)
    other.pool_size = 8
    other.reset!
    expect(other.inbox.group_leaders).to eq(3)
  end

  describe "receiver cache" do
    it "reuses the receiver for the same settings, given as new objects each time" do
      first = receiver_for(+"stripe:acct_1:live")
      expect(receiver_for(+"stripe:acct_1:live")).to equal(first)
      expect(config.cached_receiver_count).to eq(1)
    end

    it "stays at its bound with 10,000 distinct scopes, dropping the least recently used" do
      config.receiver_cache_size = 100
      hot = receiver_for("shopify:hot:live")
      10_000.times do |i|
        receiver_for("shopify:#{i}:live")
        expect(receiver_for("shopify:hot:live")).to equal(hot) if (i % 50).zero? # kept in use
      end
      expect(config.cached_receiver_count).to eq(100)
      expect(receiver_for("shopify:hot:live")).to equal(hot)
      expect(receiver_for("shopify:9999:live").source_scope).to eq("shopify:9999:live")
      expect(config.cached_receiver_count).to eq(100)
    end

    it "has a documented default bound" do
      expect(described_class::DEFAULT_RECEIVER_CACHE_SIZE).to eq(1000)
      1_200.times { |i| receiver_for("tenant:#{i}") }
      expect(config.cached_receiver_count).to eq(1000)
    end

    it "refuses a bound that is not a positive Integer" do
      expect { config.receiver_cache_size = 0 }.to raise_error(WebhookInbox::ConfigurationError)
      expect { config.receiver_cache_size = "10" }.to raise_error(WebhookInbox::ConfigurationError)
    end

    # Settings whose #hash collide must still get their own receiver: the cache compares
    # values, not hashes. A custom verifier with a fixed #hash makes the collision.
    it "never shares a receiver between different settings with the same #hash" do
      colliding = Class.new do
        def initialize(id) = @id = id
        def hash = 42
        def verify(*) = raise("not called")
      end
      a = receiver_for("stripe:acct_1:live", verifier: colliding.new(1))
      b = receiver_for("stripe:acct_1:live", verifier: colliding.new(2))
      expect(b).not_to equal(a)
      expect(config.cached_receiver_count).to eq(2)
    end

    it "keys by a frozen copy: changing the caller's secrets array later does not change the cached key" do
      secrets = [+"whsec_old"]
      first = config.receiver(:stripe, scope: "stripe:acct_2:live", secrets: secrets)
      secrets[0] << "_changed"
      fresh = config.receiver(:stripe, scope: "stripe:acct_2:live", secrets: secrets)
      expect(fresh).not_to equal(first)
      expect(config.receiver(:stripe, scope: "stripe:acct_2:live", secrets: ["whsec_old"])).to equal(first)
    end
  end
  describe "endpoint checks (validate!, run when a Rails app boots)" do
    it "names the endpoint and the secret entry of a nil credential, and every other problem at once" do
      config.endpoint(:stripe, secrets: ["whsec_ok", nil], scope: "stripe:acct_1:live")
      config.endpoint(:github, secrets: nil, scope: "github:org:live")
      config.endpoint(:shop, provider: :shopify, secrets: [" shpss_padded "], scope: "")
      config.endpoint(:mystery, secrets: ["s"], scope: "x:y:z")
      config.endpoint(:custom, provider: :hmac, secrets: ["s"], scope: "hmac:a:live", signature_header: "X-Sig",
                               timestamp_header: "X-Ts", template: "{body}")
      expect(config.endpoint_problems).to match([
        "endpoint :stripe: secrets[1] is nil (a credential or environment variable that is not set?)",
        "endpoint :github: no secrets (secrets: is empty or nil)",
        "endpoint :shop: secrets[0] has surrounding whitespace", "endpoint :shop: scope is empty",
        a_string_starting_with("endpoint :mystery: unknown scheme :mystery"),
        a_string_starting_with("endpoint :custom: timestamp header is set but the template does not sign")
      ])
      expect { config.validate! }.to raise_error(WebhookInbox::ConfigurationError, /\Awebhook_inbox: endpoint :stripe: secrets\[1\] is nil/) { |e|
        expect(e.message).not_to include("whsec_ok", "shpss_padded")
      }
    end

    it "refuses at boot a static scope past the key bound, which would answer every delivery 400" do
      config.endpoint(:stripe, secrets: ["whsec_a"], scope: "stripe:#{"a" * 250}:live")
      expect(config.endpoint_problems).to eq([
        "endpoint :stripe: scope is 262 bytes, over the 255-byte bound (every delivery would be refused 400 source_scope_too_long)"
      ])
      fits = described_class.new
      fits.endpoint(:stripe, secrets: ["whsec_a"], scope: "stripe:#{"a" * 243}:live")
      expect(fits.endpoint_problems).to eq([])
    end

    it "passes endpoints a request could use, and names the endpoint when a request builds a bad one" do
      config.endpoint(:stripe, secrets: ["whsec_a", "whsec_b"], scope: "stripe:acct_1:live", tolerance: 300)
      expect(config.endpoint_problems).to eq([])
      expect(config.validate!).to equal(config)
      expect { config.receiver(:shopify, scope: "shopify:s1:live", secrets: [nil]) }
        .to raise_error(WebhookInbox::ConfigurationError, /\Aendpoint :shopify: secrets must be/)
    end
  end
end
