#!/usr/bin/env ruby
# frozen_string_literal: true

# receipt_sender.rb - reference sender for db/examples/receipts.sql: leases one pending
# receipt, calls the external API with the operation id as Idempotency-Key, saves the answer.
# No row lock is held during the call (a lease instead), and the save checks the lease owner.
#   ruby receipt_sender.rb DATABASE_URL API_URL [--lease SECONDS] [--operation ID] [--die-after-call]
# --operation: only that operation (default: the oldest pending one).
# --die-after-call: kill -9 itself right after the API answered (the failure-matrix row).
require "pg"
require "net/http"
require "json"
require "securerandom"

db_url, api_url = ARGV.shift(2)
lease = ARGV.include?("--lease") ? Float(ARGV[ARGV.index("--lease") + 1]) : 30.0
operation = ARGV.include?("--operation") ? ARGV[ARGV.index("--operation") + 1] : nil
die_after_call = ARGV.include?("--die-after-call")
abort "usage: receipt_sender.rb DATABASE_URL API_URL [--lease S] [--die-after-call]" unless db_url && api_url

db = PG.connect(db_url)
owner = SecureRandom.hex(8)
leased = db.exec_params(<<~SQL, [lease, owner, operation]).first
  UPDATE receipt_deliveries d
     SET attempts = attempts + 1, leased_until = now() + $1 * interval '1 second', leased_by = $2
   WHERE d.operation_id = (SELECT operation_id FROM receipt_deliveries
                            WHERE status = 'pending' AND (leased_until IS NULL OR leased_until < now())
                              AND ($3::text IS NULL OR operation_id = $3)
                            ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING operation_id, payment_id
SQL
exit 3 unless leased # nothing to send

uri = URI("#{api_url}/receipts")
res = Net::HTTP.post(uri, JSON.generate(payment_id: leased["payment_id"]),
                     "Content-Type" => "application/json", "Idempotency-Key" => leased["operation_id"])
raise "API answered #{res.code}" unless res.code.to_i == 200

Process.kill("KILL", Process.pid) if die_after_call

saved = db.exec_params(<<~SQL, [JSON.parse(res.body).fetch("id"), leased["operation_id"], owner]).cmd_tuples
  UPDATE receipt_deliveries SET status = 'sent', external_id = $1, sent_at = now(), leased_until = NULL
   WHERE operation_id = $2 AND status = 'pending' AND leased_by = $3
SQL
exit(saved == 1 ? 0 : 4)
