# frozen_string_literal: true

module WebhookInbox
  # WebhookInbox::Monitoring - where the gem's Prometheus alert rules and Grafana dashboard are,
  # for a deploy script to copy them (docs/operations.md, "Alerts and the dashboard"). Paths only:
  # nothing here reads or loads them.
  module Monitoring
    DIR = File.expand_path("monitoring", __dir__)

    module_function

    # The Prometheus rule file (rule_files: in prometheus.yml).
    def rules_path
      File.join(DIR, "alerts.yml")
    end

    # promtool's unit tests of those rules (`promtool test rules` on it).
    def rules_test_path
      File.join(DIR, "alerts_test.yml")
    end

    # The Grafana dashboard (Dashboards > New > Import, or a provisioning directory).
    def dashboard_path
      File.join(DIR, "dashboard.json")
    end
  end
end
