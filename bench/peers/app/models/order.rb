# frozen_string_literal: true

# orders (db/examples/orders.sql; primary key tenant_id, order_id). Order.pay! is the orders
# example's payment_intent.succeeded transition as a Rails developer writes it, used by the
# job (GoodJob, Solid Queue) and by the Ruby handler alike, so the bench compares what runs
# the code, not the code: lock the order, check tenant, amount, currency and status, update
# it, record the payment; the audit row comes from the table's trigger, as for the SQL handler.
class Order < ApplicationRecord
  class Refused < StandardError; end # a payment that can never apply (a human looks at it)
  class NotYet < StandardError; end   # the order does not exist yet: retried

  # event: the Stripe event as a Hash (string keys). Returns :paid or :duplicate.
  def self.pay!(event)
    obj = event.dig("data", "object") || {}
    tenant, ord = obj.dig("metadata", "tenant_id"), obj.dig("metadata", "order_id")
    pay, amount, currency = obj["id"], obj["amount"], obj["currency"]&.downcase
    raise Refused, "malformed payment_intent" unless tenant && ord && pay && amount.is_a?(Integer) && currency

    transaction do
      order = lock.find_by(tenant_id: tenant, order_id: ord) or raise NotYet, "order not found yet"
      return :duplicate if order.payment_id == pay && %w[paid refunded].include?(order.status)
      raise Refused, "amount/currency mismatch" unless order.amount == amount && order.currency == currency
      raise Refused, "order is #{order.status}" unless order.status == "awaiting_payment"
      raise Refused, "payment #{pay} already paid another order" if exists?(payment_id: pay)

      order.update!(status: "paid", payment_id: pay, paid_at: Time.current)
      Payment.create!(payment_id: pay, tenant_id: tenant, order_id: ord, amount: amount, currency: currency,
                      event_id: event.fetch("id"))
      :paid
    end
  end
end
