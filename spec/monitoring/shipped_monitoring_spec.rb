# frozen_string_literal: true

require "json"
require "yaml"
require "net/http"
require "socket"
require "rack/mock"
require "active_support"
require "active_support/notifications"
require "webhook_inbox/test_helpers"
require_relative "../sidecar/sidecar_helper"
require_relative "../support/prometheus_text"
require_relative "../support/promql_selectors"
require_relative "../support/prometheus_server"

# The alert rules and the Grafana dashboard shipped in lib/webhook_inbox/monitoring (issue 31
# item 2), held to what is really served: every metric they read is a family of a real scrape
# of a running sidecar (`run --metrics-listen`) or of the app's metrics route
# (WebhookInbox::Metrics, as docs/operations.md mounts it); every label they match or group by
# is on that family; every value they match is one the scrape shows or the code can emit.
# Then a real Prometheus scrapes both, evaluates the rules (none may fail) and answers every
# dashboard query with series. promtool checks their syntax and the rules' unit tests (rake
# monitoring:check).
RSpec.describe "the shipped alert rules and Grafana dashboard", :sidecar do
  include SidecarHelper::Payloads

  SHIPPED_SECRET = "whsec_shipped_monitoring_spec"
  # Put on every series by Prometheus itself, not by the exporters.
  TARGET_LABELS = %w[job instance].freeze

  rules = YAML.load_file(WebhookInbox::Monitoring.rules_path).fetch("groups").flat_map { |g| g.fetch("rules") }
  dashboard = JSON.parse(File.read(WebhookInbox::Monitoring.dashboard_path))
  panels = dashboard.fetch("panels")
  queries = panels.flat_map { |p| (p["targets"] || []).map { |t| ["dashboard: #{p['title']} #{t['refId']}", t.fetch("expr")] } }
  exprs = rules.map { |r| ["alert #{r.fetch('alert')}", r.fetch("expr")] } + queries

  describe "without a server" do
    it "has a unit test (promtool test rules) for every alert rule" do
      tests = YAML.load_file(WebhookInbox::Monitoring.rules_test_path).fetch("tests")
      tested = tests.flat_map { |t| (t["alert_rule_test"] || []).map { |a| a.fetch("alertname") } }.uniq
      expect(rules.map { |r| r.fetch("alert") } - tested).to eq([])
      expect(tested - rules.map { |r| r.fetch("alert") }).to eq([])
    end

    it "counts as signature failures exactly the reasons the receiver answers 401 for" do
      rule = rules.find { |r| r["alert"] == "WebhookInboxSignatureFailures" }
      regexes = rule["expr"].scan(/reason=~"([^"]*)"/).flatten.uniq
      expect(regexes.size).to eq(1)
      expect(regexes.first.split("|").sort).to eq(WebhookInbox::Receiver::UNAUTHORIZED.map(&:to_s).sort)
    end

    it "is a Grafana dashboard over one chosen Prometheus data source, with unique ids and a query in every panel" do
      expect(dashboard).to include("uid" => "webhook-inbox", "title" => "webhook_inbox")
      expect(dashboard.dig("templating", "list")).to eq([dashboard.dig("templating", "list", 0)])
      expect(dashboard.dig("templating", "list", 0)).to include("name" => "datasource", "type" => "datasource",
                                                                "query" => "prometheus")
      ids = panels.map { |p| p.fetch("id") }
      expect(ids.uniq.size).to eq(ids.size)
      panels.reject { |p| p["type"] == "row" }.each do |p|
        expect(p["targets"]).not_to be_empty, p["title"]
        expect(p["description"].to_s).not_to be_empty, p["title"]
        [p, *p["targets"]].each { |x| expect(x["datasource"]).to eq("type" => "prometheus", "uid" => "${datasource}") }
        expect(p["targets"].map { |t| t["refId"] }.uniq.size).to eq(p["targets"].size)
      end
      # Only Grafana's interval variables: no $job or $instance a user would have to define.
      expect(queries.map(&:last).join("\n").scan(/\$\{?\w+/).uniq - ["$__rate_interval"]).to eq([])
    end

    it "lays out panels side by side without overlap, within Grafana's 24 columns" do
      cells = panels.flat_map do |p|
        g = p.fetch("gridPos")
        expect(g["x"] + g["w"]).to be <= 24
        Array.new(g["w"]) { |i| Array.new(g["h"]) { |j| [g["x"] + i, g["y"] + j] } }.flatten(1)
      end
      expect(cells.uniq.size).to eq(cells.size)
    end

    it "shows what issue 31 asks for: rates, backlog, oldest pending age, quarantines, retries, effects, heartbeats" do
      names = PromqlSelectors.metric_names(queries.map(&:last))
      expect(names).to include("webhook_inbox_received_total", "webhook_inbox_handled_total", "webhook_inbox_events_pending",
                               "webhook_inbox_oldest_pending_age_seconds", "webhook_inbox_events_quarantined",
                               "webhook_inbox_events_retrying", "webhook_inbox_effects_total", "webhook_inbox_effects_pending",
                               "webhook_inbox_batches_total", "webhook_inbox_idle_waits_total")
    end
  end

  describe "against real scrapes" do
    before(:all) do
      @db = SidecarHelper::DB.new(TestDatabase.cluster)
      @db.psql("CREATE FUNCTION t_flaky(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'flaky'; END $$")
      @scope = "stripe:acct_shipped:test"
    end

    let(:db) { @db }

    # Something in every family the rules read: events done, quarantined, retrying, unrouted
    # and held by a paused route; a pending run of the Ruby worker (destination "ruby");
    # deliveries accepted, duplicate and refused counted by WebhookInbox::Metrics.
    before do
      db.reset!
      db.add_order("t1", "o1", 2000, "jpy")
      db.psql(<<~SQL)
        TRUNCATE webhook_inbox_outbox, webhook_inbox_flow;
        INSERT INTO webhook_inbox_routes VALUES ('test.flaky', 't_flaky'), ('test.held', 'webhook_inbox_ignore');
        SELECT webhook_inbox_emit('op_ruby_1', 'ruby', '{}'::jsonb);
      SQL
      expect(sidecar("pause", "--type", "test.held", "--database-url", db.url, "--actor", "spec")[0]).to be_success
      db.insert_event("s1", "payment_intent.succeeded", succeeded("pi_1", "t1", "o1", 2000, "jpy"))
      db.insert_event("s2", "payment_intent.succeeded", succeeded("pi_2", "t1", "o1", 1, "jpy")) # quarantined
      db.insert_event("s3", "test.flaky", {})
      db.insert_event("s4", "no.route.here", {})
      db.insert_event("s5", "test.held", {})
      receive_deliveries
    end

    after { WebhookInbox::Metrics.uninstall }

    def receive_deliveries
      WebhookInbox::Metrics.reset!
      WebhookInbox::Metrics.install
      inbox = WebhookInbox::Inbox.new(database_url: db.url, pool_size: 1)
      endpoint = WebhookInbox::Endpoint.new(provider: :stripe, secrets: [SHIPPED_SECRET], source_scope: @scope, inbox: inbox)
      body = %({"id":"evt_shipped_1","object":"event","type":"charge.succeeded","data":{"object":{}}})
      signed = WebhookInbox::TestHelpers.stripe_headers(body, secret: SHIPPED_SECRET)
      [signed, signed, { "Stripe-Signature" => "t=#{Time.now.to_i},v1=#{'0' * 64}" }].each do |headers|
        env = Rack::MockRequest.env_for("/webhooks/stripe", method: "POST", input: body, "CONTENT_TYPE" => "application/json")
        headers.each { |k, v| env["HTTP_#{k.upcase.tr('-', '_')}"] = v }
        endpoint.call(env)
      end
    ensure
      inbox&.close
    end

    # A sidecar serving /metrics, with a configured destination and a scheduled reconcile
    # endpoint (its walk fails: no API there); returns its log once every family has samples.
    def start_sidecar
      _pid, log = spawn_sidecar("run", "--database-url", db.url, "--metrics-listen", "127.0.0.1:0", "--poll-interval", "200ms",
                                "--backoff-base", "1h", "--backoff-cap", "1h", "--destination", "receipts=http://127.0.0.1:1/r",
                                "--endpoint", "billing=stripe:#{@scope}", "--reconcile", "billing=1h", "--unrouted", "wait",
                                env: { "WEBHOOK_INBOX_BILLING_API_KEY" => "sk_test_shipped",
                                       "WEBHOOK_INBOX_TEST_STRIPE_API" => "http://127.0.0.1:1" })
      wait_for(30, 0.2, "every family with samples") do
        f = scrape_sidecar(log)
        %w[done quarantined retry].all? { |o| f["webhook_inbox_handled_total"]&.samples&.any? { |s| s.labels["outcome"] == o } } &&
          PrometheusText.value(f, "webhook_inbox_paused_pending", { "kind" => "route", "target" => "test.held" }) == 1.0 &&
          PrometheusText.value(f, "webhook_inbox_effects_pending", { "destination" => "ruby" }) == 1.0
      end
      log
    end

    # The app's metrics route, as docs/operations.md mounts it.
    def app_route
      ->(_env) { [200, { "content-type" => WebhookInbox::Metrics::CONTENT_TYPE }, [WebhookInbox::Metrics.to_prometheus]] }
    end

    def app_families
      res = Rack::MockRequest.new(app_route).get("/internal/webhook_metrics")
      expect(res.status).to eq(200)
      PrometheusText.parse(res.body)
    end

    # Serves app_route over HTTP on 127.0.0.1 (one request per connection) until the block
    # returns; yields "host:port".
    def serve_app_route
      server = TCPServer.new("127.0.0.1", 0)
      thread = Thread.new do
        loop do
          client = server.accept
          nil until ["\r\n", "\n", nil].include?(client.gets)
          status, headers, body = app_route.call({})
          text = body.join
          client.write("HTTP/1.1 #{status} OK\r\ncontent-type: #{headers['content-type']}\r\n" \
                       "content-length: #{text.bytesize}\r\nconnection: close\r\n\r\n#{text}")
          client.close
        rescue IOError, SystemCallError
          nil
        end
      end
      yield "127.0.0.1:#{server.addr[1]}"
    ensure
      thread&.kill
      server&.close
    end

    # Values a label can take beyond those the scrape shows: the receiver's other statuses and reasons.
    def vocabulary
      r = WebhookInbox::Receiver
      { "status" => WebhookInbox::Metrics::STATUSES,
        "reason" => (r::UNAUTHORIZED + r::RETRYABLE).map(&:to_s) + %w[store_unavailable none] }
    end

    it "reads only metrics, labels and label values that the sidecar and the app serve" do
      families = scrape_sidecar(start_sidecar).merge(app_families) { |name| raise "#{name} served by both" }
      seen = Hash.new { |h, k| h[k] = [] }
      families.each_value { |f| f.samples.each { |s| s.labels.each { |k, v| seen[k] << v } } }
      problems = []
      exprs.each do |where, expr|
        reads = PromqlSelectors.scan(expr)
        read_families = []
        reads.selectors.each do |sel|
          next if sel.metric == "up" # Prometheus's own, per scrape target

          fam = families[sel.metric] || families[sel.metric.sub(/_(bucket|sum|count)\z/, "")]
          fam = nil if fam && fam.name != sel.metric && fam.type != "histogram"
          next problems << "#{where}: #{sel.metric} is not served" unless fam

          read_families << fam
          labels = fam.samples.flat_map { |s| s.labels.keys }.uniq
          (sel.labels - labels - TARGET_LABELS).each { |l| problems << "#{where}: #{sel.metric} has no label #{l}" }
        end
        labels = read_families.flat_map { |f| f.samples.flat_map { |s| s.labels.keys } }.uniq
        (reads.grouping - labels - TARGET_LABELS).each { |l| problems << "#{where}: groups by #{l}, which no series it reads has" }
        expr.scan(/(\w+)\s*(=~|!~|!=|=)\s*"([\w.:|-]*)"/).each do |label, _op, values|
          next if TARGET_LABELS.include?(label) || label == "le"

          (values.split("|") - seen[label] - vocabulary.fetch(label, [])).each do |v|
            problems << "#{where}: #{label}=#{v.inspect} is never served"
          end
        end
      end
      expect(problems).to eq([]), "#{problems.size} problems:\n#{problems.join("\n")}"
      # every family the rules and the dashboard read, served with samples, so the checks above had labels to see
      used = PromqlSelectors.metric_names(exprs.map(&:last)) - ["up"]
      expect(used.reject { |n| (families[n] || families[n.sub(/_bucket\z/, "")])&.samples&.any? }).to eq([])
    end

    it "evaluates every rule without an error and answers every dashboard query with series, in a real Prometheus" do
      sidecar_address = metrics_address(start_sidecar).join(":")
      serve_app_route do |app_address|
        prom = PrometheusServer.new(jobs: { "webhook-inbox-sidecar" => [sidecar_address, "/metrics"],
                                            "webhook-inbox-app" => [app_address, "/internal/webhook_metrics"] },
                                    rule_files: [WebhookInbox::Monitoring.rules_path]).start
        wait_for(30, 0.5, "both targets up and scraped three times") do
          prom.query("count_over_time(up[1m]) >= 3 and up == 1").size == 2
        end
        # Grafana's $__rate_interval is at least four scrape intervals: 4 s here, 15 s to be safe.
        pending = queries.map { |where, expr| [where, expr.gsub("$__rate_interval", "15s")] }
        unhealthy = nil
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
        loop do
          pending.reject! { |_where, expr| prom.query(expr).any? }
          unhealthy = prom.rules.reject { |r| r["health"] == "ok" }.map { |r| "#{r['name']}: #{r['health']} #{r['lastError']}" }
          break if (pending.empty? && unhealthy.empty?) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

          sleep 0.5
        end
        expect(pending.map { |where, expr| "#{where}: #{expr}" }).to eq([])
        expect(unhealthy).to eq([])
        expect(prom.rules.size).to eq(rules.size)
      ensure
        prom&.stop
      end
    end
  end
end
