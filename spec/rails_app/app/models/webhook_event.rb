# frozen_string_literal: true

# The hand-written baseline's table (db/app_schema.sql): unique event_id.
class WebhookEvent < ApplicationRecord
end
