# frozen_string_literal: true

require "spec_helper"
require "open3"
require "rbconfig"
require "webhook_inbox/testing/rspec"
require_relative "../support/provider_samples"

# The testing kit signs for every provider of the provider table: for each, the delivery it
# signs verifies with the configuration its credentials give (asymmetric providers with a key
# made for the test), and not under another provider's fresh credentials.
RSpec.describe WebhookInbox::Testing::Signing do
  providers = WebhookInbox::Verifier::PROVIDERS.keys

  it "has a signer for every provider of the table" do
    expect(described_class.providers).to eq(providers)
  end

  providers.each do |provider|
    it "signs #{provider} deliveries its credentials' Verifier accepts, and other credentials refuse" do
      ProviderSamples.for(provider).each do |sample|
        d = sample.delivery
        events = ProviderSamples.events(sample.verifier.verify(d.body, d.rack_env))
        expect(events).not_to be_empty
        expect(events.map(&:event_id)).to all(be_a(String).and(satisfy { |id| !id.empty? })), sample.name
        other = described_class.keypair(provider, asymmetric: sample.variant == "asymmetric")
        expect { other.verifier.verify(d.body, d.rack_env) }.to raise_error(WebhookInbox::VerificationError), sample.name
      end
    end
  end

  it "gives asymmetric providers a generated key and the public form their Verifier takes, never the key in inspect" do
    { discord: /\A\h{64}\z/, sendgrid: /\AMFkw/, plaid: /"kty":"EC"/, paddle_classic: /BEGIN PUBLIC KEY/,
      paypal: /\AWH\h+:CERT-[\h-]+:-----BEGIN CERTIFICATE/ }.each do |provider, form|
      creds = described_class.keypair(provider)
      expect(creds.secrets.first).to match(form), provider.to_s
      expect(creds.inspect).not_to include(creds.secrets.first[0, 40])
    end
    expect(described_class.keypair(:standard_webhooks, asymmetric: true).secrets.first).to start_with("whpk_")
    expect(described_class.keypair(:svix).provider).to eq(:standard_webhooks)
  end

  it "signs inside the body for Mailgun, Paddle Classic, Braintree and Adyen: headers alone are refused with a pointer" do
    creds = described_class.keypair(:mailgun)
    expect { webhook_headers(:mailgun, '{"event-data":{}}', secret: creds.signing_key) }
      .to raise_error(ArgumentError, /signs inside the body: use Signing.delivery/)
    d = webhook_delivery(:mailgun, { "event-data" => { "event" => "delivered" } }, secret: creds.signing_key, token: "tok1")
    expect(creds.verifier.verify(d.body, d.headers).event_id).to eq("tok1")
  end

  it "names the provider it cannot sign for" do
    expect { described_class.delivery(:nope, "{}", secret: "x") }.to raise_error(ArgumentError, /no signer for provider :nope/)
  end

  it "works in a Minitest ActiveSupport::TestCase (require \"webhook_inbox/testing/minitest\")" do
    test = <<~RUBY
      require "active_support"
      require "active_support/test_case"
      require "minitest/autorun"
      require "webhook_inbox"
      require "webhook_inbox/testing/minitest"
      class KitTest < ActiveSupport::TestCase
        test "signs with a generated SendGrid key" do
          keys = webhook_keypair(:sendgrid)
          body = '[{"event":"processed","sg_event_id":"sg1"}]'
          ev = WebhookInbox::Verifier.new(:sendgrid, secrets: keys.secrets).verify(body, keys.headers(body))
          assert_equal "sendgrid", ev.provider.to_s
        end
      end
    RUBY
    out, status = Open3.capture2e(RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "-e", test)
    expect(status).to be_success, out
    expect(out).to match(/1 runs, 1 assertions, 0 failures, 0 errors/)
  end
end
