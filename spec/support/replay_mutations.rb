# frozen_string_literal: true

require "json"
require "uri"

# ReplayMutations - every change to a signed delivery that a sender of a replay can make: to
# the URL it is sent to (port, escapes, query: for providers that sign it), to the headers (names' case, values' spacing and hex case, headers added, removed or changed,
# signature lists grown), to a JSON body (re-spaced, keys reordered, re-escaped, fields added,
# removed or changed, batch items duplicated, split, dropped or reordered) and to a form body
# (pairs reordered, '+' and %20, %31 for 1, escapes' case, empty items, pairs added, removed
# or changed, newlines added to or taken from values). Each Mutation says whether it changes
# content the provider's signature covers (signed: true: it must be refused); the others
# must be refused or yield events of the original (the same set; a part of a batch may
# yield some of its items' events).
#
# What a signature covers comes from the provider's entry (its signature, time and id
# headers, its template) and, for the schemes that sign only part of the body, from
# SIGNED_BODY_PATHS below: a provider absent from it signs its whole body.
module ReplayMutations
  Mutation = Struct.new(:name, :delivery, :signed, keyword_init: true)

  # Body paths ("*" for any array index) that the provider signs, where it does not sign the
  # whole body byte for byte; [] where it signs none of it (Postmark: credentials only).
  ADYEN_SIGNED = %w[pspReference originalReference merchantAccountCode merchantReference amount.value amount.currency
                    eventCode success additionalData.hmacSignature].map { |f| "notificationItems.*.NotificationRequestItem.#{f}" }
  SIGNED_BODY_PATHS = {
    mailgun: %w[signature.token signature.timestamp signature.signature],
    adyen: ADYEN_SIGNED,
    braintree: %w[bt_payload bt_signature],
    postmark: []
  }.freeze
  # Headers a custom scheme signs (or that select its key), besides the entry's signature header.
  SIGNED_HEADERS = {
    paypal: %w[paypal-transmission-id paypal-transmission-time paypal-transmission-sig paypal-cert-url],
    vonage: %w[authorization], plaid: %w[plaid-verification], postmark: %w[authorization]
  }.freeze
  FORM = "application/x-www-form-urlencoded"

  module_function

  def for(delivery)
    entry = WebhookInbox::Verifier::PROVIDERS.fetch(delivery.provider)
    header_mutations(delivery, entry) + body_mutations(delivery) + url_mutations(delivery, entry)
  end

  # ---- the URL a URL-signed provider called (Twilio, Square, HubSpot)

  def url_mutations(d, entry)
    return [] unless entry[:template].include?("{url}")

    at = ->(name, url) { Mutation.new(name: name, signed: false, delivery: d.dup.tap { |x| x.url = url }) }
    uri = URI(d.url)
    out = [at.call("URL with its default port", d.url.sub(uri.host, "#{uri.host}:#{uri.default_port}")),
           at.call("URL path letters escaped", d.url.sub(uri.path, escape(uri.path, /[a-z]/))),
           at.call("URL with a query parameter added", "#{d.url}#{uri.query ? "&" : "?"}replay=1")]
    out << at.call("URL query escapes lower-case", d.url.sub(uri.query, uri.query.gsub(/%\h\h/, &:downcase))) if uri.query&.include?("%")
    out
  end

  def with(d, name, signed, body: d.body, headers: d.headers)
    Mutation.new(name: name, signed: signed, delivery: d.dup.tap { |x| x.body = body; x.headers = headers })
  end

  # ---- headers

  def signed_headers(d, entry)
    names = entry[:headers].compact
    sigs = names[entry[:sig_slot], entry[:sig_count]] || []
    tmpl = entry[:template].to_s
    signed = sigs
    signed += [names[entry[:ts_slot]]] if entry[:ts_slot] && tmpl.include?("{timestamp}")
    signed += entry[:id_slots].compact.map { |i| names[i] } if tmpl.include?("{id}")
    signed += entry[:headers][entry[:alt_offset], entry[:alt_offset]].to_a.compact if entry[:alt_offset].positive? && tmpl.include?("{id}")
    signed + SIGNED_HEADERS.fetch(d.provider, []) + (d.provider == :didit ? %w[x-signature x-signature-v2] : [])
  end

  def header_mutations(d, entry)
    h = d.headers.reject { |k, _| k.casecmp?("content-type") }
    signed = signed_headers(d, entry).map(&:downcase)
    out = [with(d, "header names lower-case", false, headers: d.headers.transform_keys(&:downcase)),
           with(d, "header names upper-case", false, headers: d.headers.transform_keys(&:upcase))]
    h.each do |k, v|
      is_signed = signed.include?(k.downcase)
      out << with(d, "without #{k}", false, headers: d.headers.except(k))
      out << with(d, "#{k} changed", is_signed, headers: d.headers.merge(k => changed_value(v, is_signed)))
      out << with(d, "#{k} spaced", false, headers: d.headers.merge(k => " #{v} "))
      out << with(d, "#{k} hex upper-case", false, headers: d.headers.merge(k => v.gsub(/\h{32,}/, &:upcase))) if v.match?(/\h{32,}/)
      out << with(d, "#{k} listed twice", false, headers: d.headers.merge(k => "#{v} #{v}")) if entry[:layout] == :list && is_signed
      if entry[:layout] == :kv && is_signed
        out << with(d, "#{k} with an unknown scheme", false, headers: d.headers.merge(k => "#{v}#{entry[:kv_sep]}v0=#{"ab" * 32}"))
      end
    end
    extra = { "X-Request-Id" => "req_replay_1", "X-Timestamp" => "1", "X-Delivery-Attempt" => "2" }
    (entry[:headers].compact - h.keys.map(&:downcase)).each { |name| extra[name] = "replay-#{name}" }
    extra.each { |k, v| out << with(d, "with #{k} added", false, headers: d.headers.merge(k => v)) }
    out
  end

  # A signed value with one character of its last run changed (not to its other case: hex
  # takes either); an unsigned one replaced.
  def changed_value(v, signed)
    return "replay-#{v}1" unless signed

    bad = v.dup
    i = bad.rindex(/[0-9A-Za-z]/)
    bad[i] = bad[i].casecmp?("a") ? "b" : "a"
    bad
  end

  # ---- bodies

  def body_mutations(d)
    signed_paths = SIGNED_BODY_PATHS.fetch(d.provider, :all)
    return [] if signed_paths == [] # nothing in the body is signed: any body is another event

    out = [with(d, "body with a trailing newline", false, body: "#{d.body}\n")]
    out << with(d, "body's hex upper-case", false, body: d.body.gsub(/\h{32,}/, &:upcase)) if d.body.match?(/\h{32,}/)
    if form?(d) then out + form_mutations(d, signed_paths)
    elsif (doc = parse_json(d.body)) then out + json_mutations(d, doc, signed_paths)
    else out
    end
  end

  def form?(d) = d.headers.any? { |k, v| k.casecmp?("content-type") && v.start_with?(FORM) }

  def parse_json(body)
    JSON.parse(body)
  rescue JSON::ParserError
    nil
  end

  def signed?(signed_paths, path)
    return true if signed_paths == :all

    pattern = path.map { |p| p.is_a?(Integer) ? "*" : p }.join(".")
    signed_paths.any? { |s| s == pattern || s.start_with?("#{pattern}.") }
  end

  def json_mutations(d, doc, signed_paths)
    all = signed_paths == :all
    out = [with(d, "JSON re-spaced", false, body: JSON.pretty_generate(doc)),
           with(d, "JSON keys reordered", false, body: JSON.generate(reorder(doc))),
           with(d, "JSON re-escaped (\\/ and \\u)", false, body: JSON.generate(doc, ascii_only: true, script_safe: true))]
    each_node(doc) do |path, node|
      case node
      when Hash
        out << with(d, "field added at #{label(path)}", all, body: JSON.generate(edit(doc, path) { |n| n.merge("replay_extra" => "x") }))
      when Array
        batch_mutations(d, doc, path, node, all, out) if node.all?(Hash) && node.any?
      end
      next if path.empty?

      # an item of a batch removed is a split batch: signed where the whole body is
      removed_signed = path.last.is_a?(Integer) ? all : signed?(signed_paths, path)
      out << with(d, "#{label(path)} removed", removed_signed, body: JSON.generate(remove(doc, path)))
      out << with(d, "#{label(path)} changed", signed?(signed_paths, path), body: JSON.generate(edit(doc, path) { |n| bump(n) })) unless node.is_a?(Hash) || node.is_a?(Array)
    end
    out
  end

  def batch_mutations(d, doc, path, items, all, out)
    at = label(path)
    out << with(d, "#{at} first item duplicated", all, body: JSON.generate(edit(doc, path) { |a| [a.first] + a }))
    out << with(d, "#{at} reordered", all, body: JSON.generate(edit(doc, path, &:reverse))) if items.size > 1
    out << with(d, "#{at} first item dropped", all, body: JSON.generate(edit(doc, path) { |a| a.drop(1) })) if items.size > 1
    items.each_index do |i|
      out << with(d, "#{at} item #{i} alone", all, body: JSON.generate(edit(doc, path) { |a| [a[i]] })) if items.size > 1
    end
  end

  def label(path) = path.empty? ? "top level" : path.join(".")

  def each_node(node, path = [], &block)
    yield path, node
    case node
    when Hash then node.each { |k, v| each_node(v, path + [k], &block) }
    when Array then node.each_with_index { |v, i| each_node(v, path + [i], &block) }
    end
  end

  def reorder(node)
    case node
    when Hash then node.to_a.reverse.to_h { |k, v| [k, reorder(v)] }
    when Array then node.map { |v| reorder(v) }
    else node
    end
  end

  # A deep copy of doc with the node at path replaced by the block's value.
  def edit(doc, path, &block)
    return yield(doc) if path.empty?

    copy = doc.dup
    copy[path.first] = edit(doc[path.first], path.drop(1), &block)
    copy
  end

  def remove(doc, path)
    edit(doc, path[0..-2]) { |parent| parent.is_a?(Array) ? parent.reject.with_index { |_, i| i == path.last } : parent.except(path.last) }
  end

  def bump(value)
    case value
    when String then "#{value}x"
    when Integer, Float then value + 1
    when true, false then !value
    else "replay"
    end
  end

  # ---- forms (pairs kept encoded, as sent)

  # s with the characters matching chars percent-escaped ("1" as "%31"), escapes left as they are.
  def escape(s, chars) = s.gsub(/%\h\h|./m) { |c| c.length == 1 && c.match?(chars) ? format("%%%02X", c.ord) : c }

  def form_mutations(d, signed_paths)
    pairs = d.body.split("&").map { |p| p.split("=", 2) }
    all = signed_paths == :all
    join = ->(ps) { ps.map { |k, v| v.nil? ? k : "#{k}=#{v}" }.join("&") }
    out = [with(d, "form pairs reordered", false, body: join.call(pairs.reverse)),
           with(d, "form '+' as %20", false, body: d.body.gsub("+", "%20")),
           with(d, "form %20 as '+'", false, body: d.body.gsub("%20", "+")),
           with(d, "form digits as %3X escapes", false, body: join.call(pairs.map { |k, v| [k, v && escape(v, /\d/)] })),
           with(d, "form names' letters escaped", false, body: join.call(pairs.map { |k, v| [escape(k, /[a-z_]/), v] })),
           with(d, "form values' letters escaped", false, body: join.call(pairs.map { |k, v| [k, v && escape(v, /[a-z]/)] })),
           with(d, "form escapes lower-case", false, body: d.body.gsub(/%\h\h/, &:downcase)),
           with(d, "form escapes upper-case", false, body: d.body.gsub(/%\h\h/, &:upcase)),
           with(d, "form with empty items", false, body: "&#{join.call(pairs).gsub("&", "&&")}&"),
           with(d, "form pair added", all, body: "#{d.body}&replay_extra=1")]
    pairs.each_with_index do |(k, v), i|
      name = URI.decode_www_form_component(k)
      is_signed = signed?(signed_paths, [name])
      others = pairs.reject.with_index { |_, j| j == i }
      out << with(d, "form #{name} removed", is_signed, body: join.call(others))
      out << with(d, "form #{name} changed", is_signed, body: join.call(pairs.map.with_index { |p, j| j == i ? [k, "#{v}x"] : p }))
      out << with(d, "form #{name} with a newline added", false, body: join.call(pairs.map.with_index { |p, j| j == i ? [k, "#{v}%0A"] : p }))
      if v.to_s.end_with?("%0A", "%0a")
        out << with(d, "form #{name} without its trailing newline", false,
                    body: join.call(pairs.map.with_index { |p, j| j == i ? [k, v[0..-4]] : p }))
      end
    end
    out
  end
end
