# frozen_string_literal: true

# payments (db/examples/orders.sql): one row per accepted payment, keyed by the payment id.
class Payment < ApplicationRecord
  self.primary_key = "payment_id"
end
