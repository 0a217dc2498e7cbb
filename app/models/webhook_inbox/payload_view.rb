# frozen_string_literal: true

require "json"
require "strscan"

module WebhookInbox
  # PayloadView - a stored payload (jsonb's text) as the event page shows it: redacted
  # (Redactor), pretty-printed, numbers as stored, at most MAX_DEPTH levels deep. Any payload
  # jsonb accepts renders: jsonb takes some 10,000 levels (more with a larger max_stack_depth),
  # so deeper text is cut at MAX_DEPTH before Ruby parses it, each deeper container shown as
  # ELIDED, and neither the parser, the redactor nor the printer goes further down.
  class PayloadView
    MAX_DEPTH = 100 # JSON.parse's and JSON.generate's default nesting limit
    ELIDED = "[nested deeper than #{MAX_DEPTH} levels: not shown]"

    # A number as jsonb printed it, written back unchanged: as a Float, 1e400 with a fraction
    # ("1000...0.0") would become Infinity, which JSON.generate refuses.
    Number = Struct.new(:text) do
      def to_json(*) = text
    end

    def initialize(redactor = Redactor.new)
      @redactor = redactor
      @cut = false
    end

    # The payload pretty-printed and redacted. Raises JSON::ParserError only for text that is
    # not JSON (never jsonb's output).
    def render(text)
      value = begin
        parse(text)
      rescue JSON::NestingError
        @cut = true
        parse(self.class.cut(text))
      end
      JSON.pretty_generate(@redactor.redact(value), max_nesting: MAX_DEPTH)
    end

    # Whether the last render left out what lies deeper than MAX_DEPTH.
    def cut?
      @cut
    end

    # text (valid JSON) with every container deeper than MAX_DEPTH replaced by ELIDED, by a
    # scan that keeps a depth count and never recurses, however deep the text.
    def self.cut(text)
      s = StringScanner.new(text)
      out = +""
      depth = 0
      until s.eos?
        if (t = s.scan(/"[^"\\]*(?:\\.[^"\\]*)*"/m) || s.scan(/[^"\[\]{}]+/))
          out << t if depth <= MAX_DEPTH
        elsif (t = s.scan(/[\[{]/))
          depth += 1
          out << (depth <= MAX_DEPTH ? t : ELIDED.to_json) if depth <= MAX_DEPTH + 1
        else
          t = s.getch # ] or }
          out << t if depth <= MAX_DEPTH
          depth -= 1
        end
      end
      out
    end

    private

    def parse(text)
      JSON.parse(text, max_nesting: MAX_DEPTH, decimal_class: Number)
    end
  end
end
