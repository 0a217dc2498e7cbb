# frozen_string_literal: true

require "json"
require "webhook_inbox/testing"

# ProviderSamples - a valid signed delivery (or several: variants of one scheme) for every
# provider of Verifier::PROVIDERS, signed by the testing kit with credentials it made. A JSON
# provider's body is built from its table entry (its id, type and time fields), so a provider
# added as data gets a sample without code here; a provider whose content is not a JSON
# object (a form, XML, a batch) has its content below.
module ProviderSamples
  Sample = Struct.new(:provider, :variant, :creds, :delivery, keyword_init: true) do
    def name = variant ? "#{provider} (#{variant})" : provider.to_s
    def verifier = creds.verifier
  end

  Signing = WebhookInbox::Testing::Signing

  PADDLE_CLASSIC_FIELDS = { "alert_name" => "subscription_created", "alert_id" => "1923482061", "passthrough" => "a b&c=é+ü/1",
                            "event_time" => "2023-11-14 22:13:20", "subscription_id" => "8", "status" => "active" }.freeze
  BRAINTREE_XML = %(<notification><timestamp type="datetime">2023-11-14T22:13:20Z</timestamp><kind>check</kind>) +
                  %(<subject><check type="boolean">true</check></subject></notification>)

  module_function

  # The events one verify returned: one Event, or several (an Array, or an Event carrying
  # #events) for a provider that yields one event per batch item.
  def events(result)
    return result if result.is_a?(Array)
    return result.events if result.respond_to?(:events) && result.events

    [result]
  end

  def adyen_item(psp, code: "AUTHORISATION")
    { "NotificationRequestItem" => { "pspReference" => psp, "merchantAccountCode" => "TestMerchant", "merchantReference" => "ordre-é/#{psp}",
                                     "amount" => { "value" => 1130, "currency" => "EUR" }, "eventCode" => code, "success" => "true",
                                     "eventDate" => "2023-11-14T22:13:20+01:00", "reason" => "unsigned",
                                     "additionalData" => { "authCode" => "1234" } } }
  end

  # [variant, content, signer options] per provider whose content is not the table's JSON object.
  def contents(provider, now)
    case provider
    when :paddle_classic then [[nil, PADDLE_CLASSIC_FIELDS, {}]]
    when :braintree then [[nil, BRAINTREE_XML, {}]]
    when :adyen
      [["one item", { "live" => "false", "notificationItems" => [adyen_item("psp1")] }, {}],
       ["two items", { "live" => "false", "notificationItems" => [adyen_item("psp1"), adyen_item("psp2")] }, {}]]
    when :sendgrid then [[nil, JSON.generate([{ "email" => "a@example.com", "event" => "processed", "sg_event_id" => "sg1" },
                                              { "email" => "b@example.com", "event" => "delivered", "sg_event_id" => "sg2" }]), {}]]
    when :twilio
      [["form", "CallSid=CA1&From=%2B15551234567&To=%2B15557654321&Body=hello+world%21&NumMedia=1", {}],
       ["json", table_body(provider, now), {}]]
    when :slack
      [["json", table_body(provider, now), {}],
       ["form", "command=%2Fweather&text=94070+x&user_id=U1", { content_type: "application/x-www-form-urlencoded" }]]
    when :didit then [["raw", table_body(provider, now), {}], ["v2", table_body(provider, now), { version: :v2 }]]
    else [[nil, table_body(provider, now), {}]]
    end
  end

  # A JSON object carrying the entry's id, type and time fields, and a nested object with an
  # escaped slash and a non-ASCII string (re-encoding targets).
  def table_body(provider, now)
    entry = WebhookInbox::Verifier::PROVIDERS.fetch(provider)
    doc = {}
    put(doc, entry[:id_fields].first, "evt_#{provider}_1") if entry[:id_fields].any?
    put(doc, entry[:type_fields].first, "#{provider}.created") if entry[:type_fields].any?
    put(doc, entry[:ts_field], entry[:ts_ms] ? now * 1000 : now) if entry[:ts_field]
    doc["data"] = { "object" => { "id" => "obj_1", "amount" => 1000, "note" => "ünïcode/slash", "paid" => true } }
    JSON.generate(doc)
  end

  def put(doc, path, value)
    *parents, leaf = path.split(".")
    parents.reduce(doc) { |h, k| h[k] ||= {} }[leaf] = value
  end

  # Every sample of provider, signed at now (seconds) with fresh credentials.
  def for(provider, now: Time.now.to_i)
    creds = Signing.keypair(provider)
    samples = contents(provider, now).map do |variant, content, options|
      Sample.new(provider: provider, variant: variant, creds: creds,
                 delivery: Signing.delivery(provider, content, secret: creds.signing_key, **creds.options,
                                                               **options, **time_option(provider, now)))
    end
    samples + asymmetric_variants(provider, now)
  end

  # Standard Webhooks' v1a (Ed25519) beside its HMAC v1.
  def asymmetric_variants(provider, now)
    entry = WebhookInbox::Verifier::PROVIDERS.fetch(provider)
    return [] unless entry[:versions].size > 1

    creds = Signing.keypair(provider, asymmetric: true)
    [Sample.new(provider: provider, variant: "asymmetric", creds: creds,
                delivery: creds.delivery(table_body(provider, now), timestamp: now))]
  end

  # The signer's options: the time (for schemes that sign one) and a type header's value.
  def time_option(provider, now)
    entry = WebhookInbox::Verifier::PROVIDERS.fetch(provider)
    options = %i[paddle_classic braintree adyen postmark].include?(provider) ? {} : { timestamp: now }
    entry[:type_slot] ? options.merge(type: "#{provider}.created") : options
  end
end
