# frozen_string_literal: true

require "active_record"

module WebhookInbox
  # InboxEvent - the inbox rows as a read-only ActiveRecord model, for consoles, admin pages
  # and tests. Rows change only through the receiver (insert) and the sidecar (status):
  # saving or destroying one raises ActiveRecord::ReadOnlyRecord.
  #
  #   WebhookInbox::InboxEvent.pending.of_type("payment_intent.succeeded").count
  #   WebhookInbox::InboxEvent.quarantined.in_scope("stripe:acct_1:live").order(:received_at)
  class InboxEvent < ::ActiveRecord::Base
    self.table_name = "webhook_inbox"
    self.primary_key = %i[source_scope event_id]

    STATUSES = %w[pending done quarantined].freeze

    scope :pending, -> { where(status: "pending") }
    scope :done, -> { where(status: "done") }
    scope :quarantined, -> { where(status: "quarantined") }
    scope :in_scope, ->(source_scope) { where(source_scope: source_scope) }
    scope :of_type, ->(event_type) { where(event_type: event_type) }
    scope :retrying, -> { pending.where("attempts > 0") }

    def readonly?
      true
    end

    STATUSES.each { |s| define_method(:"#{s}?") { status == s } }

    # Keys and state only: payloads can hold personal data.
    def inspect
      "#<#{self.class.name} source_scope=#{source_scope.inspect} event_id=#{event_id.inspect} " \
        "event_type=#{event_type.inspect} status=#{status.inspect} attempts=#{attempts.inspect}>"
    end
  end
end
