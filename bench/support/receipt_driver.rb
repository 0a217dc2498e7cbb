# frozen_string_literal: true

# bench/support/receipt_driver.rb DATABASE_URL - one build's receipt INSERTs for bench/receipt_sql,
# run with that build's lib first on the load path (`ruby -I BUILD/lib`). It stores through the
# build's native store (WebhookInbox::Inbox::Connection: the statements the build prepares and
# sends), one row with #insert, more with #insert_batch (one statement, one commit).
# Protocol, a line each way: it prints "ready PID SO" (its backend's pid, the extension it
# loaded); then per "run ROWS KEYED COUNT" it stores COUNT statements of ROWS Stripe-shaped
# payment_intent.succeeded rows (KEYED 1: with Stripe's ordering spec, when the build has
# ordering) and prints "ok"; per "reconnect" it opens a new session and prints "ready PID";
# "quit" ends it.
require "json"
require "webhook_inbox"

url = ARGV.fetch(0)
connect = lambda do
  c = WebhookInbox::Inbox::Connection.new(url, 5000, 30_000)
  c.connect
  c
end
conn = connect.call
so = $LOADED_FEATURES.find { |f| f.end_with?("webhook_inbox.so") }
$stdout.sync = true
puts "ready #{conn.backend_pid} #{so}"

ORDERING = defined?(WebhookInbox::Ordering) ? WebhookInbox::Ordering.new(:stripe).for("payment_intent.succeeded") : nil
HEADERS = JSON.generate("content-type" => "application/json",
                        "user-agent" => "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
WITH_ORDERING = conn.method(:insert).arity != 8 # the second wave's store takes 8 fields a row
scope = "stripe:acct_bench:live"
seq = 0

row = lambda do |keyed|
  seq += 1
  id = "#{Process.pid}_#{seq}"
  body = JSON.generate(id: "evt_#{id}", type: "payment_intent.succeeded", created: 1_764_000_000 + seq,
                       data: { object: { id: "pi_#{id}", amount: 1000 + seq % 100, currency: "usd",
                                         metadata: { tenant_id: "t#{seq % 10}", order_id: id } } })
  fields = [scope, "evt_#{id}", "payment_intent.succeeded", body, false, false, nil, HEADERS]
  WITH_ORDERING ? fields + [keyed ? ORDERING : nil] : fields
end

while (line = $stdin.gets)
  cmd, rows, keyed, count = line.split
  break if cmd == "quit"

  if cmd == "reconnect"
    conn.close
    conn = connect.call
    puts "ready #{conn.backend_pid}"
    next
  end

  rows = Integer(rows)
  keyed = keyed == "1"
  Integer(count).times do
    if rows == 1
      conn.insert(*row.(keyed))
    else
      results = conn.insert_batch(Array.new(rows) { row.(keyed) })
      bad = results.find { |r| !r.is_a?(Integer) }
      raise "a row was refused: #{bad.message}" if bad
    end
  end
  puts "ok"
end
conn.close
