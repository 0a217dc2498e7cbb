# frozen_string_literal: true

require "spec_helper"
require "rack/mock"
require "securerandom"
require "webhook_inbox/endpoint"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"

# A poisoned row never fails its neighbours: the key fields an event is stored under are
# bounded at receipt (a clear 400 for the request that carries one too long), and a row the
# server refuses inside a group-commit batch fails only its own caller.
RSpec.describe "Receipt bounds" do
  include ReceiverHelpers

  GITHUB_SECRET = "github_bounds_spec_secret"

  let(:pg) { TestDatabase.cluster }
  let(:scope) { unique_scope("bounds") }

  before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }

  def github_env(body, delivery)
    rack_request("/webhooks/github", body,
                 WebhookInbox::TestHelpers.github_headers(body, secret: GITHUB_SECRET, delivery: delivery, event: "push"))
  end

  it "answers 400 to a delivery whose (unsigned) id is too long, while the deliveries beside it are stored" do
    inbox = WebhookInbox::Inbox.new(database_url: pg.url, pool_size: 2, group_leaders: 1)
    endpoint = WebhookInbox::Endpoint.new(provider: :github, secrets: [GITHUB_SECRET], source_scope: scope,
                                          inbox: inbox, event_id: :provider)
    captured = %({"ref":"refs/heads/main","after":"#{SecureRandom.hex(20)}"})
    legit = Array.new(8) do |t|
      Thread.new do
        Array.new(40) do |i|
          body = %({"ref":"refs/heads/main","after":"#{t}-#{i}"})
          endpoint.call(github_env(body, "legit-#{t}-#{i}"))[0]
        end
      end
    end
    attackers = Array.new(2) do
      Thread.new do
        Array.new(40) do
          status, _, body = endpoint.call(github_env(captured, SecureRandom.alphanumeric(4000)))
          [status, JSON.parse(body.join)["reason"]]
        end
      end
    end
    expect(legit.flat_map(&:value).tally).to eq(200 => 320)
    expect(attackers.flat_map(&:value).uniq).to eq([[400, "event_id_too_long"]])
    expect(inbox_count(pg, scope)).to eq(320)
  ensure
    inbox&.close
  end

  # The rule the sidecar's reconcile shares (ext/webhook_inbox/event_id.h): one definition.
  it "derives the stored key with Inbox.stored_event_id: the id up to EVENT_ID_MAX_BYTES, else sha256:<hex of its bytes>" do
    max = WebhookInbox::Inbox::EVENT_ID_MAX_BYTES
    expect(max).to eq(WebhookInbox::Inbox::MAX_TEXT_BYTES[:event_id]).and eq(255)
    fits = "e" * max
    expect(WebhookInbox::Inbox.stored_event_id(fits)).to equal(fits)
    over = "\u00e9" * 128 # 128 characters, 256 bytes: the bound is in bytes
    expect(over.bytesize).to eq(max + 1)
    expect(WebhookInbox::Inbox.stored_event_id(over)).to eq("sha256:#{OpenSSL::Digest.hexdigest('SHA256', over)}")
    expect { WebhookInbox::Inbox.stored_event_id(nil) }.to raise_error(TypeError)
  end

  it "stores a signed event id past the bound as sha256:<hex of the id>, so the provider's retry is a duplicate" do
    inbox = WebhookInbox::Inbox.new(database_url: pg.url)
    stripe = WebhookInbox::Endpoint.new(provider: :stripe, secrets: ["whsec_bounds"], source_scope: scope, inbox: inbox)
    long_id = "evt_#{'é' * 200}" # 404 bytes, from the signed body
    body = JSON.generate("id" => long_id, "type" => "invoice.paid", "object" => "event")
    deliver = lambda do
      status, _, out = stripe.call(rack_request("/webhooks/stripe", body,
                                                WebhookInbox::TestHelpers.stripe_headers(body, secret: "whsec_bounds")))
      [status, JSON.parse(out.join)["status"]]
    end
    expect(deliver.call).to eq([200, "accepted"])
    expect(deliver.call).to eq([200, "duplicate"]) # the provider's retry
    derived = "sha256:#{OpenSSL::Digest.hexdigest('SHA256', long_id)}"
    expect(inbox_rows(pg, scope).map { |r| [r[:event_id], r[:event_type]] }).to eq([[derived, "invoice.paid"]])

    # The same id from a header no signature covers stays refused: anyone could mint it.
    github = WebhookInbox::Endpoint.new(provider: :github, secrets: [GITHUB_SECRET], source_scope: scope, inbox: inbox,
                                        event_id: :provider)
    status, _, out = github.call(github_env(%({"zen":"1"}), long_id))
    expect([status, JSON.parse(out.join)["reason"]]).to eq([400, "event_id_too_long"])
    expect(inbox_count(pg, scope)).to eq(1)
  ensure
    inbox&.close
  end

  it "answers 400 source_scope_too_long for a per-request scope past the bound, and stores nothing" do
    inbox = WebhookInbox::Inbox.new(database_url: pg.url)
    long_scope = "shopify:#{'x' * 300}:live"
    endpoint = WebhookInbox::Endpoint.new(provider: :github, secrets: [GITHUB_SECRET], source_scope: long_scope,
                                          inbox: inbox)
    status, _, body = endpoint.call(github_env(%({"zen":"1"}), "d-1"))
    expect([status, JSON.parse(body.join)["reason"]]).to eq([400, "source_scope_too_long"])
    expect(inbox_count(pg, long_scope)).to eq(0)
  ensure
    inbox&.close
  end

  it "refuses key fields past the bounds in Inbox#insert, naming the field" do
    inbox = WebhookInbox::Inbox.new(database_url: pg.url)
    WebhookInbox::Inbox::MAX_TEXT_BYTES.each do |field, max|
      args = { source_scope: scope, event_id: "evt_1", event_type: "t", payload: "{}" }.merge(field => "é" * ((max / 2) + 1))
      expect { inbox.insert(**args) }.to raise_error(ArgumentError, /#{field} is longer than #{max} bytes/)
    end
    expect(inbox.insert(source_scope: scope, event_id: "e" * 255, event_type: "t" * 255, payload: "{}").status)
      .to eq(:accepted)
  ensure
    inbox&.close
  end

  it "fails only the row the server refuses in a batch (an id past the key index's limit: 54000)" do
    inbox = WebhookInbox::Inbox.new(database_url: pg.url)
    row = ->(id) { [scope, id, "t", %({"id":"#{id}"}), false, false, nil, nil] }
    poisoned = SecureRandom.alphanumeric(8000) # past the index's ~2.7 kB even compressed
    codes = inbox.with_connection { |c| c.insert_batch([row["evt_a"], row[poisoned], row["evt_b"], row["evt_a"]]) }
    expect(codes.values_at(0, 2, 3)).to eq([1, 1, 0]) # accepted, accepted, duplicate
    expect(codes[1]).to be_a(WebhookInbox::StoreError)
    expect(codes[1].message).to include("54000")
    expect(inbox_rows(pg, scope).map { |r| r[:event_id] }.sort).to eq(%w[evt_a evt_b])
  ensure
    inbox&.close
  end
end
