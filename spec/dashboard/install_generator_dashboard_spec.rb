# frozen_string_literal: true

require "spec_helper"
require "tmpdir"
require "rails"
require "active_record"
require "rails/generators"
require "generators/webhook_inbox/install/install_generator"

# Issue 34 item 3: `rails g webhook_inbox:install` mounts the dashboard together with its
# protection: the app's admin controller and its authenticating filter when there is one,
# else HTTP Basic (credentials to add, said once); run again, it mounts nothing twice.
RSpec.describe WebhookInbox::Generators::InstallGenerator do
  around { |ex| Dir.mktmpdir("wi-gen") { |dir| @dir = dir; ex.run } }

  def write(path, text)
    FileUtils.mkdir_p(File.dirname(File.join(@dir, path)))
    File.write(File.join(@dir, path), text)
  end

  def read(path) = File.read(File.join(@dir, path))

  def generate
    out = StringIO.new
    $stdout, saved = out, $stdout
    described_class.start([], destination_root: @dir)
    out.string
  ensure
    $stdout = saved
  end

  # The initializer's configuration block, run against a fresh Configuration.
  def configured
    config = WebhookInbox::Configuration.new
    initializer = read("config/initializers/webhook_inbox.rb").sub("WebhookInbox.configure do |c|", "config.then do |c|")
    binding.eval(initializer) # rubocop:disable Security/Eval -- the generated file, in a scratch directory
    config
  end

  before { write("config/routes.rb", "Rails.application.routes.draw do\n  get \"up\" => \"rails/health#show\"\nend\n") }

  it "mounts the engine with HTTP Basic when the app has no admin controller, and says where the credentials go" do
    out = generate
    expect(read("config/routes.rb")).to eq(<<~RUBY)
      Rails.application.routes.draw do
        mount WebhookInbox::Engine => "/webhook_inbox" # protected as config/initializers/webhook_inbox.rb says
        get "up" => "rails/health#show"
      end
    RUBY
    expect(configured.dashboard_auth).to eq(:http_basic)
    expect(configured.dashboard_base_controller).to eq("ActionController::Base")
    expect(out).to include("bin/rails credentials:edit", "WEBHOOK_INBOX_DASHBOARD_USER", "docs/dashboard.md")

    again = generate
    expect(again).to include("config/routes.rb mounts WebhookInbox::Engine")
    expect(read("config/routes.rb").scan("WebhookInbox::Engine").size).to eq(1)
  end

  it "protects it with the app's admin controller and its authenticating filter when there is one" do
    write("app/controllers/admin/base_controller.rb", <<~RUBY)
      module Admin
        class BaseController < ApplicationController
          before_action :set_locale
          before_action :authenticate_admin!
        end
      end
    RUBY
    out = generate
    expect([configured.dashboard_base_controller, configured.dashboard_auth])
      .to eq(["Admin::BaseController", { before_action: :authenticate_admin! }])
    expect(out).not_to include("credentials:edit")
    expect(read("config/routes.rb")).to include('mount WebhookInbox::Engine => "/webhook_inbox"')
  end

  it "leaves a routes file that already mounts the engine (e.g. inside Devise's authenticate) as it is" do
    routes = "Rails.application.routes.draw do\n  authenticate :admin do\n    mount WebhookInbox::Engine => \"/ops/inbox\"\n  end\nend\n"
    write("config/routes.rb", routes)
    generate
    expect(read("config/routes.rb")).to eq(routes)
  end
end
