# frozen_string_literal: true

# valgrind_run.rb BINARY - runs migrate, stats, requeue and a short `run --once` (done,
# quarantined, retry and unrouted events, two worker threads) under
# valgrind --leak-check=full against a throwaway PostgreSQL; fails on any error or on
# definitely/indirectly lost memory.
require "json"
require_relative "../../spec/support/throwaway_postgres"

bin = File.expand_path(ARGV.fetch(0))
examples = File.expand_path("../../db/examples/orders.sql", __dir__)
VALGRIND = %w[valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect
              --show-leak-kinds=definite,indirect --error-exitcode=1].freeze

def vg(*cmd)
  out = IO.popen([*VALGRIND, *cmd], err: %i[child out], &:read)
  ok = $?.success? && !out.match?(/definitely lost: [1-9]|indirectly lost: [1-9]|ERROR SUMMARY: [1-9]/)
  abort "valgrind failed for #{cmd[1]}:\n#{out}" unless ok
  puts "valgrind ok: #{cmd[1]} #{cmd[2..].reject { |a| a.include?('host=') }.join(' ')}"
end

pg = ThrowawayPostgres.new
begin
  url = pg.url
  vg(bin, "migrate", "--database-url", url)
  pg.psql_file(examples)
  pg.psql(<<~SQL)
    INSERT INTO orders (tenant_id, order_id, amount, currency) VALUES ('t1', 'o1', 2000, 'jpy');
    INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES
      ('s', 'e1', 'payment_intent.succeeded', '{"data":{"object":{"id":"pi_1","amount":2000,"currency":"jpy","metadata":{"tenant_id":"t1","order_id":"o1"}}}}'),
      ('s', 'e2', 'payment_intent.succeeded', '{"data":{"object":{"id":"pi_2","amount":1,"currency":"jpy","metadata":{"tenant_id":"t1","order_id":"o1"}}}}'),
      ('s', 'e3', 'payment_intent.succeeded', '{"data":{"object":{"id":"pi_3","amount":1,"currency":"jpy","metadata":{"tenant_id":"t1","order_id":"nope"}}}}'),
      ('s', 'e4', 'unknown.type', '{}');
  SQL
  vg(bin, "run", "--once", "--database-url", url, "--concurrency", "2", "--batch-size", "2",
     "--max-attempts", "2", "--backoff-base", "1ms", "--backoff-cap", "1ms")
  states = pg.psql("SELECT string_agg(event_id || '=' || status, ',' ORDER BY event_id) FROM webhook_inbox").strip
  abort "unexpected states after run --once: #{states}" unless states == "e1=done,e2=quarantined,e3=quarantined,e4=done"
  vg(bin, "stats", "--json", "--database-url", url)
  vg(bin, "requeue", "--all", "--database-url", url)
  vg(bin, "--print-config", "--database-url", "#{url} password=x")
ensure
  pg.destroy
end
