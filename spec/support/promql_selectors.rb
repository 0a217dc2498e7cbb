# frozen_string_literal: true

require "strscan"

# PromqlSelectors - what a PromQL expression reads: its vector selectors (metric name and the
# label names of their matchers) and the label names of its grouping clauses (by, without, on,
# ignoring, group_left, group_right). A tokenizer, not an evaluator: it assumes an expression
# promtool accepts (rake monitoring:check runs promtool first) and raises ArgumentError on
# what it cannot read rather than guessing. For the specs that hold the shipped alert rules
# and dashboard to what the sidecar and WebhookInbox::Metrics really serve.
module PromqlSelectors
  Selector = Struct.new(:metric, :labels) # labels: the names its matchers use (Array)
  Reads = Struct.new(:selectors, :grouping) # grouping: label names (Array)

  GROUPING = %w[by without on ignoring group_left group_right].freeze
  AGGREGATIONS = %w[sum min max avg group stddev stdvar count count_values bottomk topk quantile].freeze
  KEYWORDS = %w[and or unless offset bool inf nan].freeze
  STRING = /"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/.freeze
  IDENT = /[a-zA-Z_:][a-zA-Z0-9_:]*/.freeze
  LABEL = /[a-zA-Z_][a-zA-Z0-9_]*/.freeze

  module_function

  # Returns the Reads of expr (a String). Raises ArgumentError on a token it does not know.
  def scan(expr)
    s = StringScanner.new(expr)
    reads = Reads.new([], [])
    until s.eos?
      next if s.skip(/\s+|#[^\n]*/) || s.skip(STRING)
      next if s.skip(/\[[^\]]*\]/)                          # a range or a subquery
      next if s.skip(/(?:0[xX][0-9a-fA-F]+|\d[\w.]*|\.\d\w*)/) # numbers and durations (5m, 1e3)
      next if s.skip(%r{==|!=|<=|>=|=~|!~|[-+*/%^<>(),@]})

      if s.check(/\{/)
        reads.selectors << selector_without_name(matchers(s))
      elsif (word = s.scan(IDENT))
        word(s, word, reads)
      else
        raise ArgumentError, "PromQL: cannot read #{s.rest[0, 20].inspect} in #{expr.inspect}"
      end
    end
    reads
  end

  # Every metric name in exprs (an Array of Strings), sorted.
  def metric_names(exprs)
    exprs.flat_map { |e| scan(e).selectors.map(&:metric) }.uniq.sort
  end

  def word(s, word, reads)
    down = word.downcase
    if GROUPING.include?(down)
      reads.grouping.concat(label_list(s)) if s.check(/\s*\(/)
    elsif KEYWORDS.include?(down)
      nil
    elsif s.check(/\s*\(/) || (AGGREGATIONS.include?(down) && s.check(/\s*(?:by|without)\b/i))
      nil # a function or an aggregation
    else
      s.skip(/\s*/)
      reads.selectors << Selector.new(word, s.check(/\{/) ? matchers(s).map(&:first) : [])
    end
  end

  # [[label, op, value], ...] of the {...} at the scanner.
  def matchers(s)
    s.skip(/\{\s*/)
    out = []
    until s.skip(/\}/)
      label = s.scan(LABEL) or raise ArgumentError, "PromQL: bad label matcher at #{s.rest[0, 20].inspect}"
      op = s.skip(/\s*/) && s.scan(/=~|!~|!=|=/) or raise ArgumentError, "PromQL: no operator after #{label}"
      value = s.skip(/\s*/) && s.scan(STRING) or raise ArgumentError, "PromQL: no string after #{label}#{op}"
      out << [label, op, value[1...-1]]
      s.skip(/\s*,?\s*/)
    end
    out
  end

  def selector_without_name(matchers)
    name = matchers.find { |l, op, _| l == "__name__" && op == "=" } or
      raise ArgumentError, "PromQL: a selector without a fixed metric name"
    Selector.new(name[2], matchers.map(&:first) - ["__name__"])
  end

  def label_list(s)
    s.skip(/\s*\(/)
    list = s.scan(/[^)]*/)
    s.skip(/\)/) or raise ArgumentError, "PromQL: unclosed label list"
    list.split(",").map(&:strip).reject(&:empty?)
  end
end
