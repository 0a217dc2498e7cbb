# frozen_string_literal: true

require "spec_helper"
require "set"
require_relative "../support/provider_samples"
require_relative "../support/replay_mutations"
require_relative "../support/receiver_helpers"

# One signed delivery, one event, for every provider of the table: from a delivery the
# testing kit signed, every change a sender of a replay can make (ReplayMutations) is either
# refused or verifies as the same events - the same set of (event id, type), or for a part
# of a batch some of them - and the inbox
# stores it once (the second insert answers duplicate). Every change to what the signature
# covers is refused. A provider added to the table is covered by being added; one the kit
# cannot sign fails here.
RSpec.describe "Replay equivalence" do
  include ReceiverHelpers

  let(:now) { Time.now.to_i }

  def url_signed?(provider) = WebhookInbox::Verifier::PROVIDERS.fetch(provider)[:template].match?(/\{(url|method)\}/)

  # Where the type is read from content no signature covers - a header (GitHub, Shopify) or a
  # body field outside what is signed (Mailgun's event-data) - it is a routing hint
  # (docs/providers.md, "Identity"): a replay may change it, never the event id, and the inbox
  # keeps the first delivery's row. Such a type is left out of the comparison.
  def type_hint?(provider)
    entry = WebhookInbox::Verifier::PROVIDERS.fetch(provider)
    return true if entry[:type_slot]

    signed = ReplayMutations::SIGNED_BODY_PATHS[provider]
    !signed.nil? && entry[:type_fields].compact.any? { |f| signed.none? { |p| f == p || f.start_with?("#{p}.") } }
  end

  # The set of [event id, type] the delivery verifies as (the type nil where it is a hint), or :refused.
  def outcome(sample, d)
    env = url_signed?(sample.provider) ? d.rack_env : d.headers
    hint = type_hint?(sample.provider)
    ProviderSamples.events(sample.verifier.verify(d.body, env, now: now)).map { |e| [e.event_id, (e.event_type unless hint)] }.to_set
  rescue WebhookInbox::VerificationError
    :refused
  end

  # Refused, or events the original yields: all of them, or (a batch split or cut) some.
  def same_events?(original, got) = got == :refused || (!got.empty? && got.subset?(original))

  def shown(result) = result == :refused ? "refused" : result.to_a.sort.inspect

  # Mutations of every sample, each with the sample's original events and its own outcome.
  def tried(samples, signed:)
    samples.flat_map do |s|
      original = outcome(s, s.delivery)
      raise "#{s.name}: the kit's own delivery was refused" if original == :refused

      ReplayMutations.for(s.delivery).select { |m| m.signed == signed }.map { |m| [s, m, original, outcome(s, m.delivery)] }
    end
  end

  WebhookInbox::Verifier::PROVIDERS.each_key do |provider|
    describe provider.to_s do
      let(:samples) { ProviderSamples.for(provider, now: now) }

      it "verifies every change the scheme leaves verifiable as the same events, or refuses it" do
        runs = tried(samples, signed: false)
        failures = runs.reject { |_, _, original, got| same_events?(original, got) }
                       .map { |s, m, original, got| "#{s.name}: #{m.name}: #{shown(got)}, the original #{shown(original)}" }
        expect(failures).to be_empty, "#{failures.size} replays of #{provider} verified as other events:\n  #{failures.join("\n  ")}"
        # not vacuous: some replays verify (at least the header-name spellings)
        expect(runs.count { |*, got| got != :refused }).to be > 0
      end

      it "refuses every change to what the signature covers" do
        runs = tried(samples, signed: true)
        expect(runs).not_to be_empty # every scheme signs something: at least its signature header or field
        accepted = runs.reject { |*, got| got == :refused }.map { |s, m, _, got| "#{s.name}: #{m.name}: verified as #{shown(got)}" }
        expect(accepted).to be_empty, "#{accepted.size} changes to signed content of #{provider} verified:\n  #{accepted.join("\n  ")}"
      end
    end
  end

  # The same replays through the Receiver into a real inbox: each verifiable one answers 200
  # and leaves the scope holding only the original's events.
  describe "through the Receiver into PostgreSQL" do
    before(:all) { ReceiverHelpers.apply_schema(TestDatabase.cluster) }

    let(:pg) { TestDatabase.cluster }
    let(:inbox) { WebhookInbox::Inbox.new(database_url: pg.url, pool_size: 1) }

    after { inbox.close }

    def stored_ids(scope)
      pg.psql("SELECT event_id FROM webhook_inbox WHERE source_scope = '#{scope}' ORDER BY event_id").split("\n")
    end

    WebhookInbox::Verifier::PROVIDERS.each_key do |provider|
      it "#{provider}: a second insert of any verifiable replay answers duplicate; the scope keeps the original's events" do
        failures = []
        ProviderSamples.for(provider, now: now).each do |s|
          scope = unique_scope("replay-#{provider}")
          receiver = WebhookInbox::Receiver.new(provider: provider, secrets: s.creds.secrets, source_scope: scope, inbox: inbox,
                                                **s.creds.options)
          first = receiver.receive(s.delivery.body, s.delivery.rack_env)
          expect(first.http_status).to eq(200), "#{s.name}: the kit's delivery answered #{first.http_status} #{first.reason}"
          original = stored_ids(scope)
          expect(original).not_to be_empty
          replays = ReplayMutations.for(s.delivery).reject(&:signed).select { |m| outcome(s, m.delivery) != :refused }
          replays.each do |m|
            r = receiver.receive(m.delivery.body, m.delivery.rack_env)
            # a new row is :accepted (whatever a receipt of several events answers, the rows below tell)
            failures << "#{s.name}: #{m.name}: answered #{r.http_status} #{r.status}" if r.http_status != 200 || r.status == :accepted
          end
          extra = stored_ids(scope) - original
          failures << "#{s.name}: stored #{extra.size} more events: #{extra.first(5).inspect}" if extra.any?
        end
        expect(failures).to be_empty, failures.join("\n")
      end
    end
  end
end
