# frozen_string_literal: true

require "rails/engine"
require_relative "rails/dashboard_auth"

module WebhookInbox
  # Engine - the dashboard, closed outside development and test until the app says how it is
  # protected (Rails::DashboardAuth; docs/dashboard.md):
  #
  #   # config/routes.rb
  #   mount WebhookInbox::Engine => "/webhook_inbox"
  #   # config/initializers/webhook_inbox.rb
  #   WebhookInbox.configure do |c|
  #     c.dashboard_base_controller = "AdminController"          # its before_actions guard the pages
  #     c.dashboard_auth = { before_action: :authenticate_admin! } # or :http_basic, :router_or_proxy
  #     c.dashboard_actor = ->(controller) { controller.current_admin&.email }
  #   end
  #
  # Server-rendered ERB from the gem's app/ tree: no asset pipeline, JavaScript or CDN (CSS
  # and SVG charts are inline). In an API-only app (no cookies or session middleware) the
  # engine brings a cookie session of its own for CSRF tokens; an app that has a session
  # keeps using its own.
  class Engine < ::Rails::Engine
    isolate_namespace WebhookInbox

    # A session for the engine's requests when the app has none (config.api_only).
    class SessionFallback
      def initialize(app)
        @app = app
        @with_session = ActionDispatch::Cookies.new(
          ActionDispatch::Session::CookieStore.new(app, key: "_webhook_inbox_session", same_site: :strict, httponly: true)
        )
      end

      def call(env)
        env.key?("rack.session") ? @app.call(env) : @with_session.call(env)
      end
    end

    config.middleware.use SessionFallback

    # rake webhook_inbox:requeue_effects: it requeues and audits through app/models' EffectList.
    rake_tasks do
      load File.expand_path("rails/effect_tasks.rake", __dir__)
    end
  end
end
