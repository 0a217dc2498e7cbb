# frozen_string_literal: true

# valgrind_run.rb BINARY [--sanitizer] - runs migrate, stats, requeue, prune, a `run
# --metrics-listen --retain` scraped over HTTP (200, 404, 400) after a scheduled prune, then
# stopped with SIGTERM, and a short
# `run --once` (done, quarantined, retry, unrouted (waiting), and a dispatch statement cancelled
# by statement_timeout, which takes the one-statement-per-event fallback; two worker threads),
# and `run --once` and `stats` refusing an empty database (no schema)
# against a throwaway PostgreSQL, plus outbox deliveries to a local HTTP server (2xx, 4xx,
# 5xx, a Standard Webhooks-signed destination, their gauges in /metrics, stats and requeue
# --effects, also by --destination), a traced event's spans exported (--otlp-endpoint), under
# valgrind --leak-check=full; fails on any error or on
# definitely/indirectly lost memory. With --sanitizer the binary is an ASan/UBSan build and
# runs without valgrind (the sanitizers and LeakSanitizer report instead).
require "json"
require "net/http"
require "socket"
require "webrick"
require_relative "../../spec/support/throwaway_postgres"

bin = File.expand_path(ARGV.fetch(0))
SANITIZER = ARGV.include?("--sanitizer")
ENV["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"
ENV["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
examples = File.expand_path("../../db/examples/orders.sql", __dir__)
VALGRIND = %w[valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect
              --show-leak-kinds=definite,indirect --error-exitcode=1].freeze

def vg(*cmd, env: {})
  out = IO.popen(env, [*(SANITIZER ? [] : VALGRIND), *cmd], err: %i[child out], &:read)
  ok = $?.success? && !out.match?(/definitely lost: [1-9]|indirectly lost: [1-9]|ERROR SUMMARY: [1-9]/)
  abort "#{SANITIZER ? 'sanitizer' : 'valgrind'} run failed for #{cmd[1]}:\n#{out}" unless ok
  puts "#{SANITIZER ? 'asan/ubsan' : 'valgrind'} ok: #{cmd[1]} #{cmd[2..].reject { |a| a.include?('host=') }.join(' ')}"
end

pg = ThrowawayPostgres.new
begin
  url = pg.url
  pg.psql("CREATE DATABASE empty", db: "postgres")
  empty = pg.url("empty")
  %w[run stats].each do |cmd|
    out = IO.popen([*(SANITIZER ? [] : VALGRIND), bin, cmd, *(cmd == "run" ? ["--once"] : []), "--database-url", empty],
                   err: %i[child out], &:read)
    abort "#{cmd} on an empty database: expected exit 1 and the schema error:\n#{out}" unless
      $?.exitstatus == 1 && out.include?("inbox schema missing") && !out.match?(/definitely lost|indirectly lost|Invalid (read|write|free)|uninitialised|runtime error|Sanitizer/)
    puts "#{SANITIZER ? 'asan/ubsan' : 'valgrind'} ok: #{cmd} refuses an empty database"
  end
  vg(bin, "migrate", "--database-url", url)
  pg.psql_file(examples)
  pg.psql(<<~SQL)
    INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES ('t1', 'o1', 2000, 'jpy');
    INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES
      ('s', 'e1', 'payment_intent.succeeded', '{"data":{"object":{"id":"pi_1","amount":2000,"currency":"jpy","metadata":{"tenant_id":"t1","order_id":"o1"}}}}'),
      ('s', 'e2', 'payment_intent.succeeded', '{"data":{"object":{"id":"pi_2","amount":1,"currency":"jpy","metadata":{"tenant_id":"t1","order_id":"o1"}}}}'),
      ('s', 'e3', 'payment_intent.succeeded', '{"data":{"object":{"id":"pi_3","amount":1,"currency":"jpy","metadata":{"tenant_id":"t1","order_id":"nope"}}}}'),
      ('s', 'e4', 'unknown.type', '{}'),
      ('s', 'e5', 'test.sleepy', '{"sleep": 5}');
    CREATE FUNCTION t_sleepy(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep((ev.payload ->> 'sleep')::float8); RETURN 'slept'; END $$;
    INSERT INTO webhook_inbox_routes VALUES ('test.sleepy', 't_sleepy');
  SQL
  # Twice: --once takes what is due when it looks, and a retry due 1 ms after its failure
  # (charged inside the batch) may only be due for the next run.
  2.times do
    vg(bin, "run", "--once", "--database-url", url, "--concurrency", "2", "--batch-size", "2",
       "--max-attempts", "2", "--backoff-base", "1ms", "--backoff-cap", "1ms",
       env: { "PGOPTIONS" => "-c statement_timeout=#{SANITIZER ? 500 : 1500}" })
  end
  states = pg.psql("SELECT string_agg(event_id || '=' || status, ',' ORDER BY event_id) FROM webhook_inbox").strip
  # e4 has no route: it waits (pending, not charged) under the default --unrouted=wait.
  abort "unexpected states after run --once: #{states}" unless states == "e1=done,e2=quarantined,e3=quarantined,e4=pending,e5=quarantined"
  # Effects to deliver further down; meanwhile pending, in the outbox gauges.
  pg.psql(<<~SQL)
    SELECT webhook_inbox_emit('op_ok', 'ok', '{"a":1}'), webhook_inbox_emit('op_bad', 'bad', '{"a":2}'),
           webhook_inbox_emit('op_down', 'down', '{"a":3}'), webhook_inbox_emit('op_app', 'app', '{"a":4}');
  SQL
  # The metrics listener and the stats thread: scraped (also a 404 and a malformed head), then
  # a graceful stop with a scraper still connected.
  log = File.join(pg.dir, "metrics-run.log")
  pid = Process.spawn(*(SANITIZER ? [] : VALGRIND), bin, "run", "--database-url", url, "--concurrency", "1",
                      "--metrics-listen", "127.0.0.1:0", "--retain", "3d", "--retain-interval", "1s",
                      out: File::NULL, err: log)
  deadline = Time.now + 60
  addr = nil
  addr = File.read(log)[/msg=metrics_listening address=(\S+)/, 1] until addr || Time.now > deadline || !sleep(0.1)
  abort "run --metrics-listen did not listen:\n#{File.read(log)}" unless addr
  host, port = addr.split(":")
  body = nil
  until (body = Net::HTTP.get_response(host, "/metrics", port.to_i).body).include?("webhook_inbox_events_pending") ||
        Time.now > deadline
    sleep 0.2
  end
  abort "no inbox gauges in /metrics:\n#{body}" unless body.include?("webhook_inbox_events_pending")
  abort "no outbox gauges in /metrics:\n#{body}" unless
    body.include?('webhook_inbox_effects_pending{destination="down"} 1') && body.include?("# TYPE webhook_inbox_effects_total counter\n") # no deliverer here: no series
  sleep 0.2 until File.read(log).include?("msg=retention ") || Time.now > deadline
  abort "no scheduled retention run:\n#{File.read(log)}" unless File.read(log).include?("msg=retention ")
  # The listener hands a receipt's NOTIFY to the idle worker (wake.c, listener.c).
  pg.psql("INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES ('t1', 'o_wake', 500, 'jpy'); " \
          "INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', 'e_wake', 'payment_intent.succeeded', " \
          "'{\"data\":{\"object\":{\"id\":\"pi_w\",\"amount\":500,\"currency\":\"jpy\",\"metadata\":{\"tenant_id\":\"t1\",\"order_id\":\"o_wake\"}}}}')")
  sleep 0.2 until pg.psql("SELECT status FROM webhook_inbox WHERE event_id = 'e_wake'").strip == "done" || Time.now > deadline
  abort "the NOTIFY did not reach a worker:\n#{File.read(log)}" unless pg.psql("SELECT status FROM webhook_inbox WHERE event_id = 'e_wake'").strip == "done"
  abort "/nope: expected 404" unless Net::HTTP.get_response(host, "/nope", port.to_i).code == "404"
  s = TCPSocket.new(host, port.to_i)
  s.write("BAD\r\n\r\n")
  abort "malformed head: expected 400" unless s.read.start_with?("HTTP/1.1 400 ")
  s.close
  idle = TCPSocket.new(host, port.to_i)
  idle.write("GET /met")
  Process.kill("TERM", pid)
  _, st = Process.wait2(pid)
  idle.close
  out = File.read(log)
  abort "#{SANITIZER ? 'sanitizer' : 'valgrind'} run failed for run --metrics-listen:\n#{out}" unless
    st.success? && !out.match?(/definitely lost: [1-9]|indirectly lost: [1-9]|ERROR SUMMARY: [1-9]|runtime error|Sanitizer/)
  puts "#{SANITIZER ? 'asan/ubsan' : 'valgrind'} ok: run --metrics-listen --retain, scraped, woken by a NOTIFY, pruned, stopped by SIGTERM"
  # The outbox: one delivered, one refused (422), one failing (503) until max attempts, one signed.
  http = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, Logger: WEBrick::Log.new(File::NULL), AccessLog: [])
  http.mount_proc("/") { |req, res| res.status = Integer(req.path[1..]) rescue 200; res.body = '{"id":"x_1"}' }
  traces = Queue.new # OTLP requests (run --otlp-endpoint below)
  http.mount_proc("/v1/traces") { |req, res| traces << req.body; res.status = 200; res.body = "{}" }
  server = Thread.new { http.start }
  api = "http://127.0.0.1:#{http.config[:Port]}"
  2.times do
    vg(bin, "run", "--once", "--database-url", url, "--max-attempts", "2", "--backoff-base", "1ms", "--backoff-cap", "1ms",
       "--destination", "ok=#{api}/200", "--destination", "bad=#{api}/422", "--destination", "down=#{api}/503",
       "--destination", "app=#{api}/204 sign=standard_webhooks concurrency=1",
       env: { "WEBHOOK_INBOX_DEST_APP_SECRET" => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "WEBHOOK_INBOX_DEST_OK_TOKEN" => "t" })
  end
  effects = pg.psql("SELECT string_agg(operation_id || '=' || status, ',' ORDER BY operation_id) FROM webhook_inbox_outbox").strip
  abort "unexpected effects after run --once: #{effects}" unless
    effects == "op_app=delivered,op_bad=quarantined,op_down=quarantined,op_ok=delivered"
  # Operational notifications (notify.c): a quarantine told through the outbox, then SIGTERM.
  log = File.join(pg.dir, "notify-run.log")
  pid = Process.spawn(*(SANITIZER ? [] : VALGRIND), bin, "run", "--database-url", url, "--concurrency", "1",
                      "--destination", "ops=#{api}/200", "--notify", "ops", "--notify-interval", "1s",
                      "--notify-setting", "quarantine_burst=1", out: File::NULL, err: log)
  deadline = Time.now + 90
  told = -> { pg.psql("SELECT count(*) FROM webhook_inbox_outbox WHERE operation_id LIKE 'alert-firing-%' AND status = 'delivered'").strip == "1" }
  sleep 0.2 until told.call || Time.now > deadline
  Process.kill("TERM", pid)
  _, st = Process.wait2(pid)
  out = File.read(log)
  abort "no notification delivered:\n#{out}" unless told.call
  abort "#{SANITIZER ? 'sanitizer' : 'valgrind'} run failed for run --notify:\n#{out}" unless
    st.success? && !out.match?(/definitely lost: [1-9]|indirectly lost: [1-9]|ERROR SUMMARY: [1-9]|runtime error|Sanitizer/)
  puts "#{SANITIZER ? 'asan/ubsan' : 'valgrind'} ok: run --notify, a quarantine told through the outbox, stopped by SIGTERM"
  # Traces (otlp.c, handle_spans.c, outbox.c): a traced event whose handler records an effect;
  # its handle and effect spans exported to the local server, the effect's call traced.
  pg.psql(<<~SQL)
    CREATE FUNCTION vg_traced(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
    BEGIN PERFORM webhook_inbox_emit('op_traced', 'ok', '{}'); RETURN 'traced'; END $$;
    INSERT INTO webhook_inbox_routes (event_type, handler) VALUES ('vg.traced', 'vg_traced');
    INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, trace_context)
    VALUES ('s', 'e_traced', 'vg.traced', '{}', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
  SQL
  vg(bin, "run", "--once", "--database-url", url, "--destination", "ok=#{api}/200", "--otlp-endpoint", api)
  exported = []
  exported << traces.pop until traces.empty?
  abort "no handle and effect spans exported: #{exported.inspect}" unless
    %w[webhook_inbox.handle webhook_inbox.effect].all? { |n| exported.join.include?(%("name":"#{n}")) }
  puts "#{SANITIZER ? 'asan/ubsan' : 'valgrind'} ok: run --once --otlp-endpoint, a handle and an effect span exported"
  http.shutdown
  server.join
  vg(bin, "stats", "--json", "--database-url", url)
  vg(bin, "requeue", "--effects", "--destination", "bad", "--operation-id", "op_bad", "--database-url", url)
  vg(bin, "requeue", "--effects", "--destination", "down", "--database-url", url)
  vg(bin, "requeue", "--effects", "--all", "--database-url", url)
  vg(bin, "requeue", "--all", "--database-url", url)
  pg.psql("UPDATE webhook_inbox_outbox SET processed_at = now() - interval '4 days' WHERE operation_id = 'op_ok'")
  vg(bin, "prune", "--older-than", "3d", "--database-url", url)
  abort "prune left the old delivered effect" unless
    pg.psql("SELECT count(*) FROM webhook_inbox_outbox WHERE operation_id = 'op_ok'").strip == "0"
  vg(bin, "--print-config", "--database-url", "#{url} password=x")
ensure
  pg.destroy
end
