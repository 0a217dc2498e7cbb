# frozen_string_literal: true

# rake webhook_inbox:* - the sidecar's commands with the app's database configuration
# (the same one the app uses: config/database.yml, DATABASE_URL or WebhookInbox.configure).
#   bin/rails webhook_inbox:stats                 (JSON=1 for --json)
#   bin/rails webhook_inbox:migrate               (the gem's schema; db:migrate does the same)
#   bin/rails webhook_inbox:requeue ID=scope/event_id | TYPE=... | SCOPE=... | EVENT_ID=... | ALL=1
#   bin/rails webhook_inbox:prune OLDER_THAN=30d
#   bin/rails webhook_inbox:sidecar               (run; ARGS="--concurrency 2" for more flags)
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

  desc "Apply the gem's inbox schema (idempotent)"
  task migrate: :environment do
    sidecar.call("migrate")
  end

  desc "Move quarantined events back to pending: ID=scope/event_id, TYPE=, SCOPE=, EVENT_ID= or ALL=1"
  task requeue: :environment do
    args = flags.call("ID" => "--id", "TYPE" => "--type", "SCOPE" => "--scope", "EVENT_ID" => "--event-id")
    args << "--all" if ENV["ALL"]
    abort "webhook_inbox:requeue needs ID=, TYPE=, SCOPE=, EVENT_ID= or ALL=1" if args.empty?
    sidecar.call("requeue", *args)
  end

  desc "Delete done events received before OLDER_THAN (e.g. 30d; at least 3d)"
  task prune: :environment do
    abort "webhook_inbox:prune needs OLDER_THAN= (e.g. 30d)" if ENV["OLDER_THAN"].to_s.empty?
    sidecar.call("prune", "--older-than", ENV["OLDER_THAN"])
  end

  desc "Run the sidecar in the foreground (ARGS=\"--concurrency 2\")"
  task sidecar: :environment do
    require "shellwords"
    sidecar.call("run", *Shellwords.split(ENV["ARGS"].to_s))
  end
end
