# frozen_string_literal: true

module WebhookInbox
  module Rails
    # Doctor - `bin/rails webhook_inbox:doctor`: what is configured and what is missing, read
    # from the app's database and WebhookInbox.configuration: the schema version, the routes
    # per event type and the types waiting for one, the sidecar (it records no heartbeat:
    # its sessions in pg_stat_activity and the last event done stand in), and each endpoint's
    # provider, scope and how many secrets are present. Never prints a secret or a payload.
    # #report returns the lines and whether everything needed is there.
    class Doctor
      SIDECAR_APP = "webhook-inbox-sidecar" # the sidecar's fallback_application_name (pgw.c)

      def initialize(connection:, config: WebhookInbox.configuration)
        @conn = connection
        @config = config
        @problems = 0
      end

      # [lines, ok]: ok is false when the schema is missing or stale, an endpoint cannot receive
      # or the mounted dashboard is not protected (DashboardCheck).
      def report
        lines = [*schema, *routes, *sidecar, *endpoints, dashboard,
                 "effect destinations: not checked here (they are the sidecar's --destination flags)"]
        [lines, @problems.zero?]
      end

      private

      def schema
        version = WebhookInbox::Schema.installed_version(->(sql) { @conn.select_value(sql, "webhook_inbox doctor") })
        problem = WebhookInbox::Schema.problem(version)
        return ["schema: version #{version} (this gem expects #{WebhookInbox::Schema::VERSION})"] unless problem

        @problems += 1
        ["schema: MISSING OR STALE - #{problem}"]
      end

      def routes
        return [] unless table?("webhook_inbox_routes")

        rows = @conn.select_all("SELECT * FROM webhook_inbox_routes ORDER BY event_type", "webhook_inbox doctor").to_a
        lines = rows.empty? ? ["routes: none (every event waits: add_webhook_inbox_route in a migration)"] : ["routes:"]
        rows.each do |r|
          lines << "  #{r['event_type']} -> #{r['handler']}#{" (destination #{r['destination']})" if r['destination']}" \
                   "#{" (batch #{r['batch_handler']})" if r['batch_handler']}"
        end
        waiting = @conn.select_rows("SELECT event_type, pending FROM webhook_inbox_unrouted()", "webhook_inbox doctor")
        waiting.each { |type, n| lines << "  waiting for a route: #{type.to_s.empty? ? '(no type)' : type} (#{n} pending)" }
        lines
      rescue ::ActiveRecord::StatementInvalid => e
        ["routes: could not be read (#{e.cause&.class || e.class})"]
      end

      def sidecar
        sessions = @conn.select_value(<<~SQL.squish, "webhook_inbox doctor", [bind(SIDECAR_APP)]).to_i
          SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1
        SQL
        last = (@conn.select_value("SELECT max(processed_at) FROM webhook_inbox WHERE status = 'done'", "webhook_inbox doctor") if table?("webhook_inbox"))
        ["sidecar: no heartbeat (the sidecar records none); connected now: #{sessions} session#{'s' unless sessions == 1} " \
         "(pg_stat_activity, application_name #{SIDECAR_APP}); last event done: #{last || 'never'}"]
      end

      def endpoints
        names = @config.endpoint_names
        return ["endpoints: none configured (WebhookInbox.configure { |c| c.endpoint(...) })"] if names.empty?

        problems = @config.endpoint_problems
        @problems += problems.size
        lines = ["endpoints:"]
        names.each do |name|
          s = @config.endpoint_summary(name)
          lines << "  #{name}: provider #{s[:provider]}, scope #{s[:scope].inspect}, " \
                   "#{s[:secrets_present]} of #{s[:secrets_given]} secret#{'s' unless s[:secrets_given] == 1} present"
        end
        lines + problems.map { |p| "  MISSING: #{p}" }
      end

      # DashboardCheck's line: a problem when the mounted dashboard has no protection chosen.
      def dashboard
        line, problem = DashboardCheck.doctor_line
        @problems += 1 if problem
        line
      end

      def table?(name)
        @conn.select_value("SELECT to_regclass($1) IS NOT NULL", "webhook_inbox doctor", [bind(name)])
      end

      def bind(value)
        ::ActiveRecord::Relation::QueryAttribute.new("v", value, ::ActiveRecord::Type::String.new)
      end
    end
  end
end
