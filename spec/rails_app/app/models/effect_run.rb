# frozen_string_literal: true

# A committed run of the receive_effect block (spec/integration/rails_effects_spec.rb).
class EffectRun < ApplicationRecord
end
