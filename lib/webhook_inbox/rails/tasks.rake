# frozen_string_literal: true

# rake webhook_inbox:* - the sidecar's commands with the app's database configuration
# (the same one the app uses: config/database.yml, DATABASE_URL or WebhookInbox.configure).
#   bin/rails webhook_inbox:stats                 (JSON=1 for --json)
#   bin/rails webhook_inbox:migrate               (the gem's schema; db:migrate does the same;
#                                                  CITUS=1: and the Citus layout, migrate --citus)
#   bin/rails webhook_inbox:requeue ID=scope/event_id | TYPE=... | SCOPE=... | EVENT_ID=... | ALL=1
#   bin/rails webhook_inbox:replay  ID=... | TYPE=... | SCOPE=... | EVENT_ID=...  (done events run again)
#   bin/rails webhook_inbox:prune OLDER_THAN=30d
#   bin/rails webhook_inbox:reverify ENDPOINT=stripe  (refused deliveries kept aside, verified again)
#   bin/rails webhook_inbox:retire_handler NAME=mark_paid [TYPE=]  (a Ruby handler no longer run)
#   bin/rails webhook_inbox:pause  TYPE='invoice.*' | SCOPE=... | DESTINATION=...  (held: pending, uncharged)
#   bin/rails webhook_inbox:resume TYPE=... | SCOPE=... | DESTINATION=... [RATE=50] (events/s over all sidecars)
#   bin/rails webhook_inbox:requeue_effects OPERATION_ID= | DESTINATION= | HANDLER= | EVENT= | ALL=1
#                                                 (quarantined effects: effect_tasks.rake, loaded by the engine)
# Requeues, replays, prunes, reverifies, pauses, resumes and retired handlers are recorded in webhook_inbox_actions with ACTOR= (default $USER@host).
#   bin/rails webhook_inbox:sidecar               (run; ARGS="--concurrency 2" for more flags)
#   bin/rails webhook_inbox:doctor                (what is configured and missing; exits 1 if something is)
# For a long-running sidecar prefer bin/webhook-inbox-sidecar: it takes flags directly.
namespace :webhook_inbox do
  sidecar = lambda do |*args|
    url = WebhookInbox.configuration.effective_database_url or
      abort "webhook_inbox: no database configured (config/database.yml, DATABASE_URL or WebhookInbox.configure)"
    WebhookInbox::Sidecar.exec(*args, database_url: url)
  end
  flags = lambda do |names|
    names.flat_map { |env, flag| ENV[env].to_s.empty? ? [] : [flag, ENV[env]] }
  end

  desc "Inbox health: pending, oldest pending age, retries, quarantined, done, latency (JSON=1 for JSON)"
  task stats: :environment do
    sidecar.call("stats", *(ENV["JSON"] ? ["--json"] : []))
  end

  desc "Apply the gem's inbox schema (idempotent; CITUS=1 on a Citus coordinator: and the Citus layout)"
  task migrate: :environment do
    sidecar.call("migrate", *(ENV["CITUS"].to_s.empty? ? [] : ["--citus"]))
  end

  actor = -> { flags.call("ACTOR" => "--actor") }
  operator = lambda do # ACTOR=, else $USER@host: who an audited action names
    require "socket"
    ENV["ACTOR"].to_s.empty? ? "#{ENV['USER'].to_s.empty? ? 'unknown' : ENV['USER']}@#{Socket.gethostname}" : ENV["ACTOR"]
  end
  filters = -> { flags.call("ID" => "--id", "TYPE" => "--type", "SCOPE" => "--scope", "EVENT_ID" => "--event-id") }

  desc "Move quarantined events back to pending: ID=scope/event_id, TYPE=, SCOPE=, EVENT_ID= or ALL=1 (ACTOR= for the audit)"
  task requeue: :environment do
    args = filters.call
    args << "--all" if ENV["ALL"]
    abort "webhook_inbox:requeue needs ID=, TYPE=, SCOPE=, EVENT_ID= or ALL=1" if args.empty?
    sidecar.call("requeue", *args, *actor.call)
  end

  desc "Run done events again (after fixing a handler): ID=scope/event_id, TYPE=, SCOPE= or EVENT_ID= (ACTOR= for the audit)"
  task replay: :environment do
    args = filters.call
    abort "webhook_inbox:replay needs ID=, TYPE=, SCOPE= or EVENT_ID= (every done event at once is refused)" if args.empty?
    sidecar.call("requeue", "--replay", *args, *actor.call)
  end

  held = lambda do |task| # [kind, target] of TYPE=, SCOPE= or DESTINATION= (exactly one)
    given = { "route" => ENV["TYPE"], "scope" => ENV["SCOPE"], "destination" => ENV["DESTINATION"] }.reject { |_, v| v.to_s.empty? }
    abort "webhook_inbox:#{task} needs one of TYPE= (a route: an event type, 'prefix*' or '*'), SCOPE= or DESTINATION=" if given.size != 1
    given.first
  end
  flow = lambda do |task, &change| # runs change(connection, kind, target); a refusal aborts with its reason
    kind, target = held.call(task)
    [kind, target, ActiveRecord::Base.connection_pool.with_connection { |c| change.call(c, kind, target) }]
  rescue ActiveRecord::StatementInvalid => e
    abort "webhook_inbox:#{task}: #{WebhookInbox::Flow.refusal(e)}"
  end

  desc "Pause a route (TYPE=, an event type, 'prefix*' or '*'), a scope (SCOPE=) or a destination (DESTINATION=): its events " \
       "(effects) stay pending, uncharged, until resume (ACTOR= for the audit)"
  task pause: :environment do
    kind, target, r = flow.call("pause") { |c, k, t| WebhookInbox::Flow.pause(c, k, t, actor: operator.call) }
    puts "paused #{kind} #{target} (#{r[:held]} pending held; action ##{r[:action_id]})"
  end

  desc "Resume a route (TYPE=), scope (SCOPE=) or destination (DESTINATION=), at RATE= events/s over all sidecars when given " \
       "(routes and destinations; unlimited otherwise) (ACTOR= for the audit)"
  task resume: :environment do
    rate = ENV["RATE"].to_s.empty? ? nil : ENV["RATE"]
    kind, target, r = flow.call("resume") { |c, k, t| WebhookInbox::Flow.resume(c, k, t, rate: rate, actor: operator.call) }
    puts "resumed #{kind} #{target}#{rate ? " at #{rate}/s" : ''} (#{r[:released]} due now; action ##{r[:action_id]})"
  end

  desc "Delete done events received before OLDER_THAN (e.g. 30d; at least 3d) (ACTOR= for the audit)"
  task prune: :environment do
    abort "webhook_inbox:prune needs OLDER_THAN= (e.g. 30d)" if ENV["OLDER_THAN"].to_s.empty?
    sidecar.call("prune", "--older-than", ENV["OLDER_THAN"], *actor.call)
  end

  desc "Verify the refused deliveries kept for ENDPOINT= again with its current secrets and admit the ones that verify (ACTOR= for the audit)"
  task reverify: :environment do
    name = ENV["ENDPOINT"].to_s
    abort "webhook_inbox:reverify needs ENDPOINT= (a configured endpoint name)" if name.empty?
    r = WebhookInbox::Refused::Reverify.new(exec: WebhookInbox::Refused.active_record_exec).call(name, actor: operator.call)
    puts "reverified #{name}: #{r[:admitted]} admitted, #{r[:still_refused]} still refused, #{r[:expired]} expired " \
         "(action ##{r[:action_id]})"
  rescue WebhookInbox::ConfigurationError, WebhookInbox::StoreError => e
    abort "webhook_inbox:reverify: #{e.message}"
  end

  desc "Retire the Ruby handler NAME= (TYPE= for one of its patterns only): new events no longer wait for it, its pending runs are " \
       "quarantined as retired (ACTOR= for the audit)"
  task retire_handler: :environment do
    name = ENV["NAME"].to_s
    abort "webhook_inbox:retire_handler needs NAME= (a registered Ruby handler's name)" if name.empty?
    type = ENV["TYPE"].to_s.empty? ? nil : ENV["TYPE"]
    r = ActiveRecord::Base.connection_pool.with_connection do |c|
      c.transaction { WebhookInbox::Handlers.retire(c, name, event_type: type, actor: operator.call) }
    end
    puts "retired #{name}: #{r[:removed]} registration(s) removed, #{r[:runs_retired]} pending run(s) quarantined " \
         "(action ##{r[:action_id]})"
  rescue ActiveRecord::StatementInvalid => e
    abort "webhook_inbox:retire_handler: #{e.cause&.message.to_s.lines.first.to_s.sub(/\AERROR:\s*/, '').strip}"
  end

  desc "What is configured and what is missing: schema version, SQL routes, Ruby handlers and workers, backlog, sidecar, " \
       "endpoint secrets (never printed); exits 1 when something is wrong"
  task doctor: :environment do
    require "webhook_inbox/rails/doctor"
    lines, ok = ActiveRecord::Base.connection_pool.with_connection do |conn|
      WebhookInbox::Rails::Doctor.new(connection: conn).report
    end
    puts lines
    exit 1 unless ok
  end

  desc "Run the sidecar in the foreground (ARGS=\"--concurrency 2\")"
  task sidecar: :environment do
    require "shellwords"
    sidecar.call("run", *Shellwords.split(ENV["ARGS"].to_s))
  end
end
