# frozen_string_literal: true

require_relative "dashboard_check"
require_relative "../cleanup_horizon"

module WebhookInbox
  module Rails
    # Doctor - `bin/rails webhook_inbox:doctor`: what is configured and what is missing, read
    # from the app's database and WebhookInbox.configuration: the schema version; SQL routes
    # and Ruby handlers per event type, and the pending types that have neither; the Ruby
    # workers' heartbeats (db/022); the sidecars connected (pg_stat_activity: the sidecar
    # records no heartbeat) and the backlog (the oldest pending event's age); the app's job
    # adapter and the jobs handlers enqueued; each endpoint's provider, scope and how many
    # secrets are present. Never prints a secret or a payload. #report returns the lines and
    # whether everything needed is there, so a deploy can run it as a check (exit 1 if not):
    # a problem is a missing or stale schema, an endpoint that cannot receive, Ruby handlers
    # registered with no Ruby worker alive, pending types nothing handles, or events pending
    # for over 5 minutes with no sidecar connected. The cleanup horizon line names the session
    # (pid, application_name, state, ages; never its query) or replica holding back VACUUM of
    # processed rows, HELD BACK past the configured cleanup_held_* thresholds: a warning, not a problem (a
    # long report is no reason to fail a deploy; the backlog line says when it matters).
    class Doctor
      SIDECAR_APP = "webhook-inbox-sidecar" # the sidecar's fallback_application_name (pgw.c)
      ALIVE_S = 60 # a heartbeat older than this: the worker is gone or stuck (it beats every 10 s)
      STALLED_S = 300 # events pending this long with no sidecar connected: nothing is processing them

      def initialize(connection:, config: WebhookInbox.configuration)
        @conn = connection
        @config = config
        @held = { held_s: config.cleanup_held_seconds, held_xids: config.cleanup_held_transactions }
        @problems = 0
      end

      # [lines, ok]: ok is false when something above is wrong (the mounted dashboard not
      # protected included: DashboardCheck).
      def report
        lines = [*schema, *routes, *ruby_handlers, *ruby_workers, *jobs, *backlog, horizon, *sidecar, *endpoints, dashboard,
                 "effect destinations: not checked here (they are the sidecar's --destination flags)"]
        [lines, @problems.zero?]
      end

      private

      def schema
        version = WebhookInbox::Schema.installed_version(->(sql) { value(sql) })
        @version = version
        problem = WebhookInbox::Schema.problem(version)
        return ["schema: version #{version} (this gem expects #{WebhookInbox::Schema::VERSION})"] unless problem

        problem!
        ["schema: MISSING OR STALE - #{problem}"]
      end

      # SQL routes (regproc columns read as text: the driver knows no such type). From v29 the
      # sidecar runs a route's handlers by name (handler_name): a name that resolves to no
      # function here (the function renamed or dropped) fails, as the sidecar refuses its batches.
      def routes
        return [] unless table?("webhook_inbox_routes")

        optional = %w[destination batch_handler].map { |c| column?("webhook_inbox_routes", c) ? "#{c}::text" : "NULL::text AS #{c}" }
        optional << (column?("webhook_inbox_routes", "handler_name") ? MISSING_NAMES : "NULL::text AS missing")
        rows = @conn.select_all("SELECT event_type, handler::text AS handler, #{optional.join(', ')} FROM webhook_inbox_routes " \
                                "ORDER BY event_type", "webhook_inbox doctor").to_a
        lines = [rows.empty? ? "SQL routes: none" : "SQL routes:"]
        rows.each do |r|
          lines << "  #{r['event_type']} -> #{r['handler']}#{" (destination #{r['destination']})" if r['destination']}" \
                   "#{" (batch #{r['batch_handler']})" if r['batch_handler']}"
          next unless r["missing"]

          problem!
          lines << "    MISSING: #{r['missing']} resolves to no function here: the sidecar refuses its events' batches " \
                   "(WIH01, nothing charged); create it, or write the route again (add_webhook_inbox_route)"
        end
        lines
      end

      # The names of a route (v29) that to_regproc cannot resolve, or NULL.
      MISSING_NAMES = "nullif(concat_ws(', ', CASE WHEN to_regproc(handler_name) IS NULL THEN handler_name END, " \
                      "CASE WHEN to_regproc(batch_handler_name) IS NULL THEN batch_handler_name END), '') AS missing"

      def ruby_handlers
        return [] unless table?("webhook_inbox_ruby_handlers")

        rows = @conn.select_rows("SELECT handler, string_agg(event_type, ', ' ORDER BY event_type) FROM webhook_inbox_ruby_handlers " \
                                 "GROUP BY handler ORDER BY handler", "webhook_inbox doctor")
        @ruby_handlers = rows.map(&:first)
        return ["Ruby handlers: none registered (a Ruby worker registers the app's when it starts)"] if rows.empty?

        ["Ruby handlers (registered by the Ruby worker):", *rows.map { |name, types| "  #{types} -> #{name}" }]
      end

      def ruby_workers
        return [] unless table?("webhook_inbox_ruby_handlers")
        return ["Ruby workers: not visible (schema older than v22 keeps no heartbeat)"] unless table?("webhook_inbox_workers")

        rows = @conn.select_rows(<<~SQL.squish, "webhook_inbox doctor")
          SELECT host, pid, handlers, extract(epoch FROM now() - heartbeat_at)::int, stopped_at IS NOT NULL
            FROM webhook_inbox_workers WHERE kind = 'ruby' ORDER BY heartbeat_at DESC LIMIT 20
        SQL
        alive = rows.select { |_, _, _, age, stopped| !stopped && age.to_i <= ALIVE_S }
        lines = alive.map { |host, pid, n, age| "  #{host} pid #{pid}: #{n} handlers, heartbeat #{age}s ago" }
        if alive.empty? && !@ruby_handlers.to_a.empty?
          problem!
          last = rows.first
          seen = last ? "last seen: #{last[0]} pid #{last[1]}, #{last[3]}s ago#{' (stopped)' if last[4]}" : "none ever seen"
          return ["Ruby worker: DOWN - #{@ruby_handlers.size} Ruby handler#{'s' unless @ruby_handlers.size == 1} registered " \
                  "(#{@ruby_handlers.first(3).join(', ')}#{', ...' if @ruby_handlers.size > 3}) and no worker's heartbeat in " \
                  "the last #{ALIVE_S}s (#{seen}): their events wait; start bin/webhook-inbox-sidecar ruby"]
        end
        ["Ruby workers: #{alive.size} alive#{':' unless alive.empty?}", *lines]
      end

      # Jobs from Ruby handlers (the outbox's active_job destination) and the app's adapter.
      def jobs
        return [] unless table?("webhook_inbox_outbox")

        pending, quarantined = @conn.select_rows(<<~SQL.squish, "webhook_inbox doctor", [bind(WebhookInbox::Effects::DESTINATION)]).first
          SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'quarantined')
            FROM webhook_inbox_outbox WHERE destination = $1 AND status <> 'delivered'
        SQL
        adapter = WebhookInbox::Effects.app_adapter_name
        note = if adapter.nil? then "ActiveJob not loaded"
               elsif WebhookInbox::Effects.non_transactional?(adapter)
                 "the app's adapter :#{adapter} does not commit with the database: jobs enqueued in Ruby handlers are " \
                   "captured into the outbox all the same, jobs enqueued elsewhere are not"
               else "the app's adapter :#{adapter}"
               end
        ["jobs from Ruby handlers: #{pending} pending, #{quarantined} quarantined (#{note})"]
      end

      def backlog
        return [] unless table?("webhook_inbox")

        count, age = @conn.select_rows("SELECT count(*), extract(epoch FROM now() - min(received_at))::int FROM webhook_inbox " \
                                       "WHERE status = 'pending'", "webhook_inbox doctor").first
        @oldest_pending_s = age&.to_i
        lines = ["backlog: #{count} pending#{", the oldest received #{age}s ago" if age}"]
        waiting = @conn.select_rows("SELECT event_type, pending FROM webhook_inbox_unrouted()", "webhook_inbox doctor")
        problem! unless waiting.empty?
        waiting.each do |type, n|
          lines << "  NOT HANDLED: #{type.to_s.empty? ? '(no type)' : type} (#{n} pending, with neither a SQL route nor a Ruby " \
                   "handler: add_webhook_inbox_route in a migration, or a Ruby handler)"
        end
        lines
      rescue ::ActiveRecord::StatementInvalid => e
        ["backlog: could not be read (#{e.cause&.class || e.class})"]
      end

      def horizon
        holder = CleanupHorizon.oldest(@conn)
        return "cleanup horizon: nothing holds back VACUUM" unless holder
        return "cleanup horizon: oldest held by #{holder}" unless holder.held?(**@held)

        "cleanup horizon: HELD BACK by #{holder}: VACUUM cannot remove processed events' old row versions, so claims " \
          "walk over them and a backlog drains slower the longer it lasts; end that transaction (or the replica's feedback)"
      rescue ::ActiveRecord::StatementInvalid => e
        "cleanup horizon: could not be read (#{e.cause&.class || e.class})"
      end

      def sidecar
        sessions = Integer(value(<<~SQL.squish, [bind(SIDECAR_APP)]))
          SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1
        SQL
        last = (value("SELECT max(processed_at) FROM webhook_inbox WHERE status = 'done'") if table?("webhook_inbox"))
        line = "sidecar: no heartbeat (the sidecar records none); connected now: #{sessions} session#{'s' unless sessions == 1} " \
               "(pg_stat_activity, application_name #{SIDECAR_APP}); last event done: #{last || 'never'}"
        return [line] unless sessions.zero? && @oldest_pending_s.to_i > STALLED_S

        problem!
        ["#{line}", "  STALLED: events pending for #{@oldest_pending_s}s and no sidecar connected: start bin/webhook-inbox-sidecar run"]
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
        unless defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application
          return "dashboard: not checked (no Rails application loaded)"
        end

        line, problem = DashboardCheck.doctor_line
        problem! if problem
        line
      end

      def problem! = @problems += 1

      def value(sql, binds = []) = @conn.select_value(sql, "webhook_inbox doctor", binds)

      def table?(name) = value("SELECT to_regclass($1) IS NOT NULL", [bind(name)])

      def column?(table, column)
        value("SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = $1 AND column_name = $2)",
              [bind(table), bind(column)])
      end

      def bind(value)
        ::ActiveRecord::Relation::QueryAttribute.new("v", value, ::ActiveRecord::Type::String.new)
      end
    end
  end
end
