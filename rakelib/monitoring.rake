# frozen_string_literal: true

# rakelib/monitoring.rake - `rake monitoring:check`, run by :test_all: the shipped alert rules
# through promtool (check rules, then their unit tests), the Grafana dashboard's queries through
# promtool's PromQL parser, then spec/monitoring (every metric and label the rules and the
# dashboard read, against real scrapes of the sidecar and WebhookInbox::Metrics).
namespace :monitoring do
  dir = File.expand_path("../lib/webhook_inbox/monitoring", __dir__)
  promtool = lambda do
    # bin/setup installs it (Debian's prometheus package); a missing promtool fails, never skips.
    abort "monitoring: promtool not found (run bin/setup, or apt-get install prometheus)" unless
      system("command -v promtool >/dev/null 2>&1")
    "promtool"
  end

  desc "promtool check rules and promtool test rules on lib/webhook_inbox/monitoring/alerts.yml"
  task :rules do
    sh promtool.call, "check", "rules", File.join(dir, "alerts.yml")
    sh promtool.call, "test", "rules", File.join(dir, "alerts_test.yml")
  end

  desc "Every query of lib/webhook_inbox/monitoring/dashboard.json parsed by promtool (as a recording rule)"
  task :dashboard do
    require "json"
    require "yaml"
    require "tmpdir"
    panels = JSON.parse(File.read(File.join(dir, "dashboard.json"))).fetch("panels")
    exprs = panels.flat_map { |p| (p["targets"] || []).map { |t| t.fetch("expr") } }
    abort "monitoring: the dashboard has no queries" if exprs.empty?
    # Grafana's interval variables become durations; any other $variable stays and fails the parse.
    rules = exprs.each_with_index.map do |e, i|
      { "record" => "webhook_inbox:dashboard_query_#{i}", "expr" => e.gsub(/\$__(rate_interval|interval|range)\b/, "5m") }
    end
    Dir.mktmpdir("wi-dashboard-") do |tmp|
      path = File.join(tmp, "dashboard_queries.yml")
      File.write(path, YAML.dump("groups" => [{ "name" => "dashboard", "rules" => rules }]))
      sh promtool.call, "check", "rules", path
    end
  end

  desc "spec/monitoring: the rules' and the dashboard's metrics and labels against real scrapes"
  task names: :compile do
    # In test_all the specs (which run before: rakelib/test_all.rake) already ran spec/monitoring, unless SPEC= narrowed them.
    ran = %i[spec c_tests_beside_spec].any? { |t| Rake::Task.task_defined?(t) && Rake::Task[t].already_invoked }
    next puts("monitoring:names: spec/monitoring ran with the specs") if ran && ENV["SPEC"].nil?

    sh RbConfig.ruby, "-S", "rspec", "spec/monitoring"
  end

  desc "The alert rules, their unit tests and the dashboard checked (promtool, then spec/monitoring)"
  task check: %i[rules dashboard names]
end

task test_all: "monitoring:check"
