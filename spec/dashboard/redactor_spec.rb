# frozen_string_literal: true

require "spec_helper"
require "webhook_inbox"
require_relative "../../app/models/webhook_inbox/redactor"

# Issue 18 item 4: an effect's answer is shown as its first 1000 characters, often JSON cut
# halfway or not JSON at all; redact_text masks what redact would, by the same keys.
RSpec.describe WebhookInbox::Redactor do
  subject(:redactor) { described_class.new }

  {
    %({"id": "re_1", "client_secret": "pi_1_secret_x", "note": "ok"}) => %({"id": "re_1", "client_secret": "[REDACTED]", "note": "ok"}),
    %({"id": "re_2", "access_token": "tok_cut_halfw) => %({"id": "re_2", "access_token": "[REDACTED]"),
    %({"escaped": "a \\" b", "password":"p\\"w"}) => %({"escaped": "a \\" b", "password":"[REDACTED]"}),
    "token=tok_1&ok=1&api_key=sk_live_2" => "token=[REDACTED]&ok=1&api_key=[REDACTED]",
    "Authorization: Bearer abc.def-ghi" => "Authorization: [REDACTED] [REDACTED]",
    "upstream: basic dXNlcjpwYXNz rejected" => "upstream: basic [REDACTED] rejected",
    "CVC: 123, amount: 100" => "CVC: [REDACTED], amount: 100",
    "plain text, nothing hidden: 42" => "plain text, nothing hidden: 42",
    "" => ""
  }.each do |text, shown|
    it "shows #{text.inspect} as #{shown.inspect}" do
      expect(redactor.redact_text(text)).to eq(shown)
    end
  end

  it "uses the configured keys, as redact does" do
    custom = described_class.new([/iban/i, "tax_id"])
    expect(custom.redact_text("tax_id=DE123 IBAN: DE89 token=t")).to eq("tax_id=[REDACTED] IBAN: [REDACTED] token=t")
  end
end
