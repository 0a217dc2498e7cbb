# frozen_string_literal: true

require_relative "dashboard_auth"

module WebhookInbox
  module Rails
    # DashboardCheck - says when the mounted dashboard is not protected as chosen
    # (DashboardAuth): one error line when the app boots outside dashboard_open_environments
    # (the dashboard then answers 401 to every request), and a line for webhook_inbox:doctor,
    # a problem when no protection is chosen (in any environment: production would be
    # closed) or when the chosen one is not in force here outside the open environments.
    module DashboardCheck
      module_function

      # Where app's routes mount WebhookInbox::Engine (through constraints, e.g. Devise's
      # `authenticate :admin do ... end`), or nil.
      def mount_path(app = ::Rails.application)
        route = app.routes.routes.find { |r| engine?(r.app) }
        route&.path&.spec&.to_s
      end

      # Logs the line once routes are loaded (the Railtie calls it); rake tasks and
      # generators (assets:precompile runs without credentials) and open environments are skipped.
      def log_at_boot(app = ::Rails.application, auth: DashboardAuth.new, logger: WebhookInbox.configuration.logger)
        return if auth.open_environment? || BootCheck.rake_or_generator?

        path = mount_path(app) or return
        problem = auth.problem(base_controller) or return
        logger&.error("webhook_inbox: the dashboard at #{path} answers #{auth.refusal_status} to every request: #{problem}")
      end

      # [line, problem?] for webhook_inbox:doctor.
      def doctor_line(app = ::Rails.application, auth: DashboardAuth.new)
        path = mount_path(app) or return ["dashboard: not mounted", false]

        problem = auth.problem(base_controller)
        return ["dashboard: #{path}, protected by #{auth.description}", false] unless problem
        if auth.open_environment?
          return ["dashboard: #{path}, OPEN here (#{::Rails.env} is in dashboard_open_environments); " \
                  "elsewhere it answers #{auth.refusal_status}: #{problem}", auth.choice.nil?]
        end

        ["dashboard: #{path}, CLOSED (every request answers #{auth.refusal_status}): #{problem}", true]
      rescue NameError => e
        ["dashboard: dashboard_base_controller #{WebhookInbox.configuration.dashboard_base_controller.to_s.inspect} " \
         "cannot be loaded (#{e.class})", true]
      end

      def base_controller
        WebhookInbox.configuration.dashboard_base_controller.to_s.constantize
      end

      def engine?(rack)
        rack = rack.app while rack.is_a?(::ActionDispatch::Routing::Mapper::Constraints)
        rack == WebhookInbox::Engine
      end
    end
  end
end
