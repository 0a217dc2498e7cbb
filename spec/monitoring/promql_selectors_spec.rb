# frozen_string_literal: true

require "spec_helper"
require_relative "../support/promql_selectors"

# PromqlSelectors: the metric names and label names an expression reads, so the shipped
# rules and dashboard can be held to real scrapes. Functions, aggregations, keywords, strings,
# ranges, durations and Grafana's interval variables are not metrics.
RSpec.describe PromqlSelectors do
  def reads(expr)
    r = described_class.scan(expr)
    [r.selectors.map { |s| [s.metric, s.labels] }, r.grouping]
  end

  it "finds selectors with their matchers' labels inside functions and aggregations" do
    expect(reads('sum by (status) (rate(a_total{status="x", reason=~"p|q"}[5m] offset 15m))'))
      .to eq([[["a_total", %w[status reason]]], ["status"]])
    expect(reads("max without (instance) (b) > bool 0.5e3 and on (job) c unless d or absent(e)"))
      .to eq([[["b", []], ["c", []], ["d", []], ["e", []]], %w[instance job]])
  end

  it "reads vector matching, {__name__=...}, histogram buckets and Grafana's range variables" do
    expect(reads('x / ignoring(le) group_left(team) {__name__="y", k!="v"}'))
      .to eq([[["x", []], ["y", ["k"]]], %w[le team]])
    expect(reads("histogram_quantile(0.95, sum by (le) (rate(h_bucket[$__rate_interval])))"))
      .to eq([[["h_bucket", []]], ["le"]])
    expect(reads("sum(rate(z[1h:1m])) by (endpoint) # a comment naming not_a_metric"))
      .to eq([[["z", []]], ["endpoint"]])
  end

  it "refuses what it cannot read instead of guessing" do
    expect { described_class.scan('{job="x"}') }.to raise_error(ArgumentError, /without a fixed metric name/)
    expect { described_class.scan("a{b}") }.to raise_error(ArgumentError, /no operator/)
    expect { described_class.scan("a ; b") }.to raise_error(ArgumentError, /cannot read/)
  end
end
