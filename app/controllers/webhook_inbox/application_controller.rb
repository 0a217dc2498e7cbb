# frozen_string_literal: true

module WebhookInbox
  # The dashboard's base: inherits the app's configured controller
  # (WebhookInbox.configuration.dashboard_base_controller), so the app's authentication and
  # other before_actions run first, after DashboardAuthentication's (configuration.dashboard_auth:
  # outside development and test, no choice means 401). Every action that changes rows is a
  # POST with a CSRF token.
  class ApplicationController < WebhookInbox.configuration.dashboard_base_controller.to_s.constantize
    # A base that is not an ActionController::Base (e.g. an ActionController::API controller
    # with token auth) lacks what HTML pages with forms need.
    [::ActionController::Cookies, ::ActionController::RequestForgeryProtection, ::ActionView::Layouts,
     ::ActionController::Helpers].each { |m| include m unless self < m }

    protect_from_forgery with: :exception, prepend: true
    include DashboardAuthentication # after: its filter goes before the CSRF check
    # A parameter the dashboard cannot use (see EventList) is the client's error: 400, never 500.
    rescue_from(EventList::BadFilter) { |e| render plain: e.message, status: :bad_request }
    layout "webhook_inbox/application"
    helper WebhookInbox::DashboardHelper

    private

    # Who is acting, for webhook_inbox_actions: dashboard_actor's answer, else the HTTP Basic
    # user, else "unknown".
    def dashboard_actor
      configured = WebhookInbox.configuration.dashboard_actor
      actor = configured ? configured.call(self) : dashboard_basic_user
      actor.to_s.empty? ? "unknown" : actor.to_s[0, 200]
    end

    def dashboard_connection(&block)
      ::ActiveRecord::Base.connection_pool.with_connection(&block)
    end

    # The notice of the last action (kept in the session across its redirect).
    def take_notice
      session.delete(:webhook_inbox_notice)
    end

    def notice!(text)
      session[:webhook_inbox_notice] = text
    end
  end
end
