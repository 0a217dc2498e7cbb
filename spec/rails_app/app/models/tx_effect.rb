# frozen_string_literal: true

# A business write made in the same transaction as the inbox row (stripe_tx).
class TxEffect < ApplicationRecord
end
