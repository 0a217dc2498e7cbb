# frozen_string_literal: true

require "spec_helper"
require "json"
require_relative "../../app/models/webhook_inbox/redactor"
require_relative "../../app/models/webhook_inbox/payload_view"

# Issue 16 item 6: the event page's payload, whatever depth jsonb accepted; PayloadView.cut
# against a recursive reference over random documents (strings that hold brackets, quotes
# and escapes, objects and arrays mixed).
RSpec.describe WebhookInbox::PayloadView do
  max = described_class::MAX_DEPTH
  elided = described_class::ELIDED

  # The reference: what cut should give, by recursion (fine for the depths used here).
  def truncate(value, depth, max, elided)
    return value unless value.is_a?(Hash) || value.is_a?(Array)
    return elided if depth > max

    value.is_a?(Hash) ? value.transform_values { |v| truncate(v, depth + 1, max, elided) } : value.map { |v| truncate(v, depth + 1, max, elided) }
  end

  def document(rng, depth)
    leaf = ["a[b]{c}", %(q"u\\ote), "\\\\", 12.5, -3, true, nil, "]]}}"].sample(random: rng)
    return leaf if depth.zero?

    children = [document(rng, depth - 1)] # one deep branch, leaves and shallow ones beside it
    children.insert(rng.rand(0..1), document(rng, rng.rand(0..2))) if rng.rand < 0.5
    rng.rand < 0.5 ? children : children.each_with_index.to_h { |c, i| ["k#{i}]\"{", c] }
  end

  it "cuts every container deeper than MAX_DEPTH, and nothing else" do
    rng = Random.new(16)
    200.times do
      doc = document(rng, rng.rand(max - 5..max + 20))
      text = JSON.generate(doc, max_nesting: false)
      expect(JSON.parse(described_class.cut(text), max_nesting: max)).to eq(truncate(doc, 1, max, elided))
    end
  end

  it "renders 100,000 levels (more than jsonb takes) without recursing, and redacts what it shows" do
    view = described_class.new(WebhookInbox::Redactor.new(["password"]))
    out = view.render(%({"password": "hunter2", "d": #{'[' * 100_000}#{']' * 100_000}}))
    expect([view.cut?, out.include?("hunter2"), out.count("[")]).to eq([true, false, max + 1]) # + [REDACTED]
  end
end
