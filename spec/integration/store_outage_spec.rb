# frozen_string_literal: true

require "spec_helper"
require "json"
require "pg"
require "webhook_inbox/test_helpers"
require_relative "../support/receiver_helpers"

# Fault cases against a Puma running the Endpoint and a PostgreSQL we stop and restart.
RSpec.describe "Endpoint when PostgreSQL fails" do
  include ReceiverHelpers

  OUTAGE_SECRET = "whsec_outage_spec_secret"

  before(:all) do
    @pg = ThrowawayPostgres.new
    ReceiverHelpers.apply_schema(@pg)
    @scope = "stripe:acct_outage:live"
    @puma = ReceiverHelpers.endpoint_puma(@pg, scope: @scope, secret: OUTAGE_SECRET, threads: "4:4", pool: 2,
                                          env: { "WI_LOG" => "1" })
  end
  after(:all) do
    @puma&.stop
    @pg&.destroy
  end

  def deliver(id)
    body = %({"id":"#{id}","object":"event","type":"charge.succeeded","data":{"object":{"card":"4242-secret"}}})
    @puma.post("/webhooks/stripe", body, WebhookInbox::TestHelpers.stripe_headers(body, secret: OUTAGE_SECRET))
  end

  it "answers 503 + Retry-After while stopped, stores nothing, and recovers after a restart without restarting Puma" do
    expect(deliver("evt_before").first).to eq(200)
    puma_pid = @puma.pid

    @pg.stop
    status, headers, text = deliver("evt_during")
    expect([status, headers["retry-after"], JSON.parse(text)["status"]]).to eq([503, "5", "unavailable"])

    @pg.start
    ids = inbox_rows(@pg, @scope).map { |r| r[:event_id] }
    expect(ids).to include("evt_before")
    expect(ids).not_to include("evt_during") # nothing half-written
    status, _, text = deliver("evt_during") # the sender's retry
    expect([status, JSON.parse(text)["status"]]).to eq([200, "accepted"])
    expect(deliver("evt_after").first).to eq(200)
    expect(@puma.pid).to eq(puma_pid)
    expect(inbox_rows(@pg, @scope).map { |r| r[:event_id] }).to include("evt_after", "evt_before", "evt_during")
    expect(@puma.log_text).to include("http=503").and include("event_id=evt_during")
    expect(@puma.log_text).not_to include("4242-secret")
    expect(@puma.log_text).not_to include(OUTAGE_SECRET)
  end

  it "answers 200 after an immediate (crash) restart: the pooled connection is reopened once" do
    expect(deliver("evt_crash_1").first).to eq(200)
    @pg.stop(mode: "immediate")
    @pg.start
    status, _, text = deliver("evt_crash_2")
    expect([status, JSON.parse(text)["status"]]).to eq([200, "accepted"])
  end

  # Polls until the block is truthy; fails the example with message (and Puma's log tail)
  # if it never is. The bound only keeps a broken run from hanging: it is not a timing check.
  def wait_for(message, bound: 60)
    give_up = Process.clock_gettime(Process::CLOCK_MONOTONIC) + bound
    until (value = yield)
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > give_up
        raise RSpec::Expectations::ExpectationNotMetError,
              "#{message}\n--- puma log (tail) ---\n#{@puma.log_text.lines.last(20).join}"
      end
      sleep 0.05
    end
    value
  end

  it "keeps the row when the client disconnects before the answer; the retry is a duplicate" do
    body = %({"id":"evt_dropped","object":"event","type":"charge.succeeded","data":{}})
    headers = WebhookInbox::TestHelpers.stripe_headers(body, secret: OUTAGE_SECRET)
    locker = PG.connect(@pg.url)
    locker.exec("BEGIN; LOCK TABLE webhook_inbox IN SHARE MODE") # holds the insert in the server
    # Watched from another session: inside locker's transaction pg_stat_activity is a
    # snapshot taken at its first read, which never shows an INSERT arriving later.
    watcher = PG.connect(@pg.url)
    sock = TCPSocket.new("127.0.0.1", @puma.port)
    sock.write("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" \
               "#{headers.map { |k, v| "#{k}: #{v}\r\n" }.join}Content-Length: #{body.bytesize}\r\n\r\n#{body}")
    # Close only once Puma is inside the request: the INSERT waits on our lock. Closing
    # earlier is a different case (Puma 5 skips a request whose client already left,
    # closed_socket? via TCP_INFO) and would leave no row.
    wait_for("the INSERT never reached the lock wait, so the disconnect would not happen mid-insert") do
      watcher.exec("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'" \
                  " AND query LIKE 'INSERT INTO webhook_inbox%'").getvalue(0, 0).to_i.positive?
    end
    sock.close # the sender gives up while the insert is in flight
    locker.exec("COMMIT") # the insert proceeds and commits; Puma's answer goes nowhere
    row = wait_for("the insert in flight when the client left was not committed") do
      inbox_rows(@pg, @scope).find { |r| r[:event_id] == "evt_dropped" }
    end
    expect(row).to include(status: "pending", event_type: "charge.succeeded")

    status, _, text = @puma.post("/webhooks/stripe", body, headers) # the sender's retry
    expect([status, JSON.parse(text)["status"]]).to eq([200, "duplicate"])
    expect(inbox_rows(@pg, @scope).find { |r| r[:event_id] == "evt_dropped" }).to eq(row)
  ensure
    locker&.close
    watcher&.close
  end
end
