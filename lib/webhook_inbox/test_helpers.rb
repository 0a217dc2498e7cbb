# frozen_string_literal: true

# Kept for `require "webhook_inbox/test_helpers"`: the signers now live in Testing::Signing.
require_relative "testing/signing"
