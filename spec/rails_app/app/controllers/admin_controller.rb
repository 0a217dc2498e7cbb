# frozen_string_literal: true

# The app's own authentication for its admin pages, and for the webhook_inbox dashboard
# (config.dashboard_base_controller = "AdminController"): HTTP basic auth against
# ADMIN_USER / ADMIN_PASSWORD. Without ADMIN_PASSWORD nobody gets in.
class AdminController < ActionController::Base
  before_action :authenticate_admin

  # The signed-in admin's name (the dashboard records it with every action).
  def current_admin
    @current_admin
  end

  private

  def authenticate_admin
    user, password = ENV["ADMIN_USER"].to_s, ENV["ADMIN_PASSWORD"].to_s
    @current_admin = authenticate_with_http_basic do |u, p|
      !password.empty? &&
        ActiveSupport::SecurityUtils.secure_compare(u, user) & ActiveSupport::SecurityUtils.secure_compare(p, password) &&
        u
    end
    request_http_basic_authentication("admin") unless @current_admin
  end
end
