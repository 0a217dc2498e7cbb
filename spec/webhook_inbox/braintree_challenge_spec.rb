# frozen_string_literal: true

require "spec_helper"
require_relative "../support/verifier_helpers"
require "json"
require "stringio"
require "logger"

# Braintree's webhook URL check: GET ?bt_challenge=<hex> answered "public_key|hex(HMAC-SHA1)"
# as Braintree's SDK answers it (vectors: spec/fixtures/vectors/generator/challenges.js).
RSpec.describe "Braintree bt_challenge" do
  include VerifierHelpers

  vectors = JSON.parse(File.read(File.expand_path("../fixtures/vectors/sdk-challenges.json", __dir__)))
  let(:secret) { "pub_key_1:#{"ab" * 16}" }
  let(:out) { StringIO.new }
  let(:store) { recording_store }

  def receiver(secrets = [secret])
    WebhookInbox::Receiver.new(provider: :braintree, secrets: secrets, source_scope: "braintree:live", inbox: store,
                               logger: Logger.new(out))
  end

  def get(query, r = receiver) = r.call({ "REQUEST_METHOD" => "GET", "QUERY_STRING" => query }).to_rack

  vectors["cases"].each do |c|
    it "answers the braintree SDK's challenge #{c["challenge"]} as webhookNotification.verify does, and not under another key" do
      expect(WebhookInbox::Verifier.new(:braintree, secrets: [c["secret"]]).braintree_challenge(c["challenge"])).to eq(c["answer"])
      expect(WebhookInbox::Verifier.new(:braintree, secrets: [c["wrong_secret"]]).braintree_challenge(c["challenge"]))
        .not_to eq(c["answer"])
      status, headers, body = get("bt_challenge=#{c["challenge"]}", receiver([c["secret"]]))
      expect([status, headers["Content-Type"], body.join]).to eq([200, "text/plain", c["answer"]])
    end
  end

  it "refuses what the SDK refuses (charset, length), as 400 malformed_payload" do
    v = WebhookInbox::Verifier.new(:braintree, secrets: [secret])
    vectors["refused"]["braintree"].each do |c|
      expect(reason_of { v.braintree_challenge(c) }).to eq(:malformed_payload), c.inspect
      expect(get("bt_challenge=#{URI.encode_www_form_component(c)}")[0]).to eq(400), c.inspect
    end
    expect(reason_of { v.braintree_challenge("a" * 20 + "\0") }).to eq(:malformed_payload)
  end

  it "answers with the first secret (the current pair during a rotation); never stores or logs the challenge" do
    challenge = "0123456789abcdef0123"
    rotated = receiver(["pub_new:#{"cd" * 16}", secret])
    expect(get("bt_challenge=#{challenge}", rotated)[2].join).to start_with("pub_new|")
    expect(store.inserts).to be_empty
    expect(out.string).to include("status=challenge http=200")
    expect(out.string).not_to include(challenge)
    expect(out.string).not_to include("pub_new")
  end

  it "bounds the query and refuses a second challenge; a GET without one is 405; no secret is 401" do
    expect(get("bt_challenge=0123456789abcdef0123&bt_challenge=0123456789abcdef0124")[0]).to eq(400)
    expect(get("x=#{"a" * 300}&bt_challenge=0123456789abcdef0123")[0]).to eq(400)
    status, headers, body = get("")
    expect([status, headers["Allow"], body.join]).to eq([405, "POST", '{"status":"rejected","reason":"method_not_allowed"}'])
    expect(get("bt_challenge=0123456789abcdef0123", receiver([]))[0]).to eq(401)
    expect { WebhookInbox::Verifier.new(:stripe, secrets: ["whsec_x"]).braintree_challenge("0" * 20) }
      .to raise_error(WebhookInbox::ConfigurationError)
    stripe = WebhookInbox::Receiver.new(provider: :stripe, secrets: ["whsec_x"], source_scope: "s", inbox: store)
    expect(stripe.call({ "REQUEST_METHOD" => "GET", "QUERY_STRING" => "bt_challenge=#{"0" * 20}" }).http_status).to eq(405)
  end
end
