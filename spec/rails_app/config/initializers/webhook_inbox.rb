# frozen_string_literal: true

WebhookInbox.configure do |c|
  c.database_url = ENV.fetch("WI_DATABASE_URL")
  c.pool_size = Integer(ENV.fetch("WI_POOL", "8"))
  c.logger = Rails.logger
  # The dashboard: behind the app's own basic auth (AdminController's filter); actions are
  # recorded with the admin's name. WI_DASHBOARD_AUTH picks another protection
  # (spec/dashboard/dashboard_auth_spec.rb): none (no choice), http_basic, router_or_proxy, or
  # filter (AdminController with the filter named by WI_DASHBOARD_FILTER).
  case ENV["WI_DASHBOARD_AUTH"]
  when nil, "filter"
    c.dashboard_base_controller = "AdminController"
    c.dashboard_auth = { before_action: ENV.fetch("WI_DASHBOARD_FILTER", "authenticate_admin").to_sym }
    c.dashboard_actor = ->(controller) { controller.current_admin }
  when "none" then nil
  else c.dashboard_auth = ENV["WI_DASHBOARD_AUTH"].to_sym
  end
  c.dashboard_page_size = Integer(ENV.fetch("WI_DASHBOARD_PAGE_SIZE", "50"))
  c.cleanup_held_transactions = Integer(ENV.fetch("WI_CLEANUP_HELD_TRANSACTIONS", "1000000"))
  c.endpoint(:stripe, secrets: [ENV.fetch("STRIPE_WEBHOOK_SECRET")], scope: ENV.fetch("STRIPE_SCOPE"), tolerance: 300,
                      keep_refused: ENV["WI_KEEP_REFUSED"] == "1")
  if ENV["DIDIT_WEBHOOK_SECRET"]
    c.endpoint(:didit, secrets: [ENV["DIDIT_WEBHOOK_SECRET"]], scope: ENV.fetch("DIDIT_SCOPE", "didit:app:live"))
  end
end

# Shows what subscribers get (the spec reads these lines): no payload, no secrets.
if ENV["WI_LOG_NOTIFICATIONS"]
  ActiveSupport::Notifications.subscribe("receive.webhook_inbox") do |_name, _start, _finish, _id, payload|
    $stdout.puts "notification receive.webhook_inbox #{payload.sort.map { |k, v| "#{k}=#{v}" }.join(' ')}"
    $stdout.flush
  end
  # The Ruby side's other stages, one JSON line each (the keys and values a subscriber gets).
  ActiveSupport::Notifications.subscribe(/\A(handle|quarantine|requeue|reverify)\.webhook_inbox\z/) do |name, *, payload|
    $stdout.puts "notification #{name} #{JSON.generate(payload)}"
    $stdout.flush
  end
end

# Rejection counts reach webhook_inbox_rejections at most this often (default 5 s).
WebhookInbox.rejections.flush_interval = Float(ENV["WI_REJECTIONS_FLUSH"]) if ENV["WI_REJECTIONS_FLUSH"]
