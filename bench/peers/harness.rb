# frozen_string_literal: true

# bench/peers/harness.rb - what bench/peers/run and bench/peers/drain share: the throwaway
# PostgreSQL with the gem's schema, the orders example and the peers' tables, this app booted
# against it (production), the stored orders and events, and the processes' CPU and RSS.
require "fileutils"

module PeersHarness
  APP = __dir__
  ROOT = File.expand_path("../..", APP)
  require File.join(ROOT, "spec/support/throwaway_postgres")
  require File.join(ROOT, "spec/support/receiver_helpers") # ProcessTree, PumaProcess
  SIDECAR = File.join(ROOT, "lib/webhook_inbox/webhook-inbox-sidecar")

  # Every process a mode spawned and has not stopped: a bench that aborts (a mode that did not
  # start or finish) ends them on its way out instead of leaving them retrying a dropped cluster.
  SPAWNED = []
  at_exit { SPAWNED.each { |p| Process.kill("TERM", p) rescue nil } } # rubocop:disable Style/RescueModifier

  module_function

  def spawn(*args, **kw) = Process.spawn(*args, **kw).tap { |pid| SPAWNED << pid }

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # A started cluster (fsync and synchronous_commit on) with every table the modes need, and
  # this process booted into the app (RAILS_ENV=production, DATABASE_URL: the cluster).
  def boot
    abort "build the sidecar first (bundle exec rake compile)" unless File.executable?(SIDECAR)
    pg = ThrowawayPostgres.new(dbname: "peers", settings: { synchronous_commit: "on", fsync: "on" })
    ENV["DATABASE_URL"] = "postgres:///#{pg.dbname}?host=#{pg.socket_dir}&port=#{pg.port}&user=#{pg.url[/user=(\S+)/, 1]}"
    ENV["RAILS_ENV"] = "production"
    ENV["PEERS_THREADS"] = "10" # this process's pool: it only enqueues and inspects
    system(SIDECAR, "migrate", "--database-url", pg.url, out: File::NULL, err: File::NULL) or abort "migrate failed"
    pg.psql_file(File.join(ROOT, "db/examples/orders.sql"))
    require File.join(APP, "config/environment")
    load File.join(APP, "db/peers_schema.rb")
    ActiveRecord::Base.connection_pool.disconnect!
    pg
  end

  def settings(pg)
    pg.psql("SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings " \
            "WHERE name IN ('synchronous_commit', 'fsync', 'shared_buffers')").strip
  end

  # Empties every mode's tables and stores n orders awaiting payment (order i: o<i>, 1000 + i usd).
  def reset(pg, n)
    pg.psql(<<~SQL)
      SET client_min_messages = warning;
      TRUNCATE webhook_inbox, webhook_inbox_outbox, orders, payments, order_transitions, good_jobs, good_job_executions,
               solid_queue_jobs CASCADE;
      INSERT INTO orders (tenant_id, order_id, amount, currency)
        SELECT 't' || (i % 10), 'o' || i, 1000 + i, 'usd' FROM generate_series(1, #{n}) i;
    SQL
    pg.psql("VACUUM ANALYZE orders")
    pg.psql("CHECKPOINT")
  end

  # The Stripe event that pays order i, as the receiver stores it (and as a job gets it).
  def payload(i)
    { "id" => "evt_#{i}", "object" => "event", "type" => "payment_intent.succeeded",
      "data" => { "object" => { "id" => "pi_#{i}", "object" => "payment_intent", "amount" => 1000 + i, "currency" => "usd",
                                "status" => "succeeded", "metadata" => { "tenant_id" => "t#{i % 10}", "order_id" => "o#{i}" } } } }
  end

  # n stored payment_intent.succeeded events (the same payloads), due now, in one statement.
  def store_events(pg, n)
    pg.psql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at, next_attempt_at)
        SELECT 'stripe:bench:test', 'evt_' || i, 'payment_intent.succeeded',
               jsonb_build_object('id', 'evt_' || i, 'object', 'event', 'type', 'payment_intent.succeeded',
                 'data', jsonb_build_object('object', jsonb_build_object('id', 'pi_' || i, 'object', 'payment_intent',
                   'amount', 1000 + i, 'currency', 'usd', 'status', 'succeeded',
                   'metadata', jsonb_build_object('tenant_id', 't' || (i % 10), 'order_id', 'o' || i)))),
               now() - interval '1 hour' + i * interval '1 microsecond', now() - interval '1 hour'
          FROM generate_series(1, #{n}) i
    SQL
  end

  # sql: true routes payment_intent.succeeded to the SQL handler (and forgets Ruby handlers);
  # false leaves it to the Ruby handler its worker registers.
  def sql_route(pg, sql)
    pg.psql(sql ? "DELETE FROM webhook_inbox_ruby_handlers; " \
                  "INSERT INTO webhook_inbox_routes VALUES ('payment_intent.succeeded', 'orders_on_payment_succeeded') ON CONFLICT DO NOTHING"
                : "DELETE FROM webhook_inbox_routes WHERE event_type LIKE 'payment_intent.%'")
  end

  def app_env(queue: "good_job", threads: 5, processes: 1)
    { "PEERS_QUEUE" => queue, "PEERS_THREADS" => threads.to_s, "PEERS_PROCESSES" => processes.to_s }
  end

  def sidecar(pg, log, concurrency:, batch: 100)
    spawn(SIDECAR, "run", "--database-url", pg.url, "--concurrency", concurrency.to_s, "--batch-size", batch.to_s,
                  "--poll-interval", "100ms", "--log-events=false", out: log, err: log)
  end

  # The Ruby handler path: processes x `bin/webhook-inbox-sidecar ruby`, then (once each has
  # registered the app's handlers, so no event is taken for unrouted) one sidecar that hands
  # the events over. log: an append-mode File. Returns their pids (the sidecar last).
  def ruby_workers(pg, log, processes:, threads:, batch:)
    from = File.size(log.path)
    pids = Array.new(processes) do
      spawn(app_env(threads: threads), File.join(APP, "bin/webhook-inbox-sidecar"), "ruby", "--concurrency", threads.to_s,
                    "--batch-size", batch.to_s, "--poll-interval", "100ms", chdir: APP, out: log, err: log)
    end
    deadline = now + 120
    until File.read(log.path)[from..].to_s.scan("ruby_worker_starting").size >= processes
      if now > deadline || pids.any? { |p| Process.waitpid(p, Process::WNOHANG) }
        abort "the Ruby worker did not start:\n#{File.read(log.path).lines.last(20).join}"
      end
      sleep 0.1
    end
    pids << sidecar(pg, log, concurrency: 1)
  end

  def stop(pids)
    pids.each { |p| Process.kill("TERM", p) }
    pids.each { |p| Process.wait(p) }
    SPAWNED.delete_if { |p| pids.include?(p) }
  end

  # The sum of VmRSS over the processes of each tree, in kB.
  def tree_rss_kb(roots)
    parents = Dir.children("/proc").grep(/\A\d+\z/).to_h do |d|
      [d.to_i, (File.read("/proc/#{d}/stat").sub(/\A.*\) /m, "").split[1].to_i rescue nil)] # rubocop:disable Style/RescueModifier
    end
    pids = roots.dup
    pids.each { |p| parents.each { |c, pp| pids << c if pp == p && !pids.include?(c) } }
    pids.sum { |p| File.read("/proc/#{p}/status")[/VmRSS:\s+(\d+)/, 1].to_i rescue 0 } # rubocop:disable Style/RescueModifier
  end

  def median(values)
    v = values.sort
    v[v.size / 2]
  end
end
