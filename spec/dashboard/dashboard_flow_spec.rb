# frozen_string_literal: true

require "spec_helper"
require "cgi"
require_relative "../support/receiver_helpers"
require_relative "../support/dashboard_client"

# Issue 20 item 4 in spec/rails_app under a real Puma: the dashboard's pause and resume
# (WebhookInbox::FlowController). A pause holds the route and shows its pending events, a
# resume with a rate keeps the rule as a rate limit, one without removes it; each is an action
# with the dashboard's actor. Bad parameters are 400 or 422, never 500, and change nothing.
RSpec.describe "WebhookInbox::Engine, pause and resume over HTTP" do
  def rails_app = File.join(ReceiverHelpers::ROOT, "spec/rails_app")

  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "dash_flow")
    env = { "DATABASE_URL" => @pg.url(@db), "RAILS_ENV" => "production", "SECRET_KEY_BASE" => "f" * 64,
            "STRIPE_WEBHOOK_SECRET" => "whsec_flow", "STRIPE_SCOPE" => "stripe:acct_flow:live", "ADMIN_USER" => "ops", "ADMIN_PASSWORD" => "correct horse" }
    @puma = PumaProcess.new(rackup: File.join(rails_app, "config.ru"), dir: rails_app, threads: "2:2", env: env).start
  end
  after(:all) { @puma&.stop }

  before { db_psql("TRUNCATE webhook_inbox_flow, webhook_inbox_actions; DELETE FROM webhook_inbox") }

  def db_psql(sql) = @pg.psql(sql, db: @db)

  let(:admin) { DashboardClient.new(@puma.port, user: "ops", password: "correct horse") }

  def follow(status, headers, _body)
    expect([status, headers["location"]]).to match([302, %r{/webhook_inbox/flow\z}])
    admin.get(headers["location"])[2]
  end

  it "pauses a route, shows it held with its pending events, resumes it at a rate, then without one; every change an action" do
    db_psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
            "SELECT 's', 'e' || i, 'invoice.paid', '{}' FROM generate_series(1, 4) i")
    status, _, page = admin.get("/webhook_inbox/flow")
    expect([status, page]).to match([200, /nothing paused or rate limited/])
    expect(admin.get("/webhook_inbox")[2]).to include(%(href="/webhook_inbox/flow"))

    page = follow(*admin.post("/webhook_inbox/flow/pause", { "kind" => "route", "target" => "invoice.*" }))
    expect(page).to match(/Paused route invoice\.\*: 4 pending held \(action #\d+\)\./)
    expect(page).to match(%r{<code>invoice\.\*</code></td>\s*<td><span class="badge quarantined">paused</span></td>\s*<td class="num">-</td><td class="num">4</td>}m)

    page = follow(*admin.post("/webhook_inbox/flow/resume", { "kind" => "route", "target" => "invoice.*", "rate" => "5" }))
    expect(page).to include("Resumed route invoice.* at 5 events/s: 0 due now")
    expect(page).to match(%r{<span class="badge pending">rate limited</span></td>\s*<td class="num">5</td>}m)

    page = follow(*admin.post("/webhook_inbox/flow/resume", { "kind" => "route", "target" => "invoice.*" }))
    expect(page).to include("nothing paused or rate limited")
    expect(db_psql("SELECT string_agg(actor || ' ' || action || ' ' || coalesce(filter->>'rate', '-'), ', ' ORDER BY id) " \
                   "FROM webhook_inbox_actions").strip).to eq("ops pause -, ops resume 5, ops resume -")
  end

  it "answers 400 or 422 to what it cannot use, never 500, and changes nothing" do
    admin.get("/webhook_inbox/flow")
    expect(admin.post("/webhook_inbox/flow/pause", { "kind" => "route", "target" => "x" }, token: false).first).to eq(422)
    [[{ "kind" => "queue", "target" => "x" }, 400, /kind: one of route, scope, destination/],
     [{ "kind" => "route", "target" => "" }, 400, /target: a route pattern/],
     [{ "kind" => "route", "target" => "a*b" }, 422, /refused: a route is an event type/],
     [{ "kind" => "destination", "target" => "Bad-Name" }, 422, /refused: a destination name must match/]].each do |form, code, body|
      admin.get("/webhook_inbox/flow")
      status, _, text = admin.post("/webhook_inbox/flow/pause", form)
      expect([status, text]).to match([code, body]), form.inspect
    end
    admin.get("/webhook_inbox/flow")
    status, _, text = admin.post("/webhook_inbox/flow/resume", { "kind" => "route", "target" => "x", "rate" => "fast" })
    expect([status, text]).to match([422, /refused: invalid input syntax/])
    admin.get("/webhook_inbox/flow")
    status, _, text = admin.post("/webhook_inbox/flow/resume", { "kind" => "scope", "target" => "s", "rate" => "2" })
    expect([status, text]).to match([422, /not per scope/])
    expect(db_psql("SELECT count(*) FROM webhook_inbox_flow").to_i + db_psql("SELECT count(*) FROM webhook_inbox_actions").to_i).to eq(0)
  end
end
