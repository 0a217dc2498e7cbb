# frozen_string_literal: true

require "spec_helper"
require "open3"
require_relative "../support/receiver_helpers"
require_relative "../support/dashboard_client"
require "webhook_inbox/rails/dashboard_auth"

# Issue 34: the dashboard closed by default. spec/rails_app under a real Puma, once per
# protection (WI_DASHBOARD_AUTH): in production with no choice every page and action answers
# 401, POSTs with a valid session and CSRF token included, and the boot logs one line; HTTP
# Basic refuses wrong credentials and serves right ones; the app's filter decides, and a filter
# the base does not run closes it (403); the named opt-out leaves it to the router; development
# stays open with a banner; webhook_inbox:doctor fails on the unprotected case.
RSpec.describe "WebhookInbox::Engine (the dashboard), closed unless protected" do
  AUTH_APP = File.join(ReceiverHelpers::ROOT, "spec/rails_app")
  AUTH_MOUNT = "/webhook_inbox"
  AUTH_BASIC = { user: "dash-ops", password: "basic horse battery" }.freeze
  # Every route of config/routes.rb, with parameters that name a row where one is needed.
  AUTH_ROUTES = File.read(File.join(ReceiverHelpers::ROOT, "config/routes.rb"))
               .scan(/^\s*(get|post) "([^"]+)"/).map { |verb, path| [verb.upcase, "#{AUTH_MOUNT}/#{path}"] }
               .push(["GET", AUTH_MOUNT]).freeze
  AUTH_QUERY = { "/event" => "?scope=dash:a&id=evt_q", "/bulk" => "?kind=requeue&scope=dash:a&event_id=evt_q",
            "/effect" => "?id=op_1", "/refused/delivery" => "?id=1" }.freeze
  AUTH_REQUEUE = { "kind" => "requeue", "scope" => "dash:a", "event_id" => "evt_q", "expected" => "1" }.freeze

  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "dash_auth")
    @servers = {}
  end
  after(:all) { @servers.each_value(&:stop) }

  before do
    db_psql("DELETE FROM webhook_inbox; TRUNCATE webhook_inbox_actions, webhook_inbox_flow")
    db_psql("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, status, last_error, processed_at) " \
            "VALUES ('dash:a', 'evt_q', 'invoice.paid', '{}', 'quarantined', 'WIR02: amount is null', now())")
  end

  def db_psql(sql) = @pg.psql(sql, db: @db)

  def env(auth, rails_env: "production", **extra)
    { "DATABASE_URL" => @pg.url(@db), "RAILS_ENV" => rails_env, "SECRET_KEY_BASE" => "a" * 64, "RAILS_LOG" => "1",
      "STRIPE_WEBHOOK_SECRET" => "whsec_dash_auth", "STRIPE_SCOPE" => "stripe:acct_auth:live",
      "ADMIN_USER" => "ops", "ADMIN_PASSWORD" => "correct horse" }
      .merge(auth ? { "WI_DASHBOARD_AUTH" => auth } : {}).merge(extra)
  end

  # One Puma per setting, started on first use and kept for the file.
  def server(name, auth, **env_options)
    @servers[name] ||= PumaProcess.new(rackup: File.join(AUTH_APP, "config.ru"), dir: AUTH_APP, threads: "2:2",
                                       env: env(auth, **env_options)).start
  end

  def basic_env = { "WEBHOOK_INBOX_DASHBOARD_USER" => AUTH_BASIC[:user], "WEBHOOK_INBOX_DASHBOARD_PASSWORD" => AUTH_BASIC[:password] }

  def path_of(path) = path + AUTH_QUERY.fetch(path.delete_prefix(AUTH_MOUNT), "")

  def requeued? = db_psql("SELECT status FROM webhook_inbox WHERE event_id = 'evt_q'").strip == "pending"

  # [verb path => status] for every route, each POST with client's session and token (if any).
  def statuses(client, token: nil)
    form = token ? AUTH_REQUEUE.merge("authenticity_token" => token) : AUTH_REQUEUE
    AUTH_ROUTES.to_h do |verb, path|
      status = verb == "GET" ? client.get(path_of(path)).first : client.post(path, form, token: false).first
      ["#{verb} #{path}", status]
    end
  end

  # A client holding a valid session and CSRF token of the HTTP Basic server, which shares
  # secret_key_base with every other server here.
  def signed_in_basic_client
    basic = server(:basic, "http_basic", **basic_env)
    DashboardClient.new(basic.port, **AUTH_BASIC).tap { |c| expect(c.get("#{AUTH_MOUNT}/events").first).to eq(200) }
  end

  it "answers 401 to every page and action in production when no protection is chosen, POSTs with a valid token too" do
    client = signed_in_basic_client
    token = client.csrf_token
    closed = server(:none, "none")
    client.port = closed.port
    expect(statuses(client, token: token).values.uniq).to eq([401])
    expect(statuses(DashboardClient.new(closed.port, **AUTH_BASIC)).values.uniq).to eq([401])
    status, headers, body = client.get(AUTH_MOUNT)
    expect(body).to eq("The webhook inbox dashboard is closed: its protection is not configured (see the server log).\n")
    expect(headers).not_to have_key("www-authenticate")
    expect(requeued?).to be(false)
    expect(db_psql("SELECT count(*) FROM webhook_inbox_actions UNION ALL SELECT count(*) FROM webhook_inbox_flow").split).to eq(%w[0 0])

    # the same session and token are valid: the Basic server takes the POST
    client.port = @servers[:basic].port
    expect(client.post("#{AUTH_MOUNT}/bulk", AUTH_REQUEUE.merge("authenticity_token" => token), token: false).first).to eq(302)
    expect(requeued?).to be(true)
    expect(status).to eq(401)

    lines = File.readlines(closed.log).grep(/webhook_inbox: the dashboard/)
    expect(lines.size).to eq(1), File.read(closed.log)
    expect(lines.first).to include("the dashboard at /webhook_inbox answers 401 to every request: no protection chosen: " \
                                   "set c.dashboard_auth = :http_basic")
    expect(File.read(@servers[:basic].log)).not_to include("webhook_inbox: the dashboard")
  end

  it "with HTTP Basic: no or wrong credentials are refused on every route, the right ones are served and named in the audit" do
    basic = server(:basic, "http_basic", **basic_env)
    expect(statuses(DashboardClient.new(basic.port)).values.uniq).to eq([401])
    wrong = [{ user: AUTH_BASIC[:user], password: "basic horse batter" }, { user: "dash-op", password: AUTH_BASIC[:password] },
             { user: AUTH_BASIC[:user], password: "#{AUTH_BASIC[:password]}x" }, { user: "", password: "" },
             { user: "ops", password: "correct horse" }]
    wrong.each { |w| expect([w, statuses(DashboardClient.new(basic.port, **w)).values.uniq]).to eq([w, [401]]) }
    status, headers, = DashboardClient.new(basic.port).get(AUTH_MOUNT)
    expect([status, headers["www-authenticate"]]).to eq([401, 'Basic realm="Webhook inbox"'])

    client = DashboardClient.new(basic.port, **AUTH_BASIC)
    status, _, body = client.get(AUTH_MOUNT)
    expect(status).to eq(200)
    expect(body).to include("Overview")
    expect(body).not_to include("Not protected")
    client.get(path_of("#{AUTH_MOUNT}/bulk"))
    expect(client.post("#{AUTH_MOUNT}/bulk", AUTH_REQUEUE).first).to eq(302)
    expect(db_psql("SELECT actor, action FROM webhook_inbox_actions").strip).to eq("dash-ops|requeue")
  end

  it "with HTTP Basic chosen but no credentials set: 401 to everyone, and the boot line says what is missing" do
    server = server(:basic_unset, "http_basic")
    expect(statuses(DashboardClient.new(server.port, **AUTH_BASIC)).values.uniq).to eq([401])
    expect(File.read(server.log)).to include("answers 401 to every request: dashboard_auth is :http_basic but no user and " \
                                             "password are set (credentials webhook_inbox.dashboard_user")
    expect(File.read(server.log)).not_to include(AUTH_BASIC[:password])
  end

  it "with the app's authenticating base controller: its filter decides; a filter it does not run closes the dashboard (403)" do
    app = server(:filter, "filter")
    expect(DashboardClient.new(app.port).get(AUTH_MOUNT).first).to eq(401)
    expect(DashboardClient.new(app.port, user: "ops", password: "wrong").get(AUTH_MOUNT).first).to eq(401)
    expect(DashboardClient.new(app.port, user: "ops", password: "correct horse").get(AUTH_MOUNT).first).to eq(200)

    misnamed = server(:misnamed, "filter", "WI_DASHBOARD_FILTER" => "authenticate_admin!")
    admin = DashboardClient.new(misnamed.port, user: "ops", password: "correct horse")
    expect(statuses(admin).values.uniq).to eq([403])
    expect(File.read(misnamed.log)).to include("answers 403 to every request: dashboard_auth names before_action " \
                                               ":authenticate_admin!, which AdminController does not run")
  end

  it "with the named opt-out (:router_or_proxy): served, the mount point being the router's or proxy's to protect" do
    open = server(:router_or_proxy, "router_or_proxy")
    client = DashboardClient.new(open.port)
    status, _, body = client.get(path_of("#{AUTH_MOUNT}/bulk"))
    expect(status).to eq(200)
    expect(body).not_to include("Not protected")
    expect(client.post("#{AUTH_MOUNT}/bulk", AUTH_REQUEUE).first).to eq(302)
    expect(File.read(open.log)).not_to include("webhook_inbox: the dashboard")
  end

  it "stays open in development with a banner saying so, and logs nothing at boot" do
    dev = server(:development, "none", rails_env: "development")
    client = DashboardClient.new(dev.port)
    expect(statuses(client).reject { |route, _| route.start_with?("POST") }.values - [200, 404, 422]).to eq([]) # 422: a filter of every row
    body = client.get(path_of("#{AUTH_MOUNT}/bulk")).last
    expect(body).to include('<p class="warn" id="dashboard-open"><strong>Not protected.</strong> Open without authentication: ' \
                            "the development environment is in dashboard_open_environments. Elsewhere this dashboard " \
                            "answers 401 to every request")
    expect(client.post("#{AUTH_MOUNT}/bulk", AUTH_REQUEUE).first).to eq(302)
    expect(requeued?).to be(true)
    expect(File.read(dev.log)).not_to include("webhook_inbox: the dashboard")
  end

  # webhook_inbox:doctor, run as rake runs it, in the app's environment.
  def doctor(env)
    script = 'require "./config/environment"; require "rake"; Rails.application.load_tasks; ' \
             'Rake::Task["webhook_inbox:doctor"].invoke'
    out, status = Open3.capture2e({ "RUBYLIB" => File.join(ReceiverHelpers::ROOT, "lib") }.merge(env), "ruby", "-e", script,
                                  chdir: AUTH_APP)
    [out, status.exitstatus]
  end

  it "is flagged by webhook_inbox:doctor when nothing protects it (exit 1), and not when something does" do
    out, code = doctor(env("none"))
    expect([code, out[/^dashboard:.*/]]).to eq([1, "dashboard: /webhook_inbox, CLOSED (every request answers 401): " \
                                                   "no protection chosen: set #{WebhookInbox::Rails::DashboardAuth::CHOICES}"])
    out, code = doctor(env("none", rails_env: "development"))
    expect(code).to eq(1)
    expect(out[/^dashboard:.*/]).to start_with("dashboard: /webhook_inbox, OPEN here (development is in dashboard_open_environments)")
    out, code = doctor(env("http_basic").merge(basic_env))
    expect([code, out[/^dashboard:.*/]]).to eq([0, "dashboard: /webhook_inbox, protected by HTTP Basic (credentials from ENV)"])
    out, code = doctor(env(nil))
    expect([code, out[/^dashboard:.*/]]).to eq([0, "dashboard: /webhook_inbox, protected by AdminController's before_action :authenticate_admin"])
  end
end
