# frozen_string_literal: true

# VerifierHelpers - shared by the verifier specs: the reason a verification fails, or nil.
module VerifierHelpers
  def reason_of
    yield
    nil
  rescue WebhookInbox::VerificationError => e
    e.reason
  end
end
