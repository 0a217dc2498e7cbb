# frozen_string_literal: true

require "optparse"
require_relative "../effects/job_runner"
require_relative "../effects/reporting"
require_relative "heartbeat"
require_relative "reporting"
require_relative "quarantine_reports"
require_relative "recovery_reports"
require_relative "effect_reports"

module WebhookInbox
  module Handlers
    # Worker - the process that runs the app's Ruby handlers: `bin/webhook-inbox-sidecar ruby`
    # (the app booted, its ActiveRecord connection). Beside Puma, never inside it: a backlog
    # is worked through here at the worker's own pace, and web requests only share the
    # database with it. Any number of workers on any number of hosts share the runs (SKIP
    # LOCKED); a round's runs are charged in one commit before their handlers run, then its
    # first attempts run in one transaction holding their events' and rows' locks (one commit
    # per batch), every other run alone. A worker killed mid-handler applies nothing of that
    # transaction and the killed runs are due again after their backoff, charged once; a
    # handler that kills its process therefore runs alone from its second attempt on, and is
    # quarantined after its last, while its batch-mates succeed alone (Runner).
    #
    # At start it registers the app's handlers (Handlers.register: adds, never removes); with
    # none loaded, or a schema older than the Runner's functions (db/016), it logs
    # level=error and exits 1 (fail closed). It wakes on the outbox's NOTIFY, else every poll
    # interval. Each round also performs the jobs and mails handlers enqueued
    # (Effects::JobRunner: after their commit, under stable keys) and refreshes the worker's
    # heartbeat for webhook_inbox:doctor (Heartbeat, schema v22). The first SIGTERM/SIGINT
    # finishes the round in flight and exits; a second exits at once. A lost database
    # connection is retried with backoff. A handler that runs past the time limit
    # (--handler-timeout, else the configuration's handler_timeout: 30 s) is interrupted and
    # charged a failure; its batch-mates commit. The outcome of each run (outcome=done, retry,
    # quarantined) is logged once its batch committed, and reported to the app (Reporting:
    # notifications, Rails.error, Rails.logger). Each round of its first thread also reports
    # the sidecar's quarantines and the HTTP effects it quarantined to Rails.error, and
    # reconcile's recoveries as notifications, once across workers (QuarantineReports,
    # EffectReports, RecoveryReports, schema v27; off, with a log line, on an older schema).
    # `--report-only` (or WEBHOOK_INBOX_REPORT_ONLY=1), for apps whose handlers are all SQL:
    # only that, no handler needed, no heartbeat (doctor counts workers that run handlers).
    class Worker
      DEFAULTS = { concurrency: 1, batch_size: 10, poll_interval: 1.0, max_attempts: 10, backoff_base_ms: 1000,
                   backoff_cap_ms: 3_600_000, handler_timeout: nil, job_lease_ms: 60_000, report_only: nil }.freeze
      REPORT_ONLY_ENV = "WEBHOOK_INBOX_REPORT_ONLY"
      RECONNECT_MIN_S = 0.1
      RECONNECT_MAX_S = 5.0
      CHANNEL = "webhook_inbox_outbox"

      # `ruby [--concurrency N] [--batch-size N] [--poll-interval 1s] [--max-attempts N]
      # [--backoff-base 1s] [--backoff-cap 1h] [--handler-timeout 30s] [--job-lease 1m] [--report-only]`.
      # Returns the exit status.
      def self.cli(argv, out: $stderr)
        opts = DEFAULTS.dup
        OptionParser.new do |o|
          o.banner = "usage: bin/webhook-inbox-sidecar ruby [options]  (runs the app's Ruby handlers)"
          o.on("--concurrency N", Integer, "threads, each with its own connection (1)") { |v| opts[:concurrency] = v }
          o.on("--batch-size N", Integer, "runs per round; first attempts share one transaction (10)") { |v| opts[:batch_size] = v }
          o.on("--poll-interval D", "look for due runs at least this often (1s)") { |v| opts[:poll_interval] = seconds(v) }
          o.on("--max-attempts N", Integer, "quarantine a run after N failures (10)") { |v| opts[:max_attempts] = v }
          o.on("--backoff-base D", "first retry delay (1s)") { |v| opts[:backoff_base_ms] = (seconds(v) * 1000).round }
          o.on("--backoff-cap D", "longest retry delay (1h)") { |v| opts[:backoff_cap_ms] = (seconds(v) * 1000).round }
          o.on("--handler-timeout D", "interrupt a handler after D, charged a failure (handler_timeout: 30s; 0: none)") do |v|
            opts[:handler_timeout] = seconds(v)
          end
          o.on("--job-lease D", "a job from a handler taken by a worker that died runs again after this (1m)") do |v|
            opts[:job_lease_ms] = [(seconds(v) * 1000).round, 1].max
          end
          o.on("--report-only", "only report the sidecar's quarantines, effects and recoveries to the app (SQL handlers only; " \
                                "#{REPORT_ONLY_ENV}=1)") { opts[:report_only] = true }
        end.parse!(argv.dup)
        new(**opts, out: out).run
      rescue OptionParser::ParseError, ArgumentError => e
        out.puts "webhook-inbox-sidecar ruby: #{e.message}"
        2
      end

      # "200ms", "1.5s", "5m", "1h" or a number of seconds.
      def self.seconds(text)
        m = /\A(\d+(?:\.\d+)?)(ms|s|m|h)?\z/.match(text.to_s) or raise ArgumentError, "not a duration: #{text.inspect} (200ms, 1s, 5m, 1h)"
        Float(m[1]) * { "ms" => 0.001, "s" => 1, nil => 1, "m" => 60, "h" => 3600 }.fetch(m[2])
      end

      def initialize(registry: Handlers.registry, out: $stderr, **opts)
        @opts = DEFAULTS.merge(opts)
        raise ArgumentError, "concurrency, batch size and max attempts must be >= 1" if %i[concurrency batch_size max_attempts].any? { |k| @opts[k] < 1 }

        @registry = registry
        @out = out
        @stop = false
        @report_only = @opts[:report_only].nil? ? %w[1 true yes].include?(ENV[REPORT_ONLY_ENV].to_s.downcase) : @opts[:report_only]
        @sidecar_reports = [QuarantineReports, RecoveryReports, EffectReports].map { |k| k.new(on_failure: method(:sidecar_report_failed)) }
        @runner = Runner.new(registry, max_attempts: @opts[:max_attempts], backoff_base_ms: @opts[:backoff_base_ms],
                                       backoff_cap_ms: @opts[:backoff_cap_ms], on_result: method(:on_result),
                                       time_limit: @opts.fetch(:handler_timeout) || WebhookInbox.configuration.handler_timeout)
        @jobs = Effects::JobRunner.new(max_attempts: @opts[:max_attempts], backoff_base_ms: @opts[:backoff_base_ms],
                                       backoff_cap_ms: @opts[:backoff_cap_ms], lease_ms: @opts[:job_lease_ms],
                                       on_result: method(:log_job))
      end

      def run
        return run_report_only if @report_only

        Handlers.load_app_handlers
        if @registry.empty? # fail closed: a worker that loaded nothing must not run (nor register) anything
          log("ruby_worker_no_handlers", %(note="nothing subscribed: WebhookInbox.subscribe or app/webhooks/; exiting"), level: "error")
          return 1
        end
        unless ::ActiveRecord::Base.connection_pool.with_connection { |c| c.select_value("SELECT to_regprocedure('#{Runner::START_BATCH_PROC}') IS NOT NULL") }
          log("ruby_worker_schema_old", %(note="the inbox schema is older than v16 (no webhook_inbox_ruby_start_batch): run migrate; exiting"), level: "error")
          return 1
        end
        n = ::ActiveRecord::Base.connection_pool.with_connection { |c| Handlers.register(c, @registry) }
        @heartbeat = Heartbeat.new(@jobs.owner, handlers: @registry.subscriptions.size)
        reports = sidecar_reports?
        log("ruby_worker_starting", "handlers=#{@registry.subscriptions.size} registered=#{n} concurrency=#{@opts[:concurrency]} " \
                                    "handler_timeout_s=#{@runner.time_limit || 'none'} quarantine_reports=#{reports ? 'on' : 'off'}")
        work_until_stopped
      end

      # --report-only: the sidecar's quarantines, effects and recoveries to the app, nothing else;
      # exits 1 on a schema without the reporters (fail closed: it would do nothing).
      def run_report_only
        unless sidecar_reports?
          log("ruby_worker_schema_old", %(note="the inbox schema is older than v27 (no #{QuarantineReports::PROC}): run migrate; exiting"),
              level: "error")
          return 1
        end
        log("ruby_worker_starting", "report_only=true quarantine_reports=on")
        work_until_stopped
      end

      def stop = @stop = true

      # Rails' reloader calls this after it unloaded the app's code (development).
      def code_reloaded! = @reloaded = true

      private

      # Whether this database has the reporters' functions (v27: all three or none); remembered
      # for the rounds.
      def sidecar_reports?
        @reports = ::ActiveRecord::Base.connection_pool.with_connection do |c|
          @sidecar_reports.all? { |r| r.class.available?(c) }
        end
        unless @reports
          log("ruby_worker_quarantine_reports_off",
              %(note="schema older than v27: the sidecar's quarantines, effects and recoveries are not reported to the app"))
        end
        @reports
      end

      def work_until_stopped
        trap_signals
        worker = self # the callback runs in the reloader's instance
        rails_app.reloader.after_class_unload { worker.code_reloaded! } if rails_app.respond_to?(:reloader)
        threads = Array.new(@report_only ? 1 : @opts[:concurrency]) { |i| Thread.new { work(i) } }
        threads.each(&:join)
        (::ActiveRecord::Base.connection_pool.with_connection { |c| @heartbeat&.stopped(c) } rescue nil) # rubocop:disable Style/RescueModifier
        log("ruby_worker_stopped", "")
        0
      end

      # TERM and INT stop after the current round (a second one at once). HUP, which ends a
      # process by default (a closed terminal, `kill -HUP` from a supervisor's reload), is
      # ignored with a log line: handlers' code loads on a restart (or by the reloader in
      # development), and the configuration is read at start.
      def trap_signals
        %w[TERM INT].each do |sig|
          Signal.trap(sig) { @stop ? exit!(1) : (@stop = true) }
        end
        Signal.trap("HUP") { @hup = true }
      end

      def log_hup
        return unless @hup

        @hup = false
        log("ruby_worker_sighup_ignored", %(note="restart the worker to load new code or configuration"))
      end

      def work(worker)
        delay = RECONNECT_MIN_S
        until @stop
          begin
            log_hup if worker.zero?
            round(worker)
            delay = RECONNECT_MIN_S
          rescue StandardError => e
            log("ruby_worker_round_failed", %(worker=#{worker} error="#{e.class}: #{e.message.lines.first.to_s.strip[0, 200].delete('"')}" retry_in_s=#{delay.round(1)}))
            sleep delay
            delay = [delay * 2, RECONNECT_MAX_S].min
          end
        end
      end

      # Up to batch size runs (Runner: first attempts in one transaction) and the jobs their
      # handlers enqueued (Effects::JobRunner), inside the app's reloader, then a wait when none
      # was due (outside it: a reload need not wait for it). The query cache stays off, as
      # outside Rails' executor. The first thread also reports the sidecar's quarantines.
      def round(worker = 0)
        n = in_app do
          on_connection do |c|
            c.uncached do
              reported = worker.zero? && @reports ? report_sidecar(c) : 0
              next reported if @report_only

              @heartbeat.beat(c)
              reregister(c)
              reported + @runner.run_batch(c, @opts[:batch_size]).size + @jobs.run_batch(c, @opts[:batch_size]).size
            end
          end
        end
        on_connection { |c| wait(c) } if n.zero? && !@stop
      end

      # A connection of the pool for the block. A failure drops it (the next round connects
      # again): it may be the one that broke.
      def on_connection
        ::ActiveRecord::Base.connection_pool.with_connection do |connection|
          yield connection
        rescue StandardError
          (connection.disconnect! rescue nil) # rubocop:disable Style/RescueModifier
          raise
        end
      end

      # Rails' reloader around the block, as Solid Queue and GoodJob wrap each job: the
      # executor's hooks in every environment and, where code reloads (development), the
      # app's changed code reloaded first, so the next event runs an edited handler (handler
      # classes are looked up by name at each run). Checks out no connection: the executor
      # returns the thread's connection when it completes. Outside Rails, just the block.
      def in_app(&block)
        app = rails_app
        app ? app.reloader.wrap(&block) : yield
      end

      def rails_app = defined?(::Rails) && ::Rails.respond_to?(:application) && ::Rails.application

      # After a reload: the handlers under app/webhooks loaded again and registered (adds only),
      # so a handler or a pattern added meanwhile gets its events.
      def reregister(connection)
        return unless @reloaded

        @reloaded = false
        Handlers.load_app_handlers
        n = Handlers.register(connection, @registry)
        log("ruby_worker_reloaded", "handlers=#{@registry.subscriptions.size} registered=#{n}")
      end

      # Waits for a NOTIFY on the outbox channel or the poll interval, whichever comes first.
      def wait(connection)
        raw = connection.raw_connection
        raw.async_exec("LISTEN #{CHANNEL}")
        raw.wait_for_notify([@opts[:poll_interval], Heartbeat::INTERVAL_S].min)
        nil while raw.notifies # drain the others folded into this wake-up
      end

      # A committed run: its log line, then the app's notifications and error reports. A
      # subscriber that raises is logged, never the round's failure (the batch committed).
      def on_result(r)
        log("handler", Reporting.fields(r))
        Reporting.call(r)
      rescue StandardError => e
        log("ruby_worker_report_failed", %(event_id=#{r.event_id} error="#{e.class}"), level: "error")
      end

      # A performed job: its log line, then the app's notification and, for a job quarantined
      # for good, its error report (Effects::Reporting); a subscriber that raises is logged.
      # One poll of each sidecar reporter (QuarantineReports, RecoveryReports, EffectReports)
      # when due (at most every poll interval, unless the last one was full): one log line per
      # row told; the number told. A failed poll (its transaction rolled back: told again
      # later) is logged and never keeps the round's handlers from running; a lost connection
      # fails them next anyway.
      def report_sidecar(connection)
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        return 0 if @next_report_at && now < @next_report_at

        full = false
        told = @sidecar_reports.sum do |reporter|
          rows = reporter.run(connection)
          full ||= rows.size >= reporter.limit
          rows.each { |row| log(reporter.class::LOG_EVENT, reporter.log_fields(row)) }
          rows.size
        end
        @next_report_at = full ? nil : now + @opts[:poll_interval]
        told
      rescue StandardError => e
        raise if @report_only

        log("ruby_worker_quarantine_reports_failed", %(error="#{e.class}: #{e.message.lines.first.to_s.strip[0, 200].delete('"')}"),
            level: "error")
        0
      end

      def sidecar_report_failed(row, error)
        id = row["operation_id"] ? "operation_id=#{row['operation_id']}" : "event_id=#{row['event_id']}"
        log("ruby_worker_report_failed", %(#{id} error="#{error.class}"), level: "error")
      end

      def log_job(r)
        err = r.error ? %( error="#{r.error.lines.first.to_s.strip[0, 200].delete('"')}") : ""
        log("job", "key=#{r.key} job=#{r.job_class} outcome=#{Effects::Reporting.outcome(r)} attempt=#{r.attempt} " \
                   "duration_ms=#{r.duration_ms.round(1)}#{err}")
        Effects::Reporting.call(r)
      rescue StandardError => e
        log("ruby_worker_report_failed", %(key=#{r.key} error="#{e.class}"), level: "error")
      end

      def log(event, fields, level: "info")
        @out.puts("#{Time.now.utc.strftime('%Y-%m-%dT%H:%M:%S.%LZ')} level=#{level} event=#{event} #{fields}".rstrip)
        @out.flush
      end
    end
  end
end
