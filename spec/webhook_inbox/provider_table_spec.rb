# frozen_string_literal: true

require "spec_helper"

# The provider table (docs/providers.md) is generated from the provider entries: it must say
# what the verifier does (regenerate with `bundle exec rake verify:readme`).
RSpec.describe WebhookInbox::ProviderTable do
  let(:readme) { File.read(File.expand_path("../../docs/providers.md", __dir__)) }

  it "is what docs/providers.md shows between the markers" do
    expect(readme).to include(described_class::BEGIN_MARK, described_class::END_MARK)
    expect(described_class.splice(readme)).to eq(readme), "docs/providers.md provider table is stale: run bundle exec rake verify:readme"
  end

  it "has one row per provider entry, and every entry is a scheme Verifier.new accepts" do
    table = WebhookInbox::Verifier.provider_table
    rows = described_class.markdown.lines.drop(2)
    expect(rows.size).to eq(table.size)
    table.each_with_index do |e, i|
      expect(rows[i]).to start_with("| #{e[:title]} | `:#{e[:name]}` |")
      expect(WebhookInbox::Verifier::SCHEMES).to include(e[:name])
    end
  end

  it "changes when an entry changes (the comparison can fail)" do
    entries = WebhookInbox::Verifier.provider_table.map(&:dup)
    entries[0] = entries[0].merge(tolerance: 17)
    expect(described_class.markdown(entries)).not_to eq(described_class.markdown)
    expect(described_class.markdown(entries)).to include("17 s on `t=`")
  end
end
