# frozen_string_literal: true

# PrometheusText - a strict parser of the Prometheus text exposition format 0.0.4, for specs
# of what the sidecar's /metrics and WebhookInbox::Metrics.to_prometheus emit. Raises
# PrometheusText::Invalid (with the line number) on anything a careful consumer could
# reject: syntax of names, labels, escapes and values; HELP/TYPE at most once per family and
# before its samples; a family's samples contiguous; no duplicate series; sample names that
# belong to their TYPE; histograms with cumulative buckets, le="+Inf" equal to _count, and
# _sum/_count per label set.
module PrometheusText
  class Invalid < StandardError; end

  Sample = Struct.new(:name, :labels, :value)
  Family = Struct.new(:name, :type, :help, :samples)

  METRIC_NAME = /\A[a-zA-Z_:][a-zA-Z0-9_:]*\z/
  LABEL_NAME = /\A[a-zA-Z_][a-zA-Z0-9_]*\z/
  TYPES = %w[counter gauge histogram summary untyped].freeze
  FLOAT = /\A(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)\z/

  module_function

  # Returns { family name => Family } in the order of appearance.
  def parse(text)
    raise Invalid, "empty exposition" if text.empty?
    raise Invalid, "the last line must end with \\n" unless text.end_with?("\n")

    families = {}
    series = {}
    current = nil
    text.split("\n", -1)[0...-1].each_with_index do |line, i|
      lineno = i + 1
      fail_at = ->(msg) { raise Invalid, "line #{lineno}: #{msg}: #{line.inspect}" }
      fail_at.call("blank line") if line.empty?
      if line.start_with?("#")
        parts = line.split(" ", 4)
        next unless %w[HELP TYPE].include?(parts[1])

        name = parts[2] or fail_at.call("#{parts[1]} without a metric name")
        fail_at.call("bad metric name") unless name.match?(METRIC_NAME)
        fam = families[name] ||= Family.new(name, nil, nil, [])
        fail_at.call("#{parts[1]} after the family's samples") unless fam.samples.empty?
        if parts[1] == "HELP"
          fail_at.call("second HELP") if fam.help
          fam.help = unescape_help(parts[3].to_s, fail_at)
        else
          fail_at.call("second TYPE") if fam.type
          fail_at.call("unknown type") unless TYPES.include?(parts[3])
          fam.type = parts[3]
        end
        current = fam
        next
      end
      sample = parse_sample(line, fail_at)
      fam = family_of(sample.name, families)
      fail_at.call("sample of #{fam.name} after another family's lines") if current && current != fam && !fam.samples.empty?
      fail_at.call("sample name does not fit TYPE #{fam.type} of #{fam.name}") unless fits?(fam, sample.name)
      key = [sample.name, sample.labels.sort]
      fail_at.call("duplicate series") if series[key]
      series[key] = true
      fam.samples << sample
      current = fam
    end
    families.each_value { |fam| check_histogram(fam) if fam.type == "histogram" }
    families
  end

  # The value of one series (labels as a Hash with String keys), or nil.
  def value(families, name, labels = {})
    families.each_value do |fam|
      fam.samples.each { |s| return s.value if s.name == name && s.labels == labels }
    end
    nil
  end

  def parse_sample(line, fail_at)
    m = line.match(/\A([a-zA-Z_:][a-zA-Z0-9_:]*)(\{)?/) or fail_at.call("bad metric name")
    name = m[1]
    rest = line[m[0].length..]
    labels = {}
    if m[2]
      loop do
        break if rest.start_with?("}") && (rest = rest[1..])

        lm = rest.match(/\A([a-zA-Z_][a-zA-Z0-9_]*)="/) or fail_at.call("bad label name")
        rest = rest[lm[0].length..]
        val = +""
        loop do
          c = rest[0] or fail_at.call("unterminated label value")
          rest = rest[1..]
          break if c == '"'

          if c == "\\"
            e = rest[0]
            rest = rest[1..].to_s
            val << { "\\" => "\\", '"' => '"', "n" => "\n" }.fetch(e) { fail_at.call("bad escape \\#{e}") }
          elsif c == "\n"
            fail_at.call("raw newline in a label value")
          else
            val << c
          end
        end
        fail_at.call("label value not UTF-8") unless val.force_encoding(Encoding::UTF_8).valid_encoding?
        fail_at.call("duplicate label #{lm[1]}") if labels.key?(lm[1])
        labels[lm[1]] = val
        if rest.start_with?(",")
          rest = rest[1..]
        elsif !rest.start_with?("}")
          fail_at.call("expected , or } after a label")
        end
      end
    end
    fields = rest.split(/ /, -1) # a literal space: split(" ") would skip leading blanks
    fail_at.call("expected one space, a value and an optional timestamp") unless
      fields[0] == "" && [2, 3].include?(fields.size)
    fail_at.call("bad value #{fields[1].inspect}") unless fields[1].match?(FLOAT)
    fail_at.call("bad timestamp") if fields[2] && !fields[2].match?(/\A-?\d+\z/)
    Sample.new(name, labels, float(fields[1]))
  end

  def float(s)
    case s
    when /\A\+?Inf\z/ then Float::INFINITY
    when "-Inf" then -Float::INFINITY
    when "NaN" then Float::NAN
    else Float(s)
    end
  end

  def unescape_help(s, fail_at)
    s.gsub(/\\(.?)/) { { "\\" => "\\", "n" => "\n" }.fetch(Regexp.last_match(1)) { fail_at.call("bad escape in HELP") } }
  end

  def family_of(name, families)
    base = name.sub(/_(bucket|sum|count)\z/, "")
    fam = families[name]
    fam = families[base] if (!fam || fam.type.nil?) && families[base]&.type == "histogram"
    fam || (families[name] = Family.new(name, "untyped", nil, []))
  end

  def fits?(fam, name)
    case fam.type
    when "histogram" then %w[_bucket _sum _count].any? { |s| name == fam.name + s }
    when "summary" then name == fam.name || %w[_sum _count].any? { |s| name == fam.name + s }
    else name == fam.name
    end
  end

  def check_histogram(fam)
    groups = fam.samples.group_by { |s| s.labels.reject { |k, _| k == "le" }.sort }
    raise Invalid, "histogram #{fam.name} has no samples" if groups.empty?

    groups.each do |labels, samples|
      buckets = samples.select { |s| s.name == "#{fam.name}_bucket" }
      raise Invalid, "#{fam.name}#{labels.to_h}: bucket without le" if buckets.any? { |b| !b.labels.key?("le") }
      les = buckets.map { |b| float(b.labels["le"]) }
      raise Invalid, "#{fam.name}#{labels.to_h}: buckets not in increasing le order" unless les.each_cons(2).all? { |a, b| a < b }
      raise Invalid, "#{fam.name}#{labels.to_h}: no le=\"+Inf\" bucket" unless les.last == Float::INFINITY
      counts = buckets.map(&:value)
      raise Invalid, "#{fam.name}#{labels.to_h}: buckets not cumulative" unless counts.each_cons(2).all? { |a, b| a <= b }
      count = samples.find { |s| s.name == "#{fam.name}_count" }
      sum = samples.find { |s| s.name == "#{fam.name}_sum" }
      raise Invalid, "#{fam.name}#{labels.to_h}: _count or _sum missing" unless count && sum
      raise Invalid, "#{fam.name}#{labels.to_h}: +Inf bucket #{counts.last} != _count #{count.value}" unless counts.last == count.value
      raise Invalid, "#{fam.name}#{labels.to_h}: negative _sum" if sum.value.negative? && counts.last.positive?
    end
  end
end
