# frozen_string_literal: true

module WebhookInbox
  # Base class of every error the gem raises.
  class Error < StandardError; end

  # A configuration mistake found when building a Verifier, Inbox or Endpoint.
  class ConfigurationError < Error; end

  # A delivery failed verification. #reason is a Symbol (:missing_signature,
  # :malformed_signature, :signature_mismatch, :timestamp_out_of_tolerance,
  # :payload_too_large, :no_secret, :malformed_payload, ...). Messages never hold
  # secrets or payload bytes.
  class VerificationError < Error
    attr_reader :reason

    def initialize(reason, message = nil)
      @reason = reason
      super(message || reason.to_s.tr("_", " "))
    end
  end

  # The inbox could not confirm it stored an event (database down, read-only, timeout, lost
  # connection). Usually nothing was committed; after a timeout the row may still commit (a
  # commit waiting for a synchronous standby is already in the WAL). Either way the sender
  # should retry (the endpoint answers 503): the retry is answered accepted or duplicate.
  class StoreError < Error; end
end
