# frozen_string_literal: true

module WebhookInbox
  # DashboardAuthentication - the first filter of every dashboard request, before the app's
  # own filters and the CSRF check: Rails::DashboardAuth decides. A protection not in force
  # answers 401 (403 for a named filter the base does not run) with no page, no payload and
  # no action taken, except in dashboard_open_environments, where the page says it is open.
  # :http_basic asks for the user and password; the user becomes the actor when no
  # dashboard_actor is configured.
  module DashboardAuthentication
    extend ActiveSupport::Concern

    included do
      include ::ActionController::HttpAuthentication::Basic::ControllerMethods unless self < ::ActionController::HttpAuthentication::Basic::ControllerMethods
      prepend_before_action :authenticate_dashboard
      helper_method :dashboard_open_because
    end

    BASIC_REALM = "Webhook inbox"

    private

    # Why the dashboard is open without authentication here (shown as a banner), or nil.
    attr_reader :dashboard_open_because

    # The Basic user, when :http_basic let the request in.
    attr_reader :dashboard_basic_user

    def authenticate_dashboard
      auth = Rails::DashboardAuth.new
      if (problem = auth.problem(WebhookInbox::ApplicationController.superclass))
        return @dashboard_open_because = open_because(auth, problem) if auth.open_environment?

        return render(plain: "The webhook inbox dashboard is closed: its protection is not configured (see the server log).\n",
                      status: auth.refusal_status)
      end
      return unless auth.choice == :http_basic

      @dashboard_basic_user = authenticate_with_http_basic { |user, password| auth.basic_user(user, password) }
      request_http_basic_authentication(BASIC_REALM) unless @dashboard_basic_user
    end

    def open_because(auth, problem)
      "Open without authentication: the #{::Rails.env} environment is in dashboard_open_environments. " \
        "Elsewhere this dashboard answers #{auth.refusal_status} to every request until its protection is configured: " \
        "#{problem}."
    end
  end
end
