# frozen_string_literal: true

require "pg"
require_relative "sidecar_helper"

# The example batch handler's plan follows its table as it grows. A sidecar's session lives
# for days; a plan made when `orders` was small (a new deployment) and kept for the session
# hash-joins a sequential scan of every order into each batch: bench/pipeline lost half its
# sustained rate to it (450 instead of 22 us per event). Read as the rows the statement read
# in its transaction (pg_stat_xact_user_tables), not as time.
RSpec.describe "orders_on_payment_succeeded_batch's plan as orders grows", :sidecar do
  include SidecarHelper

  before(:all) do
    @pg = ThrowawayPostgres.new
    @db = SidecarHelper::DB.new(@pg)
  end
  after(:all) { @pg&.destroy }

  let(:db) { @db }

  # Stores payments of order ids (tenant t1, 1000 usd each) and pays them through the batch
  # handler in conn's session; returns the orders rows read by sequential scans meanwhile.
  def pay_in_batch(conn, orders)
    orders.each do |o|
      db.insert_event("evt_#{o}", "payment_intent.succeeded", SidecarHelper::Payloads.succeeded("pi_#{o}", "t1", o, 1000, "usd"))
    end
    conn.transaction do
      ids = orders.map { |o| conn.escape_literal("evt_#{o}") }.join(", ")
      paid = conn.exec("SELECT orders_on_payment_succeeded_batch(array_agg(w ORDER BY w.event_id)) AS r " \
                       "FROM webhook_inbox w WHERE w.event_id IN (#{ids})").getvalue(0, 0)
      expect(PG::TextDecoder::Array.new.decode(paid)).to eq(["paid"] * orders.size)
      conn.exec("SELECT seq_tup_read FROM pg_stat_xact_user_tables WHERE relname = 'orders'").getvalue(0, 0).to_i
    end
  end

  it "reads the orders it pays by key, not the whole table, after the table grew in the same session" do
    db.reset!
    conn = PG.connect(db.url)
    begin
      db.psql("INSERT INTO orders (tenant_id, order_id, amount, currency) " \
              "SELECT 't1', 'small_' || i, 1000, 'usd' FROM generate_series(1, 10) i")
      # Several calls while the table is small: whatever plan the session would keep is made now.
      (1..6).each { |i| pay_in_batch(conn, ["small_#{i}"]) }

      db.psql("INSERT INTO orders (tenant_id, order_id, amount, currency) " \
              "SELECT 't1', 'big_' || i, 1000, 'usd' FROM generate_series(1, 20000) i")
      read = pay_in_batch(conn, %w[big_7 big_9000 big_19999])
      expect(read).to be < 1_000, "the batch read #{read} orders rows by sequential scan for 3 payments"
      expect(db.int("SELECT count(*) FROM orders WHERE status = 'paid'")).to eq(9)
    ensure
      conn.close
    end
  end
end
