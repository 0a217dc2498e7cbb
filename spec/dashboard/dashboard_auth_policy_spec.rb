# frozen_string_literal: true

require "spec_helper"
require "webhook_inbox/rails/dashboard_auth"

# Issue 34: WebhookInbox::Rails::DashboardAuth and Configuration#dashboard_auth= without a
# Rails app: the choices it accepts (the opt-out only by name), where credentials come from,
# the constant-time Basic check, and what it says is missing (never a secret).
RSpec.describe WebhookInbox::Rails::DashboardAuth do
  let(:config) { WebhookInbox::Configuration.new }

  def auth(rails_env: "production", credentials: {}, env: {})
    described_class.new(config: config, rails_env: rails_env, credentials: credentials, env: env)
  end

  # A controller-like class whose before callbacks are the given filters (defined methods).
  def base_running(*filters)
    callbacks = filters.map { |f| Struct.new(:kind, :filter).new(:before, f) }
    Class.new do
      define_singleton_method(:_process_action_callbacks) { callbacks }
      define_singleton_method(:to_s) { "AdminController" }
      filters.each { |f| define_method(f) { nil } }
    end
  end

  it "accepts no choice, :http_basic, :router_or_proxy and { before_action: Symbol }, and refuses anything else" do
    [nil, :http_basic, :router_or_proxy, { before_action: :authenticate_admin! }].each do |choice|
      config.dashboard_auth = choice
      expect(config.dashboard_auth).to eq(choice)
    end
    [false, true, :none, :off, "router_or_proxy", :basic, { before_action: "x" }, { before_action: :x, only: :show }, {}, -> {}].each do |bad|
      expect { config.dashboard_auth = bad }.to raise_error(WebhookInbox::ConfigurationError, /dashboard_auth must be/), bad.inspect
    end
    expect(config.dashboard_auth).to eq({ before_action: :authenticate_admin! }) # a refused value changes nothing
  end

  it "leaves no choice closed outside the open environments (configurable), open in them" do
    expect(auth.problem(Object)).to start_with("no protection chosen: set c.dashboard_auth = :http_basic")
    expect(auth.refusal_status).to eq(401)
    expect(auth.open_environment?).to be(false)
    expect(auth(rails_env: "staging").open_environment?).to be(false)
    expect(auth(rails_env: "development").open_environment?).to be(true)
    expect(auth(rails_env: "test").open_environment?).to be(true)
    config.dashboard_open_environments = %w[development]
    expect(auth(rails_env: "test").open_environment?).to be(false)
  end

  it "takes the Basic pair from the credentials, else from ENV; a half pair or empty values count as none" do
    config.dashboard_auth = :http_basic
    creds = { webhook_inbox: { dashboard_user: "cu", dashboard_password: "cp" } }
    env = { described_class::ENV_USER => "eu", described_class::ENV_PASSWORD => "ep" }
    both = auth(credentials: creds, env: env)
    expect([both.problem(Object), both.basic_user("cu", "cp"), both.basic_user("eu", "ep")]).to eq([nil, "cu", nil])
    expect(both.description).to eq("HTTP Basic (credentials from Rails credentials)")
    from_env = auth(credentials: { webhook_inbox: { dashboard_user: "cu" } }, env: env)
    expect([from_env.basic_user("eu", "ep"), from_env.basic_user("cu", "cp"), from_env.description])
      .to eq(["eu", nil, "HTTP Basic (credentials from ENV)"])
    [{}, { described_class::ENV_USER => "eu" }, { described_class::ENV_USER => "eu", described_class::ENV_PASSWORD => "" }].each do |e|
      none = auth(env: e)
      expect(none.problem(Object)).to include("no user and password are set")
      expect(none.basic_user("eu", "")).to be_nil
      expect(none.refusal_status).to eq(401)
    end
    expect(auth(env: { described_class::ENV_USER => "eu_value" }).problem(Object)).not_to include("eu_value")
  end

  it "compares the Basic pair in constant time on digests: both parts must match, whatever their lengths" do
    config.dashboard_auth = :http_basic
    a = auth(env: { described_class::ENV_USER => "ops", described_class::ENV_PASSWORD => "correct horse" })
    expect(a.basic_user("ops", "correct horse")).to eq("ops")
    [["ops", "correct hors"], ["ops", "correct horsee"], ["op", "correct horse"], ["OPS", "correct horse"], ["", ""],
     [nil, nil], ["ops", nil], ["ops", "correct horse\0"]].each do |u, p|
      expect([u, p, a.basic_user(u, p)]).to eq([u, p, nil])
    end
    digests = []
    allow(ActiveSupport::SecurityUtils).to receive(:secure_compare).and_wrap_original { |m, x, y| digests << [x, y]; m.call(x, y) }
    a.basic_user("x", "correct horse")
    expect(digests.size).to eq(2) # the password is compared though the user already differs
    expect(digests.flatten.map(&:bytesize).uniq).to eq([32])
  end

  it "takes a named filter only when the base controller runs it before its actions" do
    config.dashboard_auth = { before_action: :authenticate_admin! }
    expect(auth.problem(base_running(:authenticate_admin!))).to be_nil
    expect(auth.problem(base_running(:authenticate_user!))).to eq(
      "dashboard_auth names before_action :authenticate_admin!, which AdminController does not run " \
      '(dashboard_base_controller "ActionController::Base")'
    )
    undefined = base_running(:authenticate_admin!).tap { |k| k.send(:remove_method, :authenticate_admin!) }
    expect(auth.problem(undefined)).to include("does not run")
    expect(auth.problem(Object)).to include("does not run")
    expect(auth.refusal_status).to eq(403)
  end

  it "treats the named opt-out as a choice in force" do
    config.dashboard_auth = :router_or_proxy
    expect(auth.problem(Object)).to be_nil
    expect(auth.description).to eq("the router or a proxy (dashboard_auth :router_or_proxy)")
  end
end
