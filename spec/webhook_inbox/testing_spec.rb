# frozen_string_literal: true

require "spec_helper"
require "json"
require "base64"
require "active_record"
require "webhook_inbox/testing/rspec"
require_relative "../support/receiver_helpers"

# The testing kit an app's own specs use (loaded here the way an app loads it): every signer
# produces headers the real Verifier accepts, and drain_webhook_inbox runs handlers through
# the sidecar's v4 dispatch inside the caller's transaction.
RSpec.describe WebhookInbox::Testing do
  # Built per example: Didit signs the body's own timestamp, so a body made when the file
  # loaded was past the 300 s tolerance by the time a long suite reached it.
  let(:body) do
    JSON.generate(id: "evt_kit_1", type: "payment_intent.succeeded", event_id: "evt_kit_1",
                  webhook_type: "status.updated", timestamp: Time.now.to_i, data: { object: { amount: 100 } })
  end
  signers = {
    stripe: [{ secret: "whsec_kit" }, {}],
    didit: [{ secret: "didit_kit" }, {}],
    standard_webhooks: [{ secret: "whsec_#{Base64.strict_encode64('k' * 24)}", id: "msg_1" }, {}],
    github: [{ secret: "gh_kit", delivery: "d-1", event: "push" }, {}],
    shopify: [{ secret: "shop_kit", id: "wh_1", topic: "orders/paid" }, {}],
    slack: [{ secret: "slack_kit" }, {}],
    paddle: [{ secret: "pdl_kit" }, {}],
    hmac: [{ secret: "gen_kit", signature_header: "X-Sig", timestamp_header: "X-Ts", template: "{timestamp}.{body}",
             prefix: "sha256=" },
           { signature_header: "X-Sig", timestamp_header: "X-Ts", template: "{timestamp}.{body}", prefix: "sha256=" }]
  }

  signers.each do |provider, (sign_opts, verifier_opts)|
    it "signs #{provider} deliveries the verifier accepts, and a wrong secret is refused" do
      headers = webhook_headers(provider, body, **sign_opts)
      verifier = WebhookInbox::Verifier.new(provider, secrets: [sign_opts[:secret]], **verifier_opts)
      expect(verifier.verify(body, headers).event_id).to be_a(String)
      wrong = provider == :standard_webhooks ? "whsec_#{Base64.strict_encode64('w' * 24)}" : "#{sign_opts[:secret]}-wrong"
      other = WebhookInbox::Verifier.new(provider, secrets: [wrong], **verifier_opts)
      expect { other.verify(body, headers) }.to raise_error(WebhookInbox::VerificationError)
    end
  end

  it "names the providers it can sign when asked for another" do
    expect { webhook_headers(:nope, body, secret: "x") }.to raise_error(ArgumentError, /no signer for provider :nope/)
  end

  describe "store_webhook_event and drain_webhook_inbox (ActiveRecord, one transaction)" do
    before(:all) do
      pg = TestDatabase.cluster
      @db = "kit_#{SecureRandom.hex(4)}"
      pg.psql("CREATE DATABASE #{@db}", db: "postgres")
      ReceiverHelpers.schema_files.each { |f| pg.psql(File.read(f), db: @db) }
      pg.psql(<<~SQL, db: @db)
        CREATE TABLE kit_runs (event_id text PRIMARY KEY, runs int NOT NULL);
        CREATE FUNCTION kit_paid(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO kit_runs VALUES (ev.event_id, 1) ON CONFLICT (event_id) DO UPDATE SET runs = kit_runs.runs + 1;
          RETURN 'paid';
        END $$;
        CREATE FUNCTION kit_flaky(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'upstream not ready'; END $$;
        INSERT INTO webhook_inbox_routes VALUES ('payment_intent.succeeded', 'kit_paid'), ('charge.pending', 'kit_flaky');
      SQL
      ActiveRecord::Base.establish_connection(ReceiverHelpers.ar_url(pg).sub(pg.dbname, @db))
    end

    after(:all) { ActiveRecord::Base.remove_connection }

    around do |example|
      ActiveRecord::Base.transaction do
        example.run
        raise ActiveRecord::Rollback
      end
    end

    it "runs each due handler once and reports done, retry (charged) and waiting" do
      expect(store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_a" }).status).to eq(:accepted)
      expect(store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_a" }).status).to eq(:duplicate)
      store_webhook_event(event_type: "charge.pending", payload: { "id" => "evt_b" })
      store_webhook_event(event_type: "no.route", payload: { "id" => "evt_c" })

      outcomes = drain_webhook_inbox.sort_by(&:event_id)
      expect(outcomes.map { |o| [o.event_id, o.result, o.detail] }).to eq(
        [["evt_a", "done", "paid"], ["evt_b", "retry", "P0001: upstream not ready"], ["evt_c", "waiting", "no route for event type"]]
      )
      expect(outcomes[1].charged).to be(true)
      expect(drain_webhook_inbox).to eq([]) # nothing is due again inside the same transaction
      conn = ActiveRecord::Base.connection
      expect(conn.select_value("SELECT runs FROM kit_runs WHERE event_id = 'evt_a'")).to eq(1)
      expect(WebhookInbox::InboxEvent.pending.of_type("charge.pending").pluck(:attempts)).to eq([1])
      expect(WebhookInbox::InboxEvent.done.count).to eq(1)
    end

    it "exposes the inbox rows read-only, without payloads in inspect" do
      store_webhook_event(event_type: "payment_intent.succeeded", payload: { "id" => "evt_ro", "card" => "4242" })
      row = WebhookInbox::InboxEvent.in_scope("test").find_by(event_id: "evt_ro")
      expect(row).to be_pending
      expect(row.inspect).to include("evt_ro")
      expect(row.inspect).not_to include("4242")
      expect { row.update!(status: "done") }.to raise_error(ActiveRecord::ReadOnlyRecord)
    end
  end
end
