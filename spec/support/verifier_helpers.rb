# frozen_string_literal: true

# VerifierHelpers - shared by the verifier specs: the reason a verification fails, or nil, and a
# recording store for the Receiver.
module VerifierHelpers
  def reason_of
    yield
    nil
  rescue WebhookInbox::VerificationError => e
    e.reason
  end

  # A store for Receiver specs that records each insert (keywords) and accepts it.
  def recording_store
    Class.new do
      attr_reader :inserts

      def initialize = @inserts = []

      def insert(**kw)
        @inserts << kw
        Struct.new(:status, :quarantined).new(:accepted, false)
      end
    end.new
  end
end
