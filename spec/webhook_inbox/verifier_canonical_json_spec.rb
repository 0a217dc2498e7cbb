# frozen_string_literal: true

require "spec_helper"
require "json"
require "open3"

# Didit V2 canonical JSON must equal, byte for byte, what Didit's Python sender computes:
# json.dumps(shorten_floats(json.loads(body)), sort_keys=True, separators=(",",":"),
# ensure_ascii=False). Random documents are written as raw text (escapes, duplicates,
# whitespace, number spellings chosen here) and canonicalized by Python and by the C core.
RSpec.describe "WebhookInbox::Verifier.didit_canonical_json" do
  PYTHON_CANON = <<~PY
    import json, sys
    def shorten_floats(o):
        if isinstance(o, float) and o.is_integer():
            return int(o)
        if isinstance(o, dict):
            return {k: shorten_floats(v) for k, v in o.items()}
        if isinstance(o, list):
            return [shorten_floats(v) for v in o]
        return o
    out = []
    for doc in json.load(sys.stdin):
        try:
            out.append(json.dumps(shorten_floats(json.loads(doc)), sort_keys=True,
                                  separators=(",", ":"), ensure_ascii=False))
        except ValueError:
            out.append(None)
    sys.stdout.buffer.write(json.dumps(out, ensure_ascii=True).encode())
  PY

  def python3
    @python3 ||= %w[python3 python].find { |p| system(p, "-c", "import json", out: File::NULL, err: File::NULL) }
  end

  def python_canon(docs)
    out, status = Open3.capture2(python3, "-c", PYTHON_CANON, stdin_data: JSON.generate(docs))
    raise "python failed" unless status.success?

    JSON.parse(out)
  end

  # Generator of JSON text with the traps Didit's docs list.
  class DocGen
    KEYS = ["10", "9", "2", "a", "A", "b", "aa", "é", "e\u0301", "北", "😀", "\u{ffff}", "\u{10000}", "z", "_", "", "a b", "\"q\"", "\\", "\u0001"].freeze
    CHARS = ["a", "Z", "0", " ", "/", "\"", "\\", "\n", "\t", "\u0000", "\u0001", "\u001f", "\u007f", "é", "北", "😀", "\u2028", "\u{10ffff}", "\u{fffd}"].freeze

    def initialize(seed) = @r = Random.new(seed)
    def pick(a) = a[@r.rand(a.size)]
    def ws = pick(["", "", "", " ", "\n  ", "\t"])

    def str(s)
      out = +'"'
      s.each_char do |c|
        cp = c.ord
        out << case @r.rand(4)
               when 0 # \u escape (surrogate pair beyond the BMP)
                 if cp > 0xffff
                   v = cp - 0x10000
                   format("\\u%04x\\u%04X", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff))
                 else
                   format(@r.rand(2).zero? ? "\\u%04x" : "\\u%04X", cp)
                 end
               else
                 case c
                 when '"' then '\\"'
                 when "\\" then "\\\\"
                 when "/" then @r.rand(2).zero? ? "\\/" : "/"
                 when "\n" then "\\n"
                 when "\t" then "\\t"
                 when "\b" then "\\b"
                 when "\f" then "\\f"
                 when "\r" then "\\r"
                 else cp < 0x20 ? format("\\u%04x", cp) : c
                 end
               end
      end
      out << '"'
    end

    def number
      case @r.rand(14)
      when 0 then @r.rand(-1000..1000).to_s
      when 1 then (@r.rand(2).zero? ? "-" : "") + (10**@r.rand(15..40) + @r.rand(10**12)).to_s
      when 2 then pick(["0", "-0", "0.0", "-0.0", "100.0", "1e2", "1E+2", "1.5e-7", "1e-07", "95.4", "96.15", "1e16", "1e15",
                        "123456789012345678", "0.1", "1e-5", "1e-4", "12345678901234567890.0", "5e-324", "1.7976931348623157e308",
                        "2.5e-5", "0.00001", "1e22", "1e23", "9007199254740993", "9007199254740993.0", "1e400", "-1e400", "1e-400"])
      when 3 then format("%.17g", @r.rand * 10**@r.rand(-8..20))
      when 4 then (@r.rand * 1000).round(@r.rand(0..6)).to_s
      when 5 then format("%.#{@r.rand(1..17)}e", (@r.rand - 0.5) * 10**@r.rand(-300..300))
      when 6 then [@r.bytes(8)].pack("a8").unpack1("E").then { |f| f.finite? ? f.to_s : "1.0" }
      else format("%d.%0#{@r.rand(1..3)}d", @r.rand(-99..99), @r.rand(0..999))
      end
    end

    def string_value = str(Array.new(@r.rand(0..8)) { pick(CHARS) }.join)

    def value(depth = 0)
      k = depth > 4 ? @r.rand(5) : @r.rand(8)
      case k
      when 0 then number
      when 1 then string_value
      when 2 then pick(%w[true false null])
      when 3, 4 then number
      when 5 then "[#{ws}#{Array.new(@r.rand(0..4)) { value(depth + 1) }.join("#{ws},#{ws}")}#{ws}]"
      else
        members = Array.new(@r.rand(0..6)) { "#{str(pick(KEYS))}#{ws}:#{ws}#{value(depth + 1)}" }
        "{#{ws}#{members.join("#{ws},#{ws}")}#{ws}}"
      end
    end

    def document = "#{ws}{#{Array.new(@r.rand(1..8)) { "#{str(pick(KEYS))}:#{value(1)}" }.join(",")}}#{ws}"
  end

  it "is byte-identical to Python for 3000 generated documents" do
    skip "python3 not found: cannot compare with Python's json.dumps" unless python3
    gen = DocGen.new(Integer(ENV.fetch("CANON_SEED", 20_240_601)))
    docs = Array.new(3000) { gen.document }
    expected = python_canon(docs)
    mismatches = docs.each_index.reject do |i|
      next true if expected[i].nil?

      want = expected[i].encode("UTF-8")
      if want.bytesize > 2 * docs[i].bytesize + 4096 # beyond the verifier's output bound: refused
        begin
          WebhookInbox::Verifier.didit_canonical_json(docs[i])
          false
        rescue WebhookInbox::VerificationError => e
          e.reason == :payload_too_large
        end
      else
        WebhookInbox::Verifier.didit_canonical_json(docs[i]) == want
      end
    end
    expect(expected.compact.size).to eq(docs.size)
    expect(mismatches.first(3).map { |i| [docs[i], expected[i], WebhookInbox::Verifier.didit_canonical_json(docs[i])] }).to eq([])
  end

  it "prints floats like Python repr, including next to powers of two (17-digit inputs)" do
    skip "python3 not found: cannot compare with Python's float repr" unless python3
    script = <<~PY
      import json, random
      r = random.Random(11)
      xs = [2.0 ** -n for n in range(1, 1075)] + [-3 * 2.0 ** -n for n in range(1, 1000)]
      xs += [r.uniform(-1, 1) * 10 ** r.randint(-320, 20) for _ in range(5000)]
      docs = ["[%s]" % ("%.17g" % x) for x in xs]
      f = lambda x: int(x) if isinstance(x, float) and x.is_integer() else x
      print(json.dumps([[d, json.dumps([f(x) for x in json.loads(d)], separators=(",", ":"))] for d in docs]))
    PY
    out, status = Open3.capture2(python3, "-c", script)
    expect(status).to be_success
    pairs = JSON.parse(out)
    expect(pairs.size).to be > 7000
    bad = pairs.reject { |doc, want| WebhookInbox::Verifier.didit_canonical_json(doc) == want }
    expect(bad.first(3)).to eq([])
  end

  it "handles Didit's listed traps" do
    canon = ->(s) { WebhookInbox::Verifier.didit_canonical_json(s) }
    expect(canon.('{"9":1,"10":2,"2":3}')).to eq('{"10":2,"2":3,"9":1}')
    expect(canon.(%({"\\ud83d\\ude00":1,"\\uffff":2}))).to eq(%({"\u{ffff}":2,"😀":1})) # code point, not UTF-16, order
    expect(canon.('{"u":"https:\\/\\/x.y\\/z","e":"\\u00e9"}')).to eq('{"e":"é","u":"https://x.y/z"}')
    expect(canon.('[12345678901234567890123456789,9007199254740993,-0]')).to eq("[12345678901234567890123456789,9007199254740993,0]")
    expect(canon.('[100.0,-0.0,1e-07,1e16,95.4,1E+2,0.1,1e-4,1e-5]')).to eq("[100,0,1e-07,10000000000000000,95.4,100,0.1,0.0001,1e-05]")
    expect(canon.('{"a":1,"a":2}')).to eq('{"a":2}')
    expect(canon.(%(["\\u0001\\b\\f\\n\\r\\t\\"\\\\\u007f"]))).to eq(%(["\\u0001\\b\\f\\n\\r\\t\\"\\\\\u007f"]))
  end

  it "rejects what Python could not have produced" do
    ['{"a":1', '{"a":01}', "[1,]", '{"a":"\\ud800"}', "{\"a\":\"\xff\"}".b, "nan", '{"a":"\\x"}', "[#{"[" * 600}#{"]" * 600}]"].each do |bad|
      expect { WebhookInbox::Verifier.didit_canonical_json(bad) }
        .to raise_error(WebhookInbox::VerificationError) { |e| expect(e.reason).to eq(:malformed_payload) }
    end
  end
end
